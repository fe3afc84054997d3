"""fabricmanager: NVIDIA Fabric Manager at exactly the driver's version (NVSwitch SKUs).

Refuses the host (no install) when a fabric-manager package's upstream version is not
spec.driver_version — defence in depth beside the matrix rule. Installs and holds the
packages, enables and starts the service, and restarts it only when its packages changed
in this run while it was already running, and only once the pinned driver is loaded
(this role runs after nvidia_driver's reboot).
"""

from __future__ import annotations

import logging

from pyinfra import host
from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.nvidia import NvidiaModule
from gpuctl.facts.packages import read_packages
from gpuctl.facts.system import ServiceStates
from gpuctl.operations import ensure_services, fail_host, install_and_hold, restart_services, role_knobs

log = logging.getLogger(__name__)


def version_mismatches(packages: tuple, driver_version: str) -> list[str]:  # type: ignore[type-arg]
    """'name version' of each package whose upstream version is not the driver's."""
    return [f"{p.name} {p.version}" for p in packages if p.upstream != driver_version]


@deploy("fabricmanager")
def install() -> None:
    spec = node_spec()
    comp = spec.components["fabricmanager"]
    if not comp.enabled:
        log.info("%s: fabricmanager skipped: %s", host.name, comp.reason)
        return
    role_knobs("fabricmanager")  # refuses a unit name given in host data / --extra (the spec holds it)
    ver = spec.driver_version
    bad = version_mismatches(comp.packages, ver)
    if bad:
        fail_host(name=f"Refuse fabric manager packages not at driver version {ver}",
                  reason=f"fabric manager must be exactly the driver's version {ver}; the spec pins "
                         + ", ".join(bad))
        return
    service = spec.service("fabricmanager")
    snap = read_packages(spec.package_manager)
    services = host.get_fact(ServiceStates, names=(service,))
    was_running = services.get(service) is not None and services[service].active == "active"

    installed = install_and_hold(f"nvidia-fabricmanager {ver}", comp.packages, snap)
    ensure_services(name=f"Enable and start {service} {ver}", names=[service], states=services)

    def restart_needed() -> bool:
        return (installed.did_change() and was_running
                and host.get_fact(NvidiaModule).loaded_version == ver)

    restart_services(name=f"Restart {service} after the upgrade to {ver}", names=[service], _if=restart_needed)
