"""The lab: emulated bare-metal nodes (QEMU/TCG) for rehearsal and testing.

This package owns the node infrastructure: the cached Debian base image
(`image`), the QEMU nodes and their fabric switch (`nodes`), the apt cache and
the stand-in repository server (`netcache`), the lab's state file (`state`) and
SSH access (`ssh`). The public API is re-exported here lazily so that
``from gpuctl.lab import up, down, status, ssh_run`` works without importing
QEMU plumbing for commands that never touch the lab.
"""

from __future__ import annotations

import importlib
import shutil
from typing import Any

from gpuctl.errors import ExecutionError

#: Debian packages the lab needs on the host (CI installs exactly these).
REQUIRED_DEBIAN_PACKAGES: tuple[str, ...] = (
    "qemu-system-x86",
    "qemu-utils",
    "debootstrap",
    "vde2",
    "e2fsprogs",
    "openssh-client",
    "gnupg",
    "dpkg-dev",
    "reprepro",
)

#: Host binaries the lab runs, and the Debian package that provides each.
REQUIRED_BINARIES: dict[str, str] = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "debootstrap": "debootstrap",
    "vde_switch": "vde2",
    "mkfs.ext4": "e2fsprogs",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "chroot": "coreutils",
}


def missing_binaries(names: dict[str, str] | None = None) -> dict[str, str]:
    """The subset of `names` (binary -> package) not found on PATH."""
    wanted = REQUIRED_BINARIES if names is None else names
    found: dict[str, str] = {}
    for binary, package in wanted.items():
        if shutil.which(binary) is None and shutil.which(binary, path="/usr/sbin:/sbin") is None:
            found[binary] = package
    return found


def check_host_tools(names: dict[str, str] | None = None) -> None:
    """Raise ExecutionError naming every missing binary and the package to install."""
    missing = missing_binaries(names)
    if not missing:
        return
    packages = sorted(set(missing.values()))
    raise ExecutionError(
        "the lab needs host tools that are not installed: "
        + ", ".join(f"{b} (Debian package {p})" for b, p in sorted(missing.items()))
        + f"; install them with: apt-get install -y {' '.join(packages)}"
    )


_LAZY = {
    "up": "gpuctl.lab.nodes",
    "down": "gpuctl.lab.nodes",
    "status": "gpuctl.lab.nodes",
    "kill_node": "gpuctl.lab.nodes",
    "start_node": "gpuctl.lab.nodes",
    "render_lab_inventory": "gpuctl.lab.nodes",
    "ssh_run": "gpuctl.lab.ssh",
    "wait_for_ssh": "gpuctl.lab.ssh",
    "LabState": "gpuctl.lab.state",
    "NodeState": "gpuctl.lab.state",
    "load_state": "gpuctl.lab.state",
    "image_root": "gpuctl.lab.image",
    "guest_kernel_version": "gpuctl.lab.image",
    "repo_dir": "gpuctl.lab.netcache",
}

__all__ = [
    "REQUIRED_BINARIES",
    "REQUIRED_DEBIAN_PACKAGES",
    "check_host_tools",
    "missing_binaries",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'gpuctl.lab' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)
