"""lustre_client: the Lustre client at the matrix's version (pinned, held), LNet networks from the
inventory, the module checked for the running kernel, and the filesystem mounted with `_netdev`
after the fabric.

Success is claimed only when `modinfo -k $(uname -r) lustre` shows the module built for the
running kernel at the pinned version (DKMS builds can fail quietly on a new kernel).
"""

from __future__ import annotations

import logging
import re
from io import StringIO
from typing import Any

from pyinfra import host, state
from pyinfra.api import deploy, operation
from pyinfra.operations import files

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.facts.storage import KernelModuleVersion, MountSource, TextFile
from gpuctl.operations import fail_host, fstab_fields, hold_packages, install_packages, render, role_knobs, sh
from gpuctl.spec import LustreSpec

log = logging.getLogger(__name__)


def defaults() -> dict[str, Any]:
    """defaults.yaml with overrides (host data > --extra > inventory role_vars)."""

    return role_knobs("lustre_client")


def lnet_interfaces(lnet: str) -> list[str]:
    """Interfaces named in an LNet networks string: "o2ib0(ib0,ib1),tcp0(eno1.100)" → [ib0, ib1, eno1.100]."""
    return [i.strip() for group in re.findall(r"\(([^)]*)\)", lnet) for i in group.split(",") if i.strip()]


def mount_options(lustre: LustreSpec, extra: str) -> str:
    opts = [o for o in lustre.mount_options.split(",") if o]
    for o in extra.split(","):
        if o and o not in opts:
            opts.append(o)
    for i in lnet_interfaces(lustre.lnet):
        o = f"x-systemd.requires=sys-subsystem-net-devices-{i}.device"
        if o not in opts:
            opts.append(o)
    return ",".join(opts)


@operation()
def rendered(path: str, content: str) -> Any:
    if "\n".join(host.get_fact(TextFile, path=path)).rstrip("\n") == content.rstrip("\n"):
        host.noop(f"{path} is up to date")
        return
    yield from files.put._inner(src=StringIO(content), dest=path, mode="644")


@operation()
def module_built(module: str, version: str) -> Any:
    """MODULE built for the running kernel at VERSION, checked when the operation runs."""
    found = host.get_fact(KernelModuleVersion, module=module)
    if found == version:
        host.noop(f"{module} {version} is built for the running kernel")
        return
    if state.is_executing:
        yield from fail_host._inner(reason=f"{module} for the running kernel is {found or 'missing'}, not {version}: "
                                       "the DKMS/kmod build did not produce it (see `dkms status`)")
        return
    yield sh(":", "check", module, version) + ' is built for "$(uname -r)"'


@operation()
def fstab_line(line: str, mount: str) -> Any:
    if line.split() in [x.split() for x in host.get_fact(TextFile, path="/etc/fstab")]:
        host.noop(f"/etc/fstab mounts {mount}")
        return
    m = sh(mount)
    yield (f"awk -v m={m} '$1 ~ /^#/ || $2 != m' /etc/fstab > /etc/fstab.gpuctl && "
           f"printf '%s\\n' {sh(line)} >> /etc/fstab.gpuctl && mv /etc/fstab.gpuctl /etc/fstab && "
           "(systemctl daemon-reload 2>/dev/null || true)")


@operation()
def mounted(source: str, mount: str) -> Any:
    now = host.get_fact(MountSource, path=mount)
    if now.get("fstype") == "lustre" and now.get("source") == source:
        host.noop(f"{source} is mounted at {mount}")
        return
    if now:
        yield from fail_host._inner(reason=f"{mount} is mounted from {now.get('source')}, not {source}")
        return
    yield f"{sh('mkdir', '-p', mount)} && {sh('mount', mount)}"


@deploy("lustre_client: install")
def install() -> None:
    """Lustre client packages, LNet, module check, fstab mount after the fabric."""
    spec = node_spec()
    comp = spec.components.get("lustre")
    lustre = spec.lustre
    if lustre is None or comp is None or not comp.enabled:
        return
    d = defaults()
    label = f"Lustre client {comp.version}"
    snap = read_packages(spec.package_manager)
    install_packages(name=f"Install {label}", packages=list(comp.packages), snapshot=snap, label=label)
    hold_packages(name=f"Hold {label} packages", packages=list(comp.packages), snapshot=snap)
    rendered(name=f"Set LNet networks {lustre.lnet}", path=d["lustre_client_modprobe_conf"],
             content=render("lustre_client", "lustre.conf.j2", lnet=lustre.lnet))
    module_built(name=f"Check the {d['lustre_client_module']} {comp.version} module is built for the running kernel",
                 module=d["lustre_client_module"], version=comp.version)
    opts = mount_options(lustre, d["lustre_client_mount_options_extra"])
    fstab_line(name=f"Mount {lustre.source} at {lustre.mount} from /etc/fstab (_netdev, after the fabric)",
               line=fstab_fields(lustre.source, lustre.mount, "lustre", opts, 0, 0), mount=lustre.mount)
    mounted(name=f"Mount {lustre.mount}", source=lustre.source, mount=lustre.mount)
