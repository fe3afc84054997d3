"""dcgm: DCGM pinned and held; nvidia-dcgm (nv-hostengine) enabled and running,
restarted only when its packages changed while it was running."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.facts.system import ServiceStates
from gpuctl.operations import ensure_services, install_and_hold, restart_services, role_knobs


@deploy("dcgm")
def install() -> None:
    spec = node_spec()
    role_knobs("dcgm")  # refuses a unit name given in host data / --extra (the spec holds it)
    comp = spec.components["dcgm"]
    service = spec.service("dcgm")
    snap = read_packages(spec.package_manager)
    services = host.get_fact(ServiceStates, names=(service,))
    was_running = service in services and services[service].active == "active"
    installed = install_and_hold(f"DCGM {comp.version}", comp.packages, snap)
    ensure_services(name=f"Enable and start {service} (DCGM {comp.version})", names=[service], states=services)
    restart_services(name=f"Restart {service} after the upgrade to DCGM {comp.version}", names=[service],
                     _if=lambda: was_running and installed.did_change())
