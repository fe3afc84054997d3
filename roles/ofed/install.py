"""ofed: DOCA-OFED / MLNX_OFED pinned and held; an install that already matches is
skipped and reported ("DOCA-OFED 3.2.1 already installed"). Always before peermem and GDS."""

from __future__ import annotations

import logging

from pyinfra import host
from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.operations import install_and_hold, missing_packages

log = logging.getLogger(__name__)


def ofed_flavour(names: list[str]) -> str:
    return "DOCA-OFED" if any(n.startswith("doca") for n in names) else "MLNX_OFED"


@deploy("ofed")
def install() -> None:
    spec = node_spec()
    comp = spec.components["ofed"]
    if not comp.enabled:
        log.info("%s: ofed skipped: %s", host.name, comp.reason)
        return
    label = f"{ofed_flavour([p.name for p in comp.packages])} {comp.version}"
    snap = read_packages(spec.package_manager)
    if not missing_packages(comp.packages, snap):
        log.info("%s: %s already installed; install skipped", host.name, label)
    install_and_hold(label, comp.packages, snap)
