"""Pins from the lock: the peers' majority entry (`consensus_entry`) and a NodeSpec with the
lock's package versions (`pin_from_lock`, `pins_changed`).
"""


from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from pydantic import ValidationError

from gpuctl.errors import InputError
from gpuctl.lock.model import LockedPackage, LockFile, NodeLock
from gpuctl.matrix import Package
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)


# -------------------------------------------------------------------------- pins


def consensus_entry(lock: LockFile, exclude: str | None = None) -> NodeLock:
    """The peers' majority entry: per package the version most nodes have (ties: first node
    in lock order). Used to rebuild a node whose own entry is missing or to be replaced."""
    peers = [e for n, e in lock.nodes.items() if n != exclude]
    if not peers:
        raise InputError(f"the lock has no node other than {exclude} to take pins from")
    packages: dict[str, dict[str, LockedPackage]] = {}
    for comp in dict.fromkeys(c for e in peers for c in e.packages):
        names = dict.fromkeys(name for e in peers for name in e.packages.get(comp, {}))
        packages[comp] = {}
        for name in names:
            versions = Counter(e.packages[comp][name].version for e in peers if name in e.packages.get(comp, {}))
            best = versions.most_common(1)[0][0]
            packages[comp][name] = LockedPackage(version=best, held=True)

    def majority(values: list[Any]) -> Any:
        return Counter(values).most_common(1)[0][0] if values else None

    return NodeLock(
        read_at="consensus", os=majority([e.os for e in peers]), kernel=majority([e.kernel for e in peers]),
        nvidia_module=majority([e.nvidia_module for e in peers]), packages=packages,
        firmware={k: majority([e.firmware.get(k) for e in peers if k in e.firmware])
                  for k in dict.fromkeys(k for e in peers for k in e.firmware)},
        files={},
    )


def pin_from_lock(spec: NodeSpec, entry: NodeLock) -> NodeSpec:
    """`spec` with every component package version replaced by the version in `entry`.

    The roles install `spec.components[*].packages` exactly, so this is how lock pins
    reach them (no role changes). A package the lock does not know, or recorded as not
    installed, keeps the matrix version. Raises InputError for a version the package
    model rejects (a lock edited by hand)."""
    locked = entry.package_versions()
    components = {}
    for name, comp in spec.components.items():
        pkgs = []
        for p in comp.packages:
            v = locked.get(p.name)
            if v is not None and v != p.version:
                try:
                    p = Package(name=p.name, version=v)
                except ValidationError as exc:
                    raise InputError(f"lock: {p.name} version {v!r} is not an exact version") from exc
            pkgs.append(p)
        components[name] = comp.model_copy(update={"packages": tuple(pkgs)})
    return spec.model_copy(update={"components": components})


def pins_changed(spec: NodeSpec, pinned: NodeSpec) -> list[str]:
    """'name: matrix → lock' for every package whose pin the lock changed."""
    before = {p.name: p.version for p in spec.all_packages()}
    return [f"{p.name}: {before[p.name]} → {p.version}" for p in pinned.all_packages()
            if before.get(p.name) != p.version]
