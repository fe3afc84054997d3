"""peermem: nvidia-peermem loaded at boot (modules-load.d) and now (modprobe when not loaded)."""

from __future__ import annotations

import logging

from pyinfra import host
from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.system import FileStates, LoadedModules
from gpuctl.operations import load_modules, render, role_knobs, write_file

log = logging.getLogger(__name__)


@deploy("peermem")
def install() -> None:
    spec = node_spec()
    if spec.roles.get("peermem"):
        log.info("%s: peermem skipped: %s", host.name, spec.roles["peermem"])
        return
    k = role_knobs("peermem")
    module, conf = str(k["peermem_module"]), str(k["peermem_modules_load_file"])
    files = host.get_fact(FileStates, paths=(conf,))
    loaded = host.get_fact(LoadedModules)
    write_file(name=f"Load {module} at boot", path=conf,
               content=render("peermem", "modules-load.conf.j2", managed_by="peermem", module=module), states=files)
    load_modules(name=f"Load {module} (driver {spec.driver_version})", names=[module], loaded=loaded)
