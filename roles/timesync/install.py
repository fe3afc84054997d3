"""timesync: chrony installed (distribution version) and its daemon enabled and running."""

from __future__ import annotations

import logging

from pyinfra import host
from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.facts.system import ServiceStates
from gpuctl.operations import ensure_services, install_packages, role_knobs

log = logging.getLogger(__name__)


@deploy("timesync")
def install() -> None:
    spec = node_spec()
    if spec.roles.get("timesync"):
        log.info("%s: timesync skipped: %s", host.name, spec.roles["timesync"])
        return
    k = role_knobs("timesync")
    packages = [str(p) for p in k["timesync_packages"][spec.package_manager]]  # type: ignore[index]
    service = spec.service("timesync")
    snap = read_packages(spec.package_manager)
    services = host.get_fact(ServiceStates, names=(service,))
    install_packages(name=f"Install {', '.join(packages)}", packages=packages, snapshot=snap, label="chrony")
    ensure_services(name=f"Enable and start {service}", names=[service], states=services)
