"""gds: nvidia-fs + GDS packages pinned and held, /etc/cufile.json, nvidia-fs loaded."""

from __future__ import annotations

import json
import logging

from pyinfra import host
from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.facts.system import FileStates, LoadedModules
from gpuctl.operations import install_and_hold, load_modules, render, role_knobs, whole_number, write_file

log = logging.getLogger(__name__)


@deploy("gds")
def install() -> None:
    spec = node_spec()
    comp = spec.components["gds"]
    if not comp.enabled:
        log.info("%s: gds skipped: %s", host.name, comp.reason)
        return
    k = role_knobs("gds")
    cufile, conf, module = str(k["gds_cufile_path"]), str(k["gds_modules_load_file"]), str(k["gds_module"])
    snap = read_packages(spec.package_manager)
    files = host.get_fact(FileStates, paths=(cufile, conf))
    loaded = host.get_fact(LoadedModules)
    install_and_hold(f"GPUDirect Storage (nvidia-fs) {comp.version}", comp.packages, snap)
    rdma = [p.address.split("/")[0] for p in spec.fabric.ports if p.address]
    sizes = {n: whole_number(k[f"gds_{n}"], f"gds_{n}") for n in (
        "max_direct_io_size_kb", "max_device_cache_size_kb", "max_device_pinned_mem_size_kb", "poll_mode_max_size_kb")}
    content = render(
        "gds", "cufile.json.j2", version=comp.version, logging_dir=k["gds_logging_dir"],
        logging_level=k["gds_logging_level"], **sizes,
        use_poll_mode=json.dumps(bool(k["gds_use_poll_mode"])),
        allow_compat_mode=json.dumps(bool(k["gds_allow_compat_mode"])), rdma_dev_addr_list=json.dumps(rdma))
    json.loads(content)  # a template edit that breaks JSON fails here, not on the node
    write_file(name=f"Write {cufile} (GDS {comp.version})", path=cufile, content=content, states=files)
    write_file(name=f"Load {module} at boot", path=conf,
               content=render("gds", "modules-load.conf.j2", managed_by="gds", module=module), states=files)
    load_modules(name=f"Load {module} {comp.version}", names=[module], loaded=loaded)
