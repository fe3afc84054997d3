"""Installed packages and their holds, read in one command per role.

`DebPackages` (dpkg) and `RpmPackages` (rpm + dnf versionlock) both give a
`PackageSnapshot` (`gpuctl.parsers.packages`, which parses the output): name →
`InstalledPackage(version, held)`; a NodeSpec pin compares by plain string equality — the
same comparison that keeps a converged host a no-op.

`read_packages(spec)` picks the fact for the host's package manager; roles call it once
at the top of their deploy and hand the snapshot to `gpuctl.operations`.
"""

from __future__ import annotations

import logging
from typing import Any
from weakref import WeakKeyDictionary

from pyinfra import host
from pyinfra.api import FactBase
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_state

from gpuctl.facts import marker
from gpuctl.parsers.packages import (
    DPKG_QUERY,
    RPM_QUERY,
    PackageSnapshot,
    parse_dnf_modules,
    parse_dpkg,
    parse_rpm,
)

log = logging.getLogger(__name__)


class DebPackages(FactBase[PackageSnapshot]):
    """Every installed deb with its exact version and hold state (one dpkg-query)."""

    def command(self) -> str:
        return marker("packages") + " " + DPKG_QUERY

    @staticmethod
    def default() -> PackageSnapshot:
        return PackageSnapshot("apt")

    def process(self, output: list[str]) -> PackageSnapshot:
        return parse_dpkg(output)


class RpmPackages(FactBase[PackageSnapshot]):
    """Every installed rpm as EPOCH:VERSION-RELEASE, and dnf's versionlock list."""

    def command(self) -> str:
        return marker("packages") + " " + RPM_QUERY

    @staticmethod
    def default() -> PackageSnapshot:
        return PackageSnapshot("dnf")

    def process(self, output: list[str]) -> PackageSnapshot:
        return parse_rpm(output)


#: Snapshots read while preparing, per State and host. Nothing runs on a host until every
#: role has prepared, so the listing read for the first role holds for the others: one
#: dpkg-query per host, not one per role (5 of a no-op provision's 11 remote commands per
#: node with base,nvidia_repo,cuda,cudnn,nccl,dcgm, each ~300 lines parsed; issue 18).
#: Once operations execute, every call reads the host again.
_PREPARED: WeakKeyDictionary[Any, dict[tuple[str, str], PackageSnapshot]] = WeakKeyDictionary()


def read_packages(package_manager: str) -> PackageSnapshot:
    """The current host's package snapshot (one remote command per host while preparing)."""
    fact = RpmPackages if package_manager == "dnf" else DebPackages
    current = ctx_state.get()
    if current is None or current.current_stage != StateStage.Prepare:
        return host.get_fact(fact)
    key = (host.name, fact.__name__)
    seen = _PREPARED.setdefault(current, {})
    if key not in seen:
        seen[key] = host.get_fact(fact)
    return seen[key]


class DnfModuleStreams(FactBase[dict[str, str]]):
    """Enabled dnf module streams, from dnf's state files (no metadata download)."""

    def command(self) -> str:
        return marker("dnf-modules") + " cat /etc/dnf/modules.d/*.module 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_dnf_modules(output)
