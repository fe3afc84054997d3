"""The configuration files the roles render, in one list (`MANAGED_FILES`): which apply to a
node (`managed_files`) and which hold node-specific content (`per_node_file`).
"""


from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass
from functools import cache
from typing import Any

from gpuctl.paths import roles_dir
from gpuctl.spec import NodeSpec
from gpuctl.yamlsrc import load_yaml

log = logging.getLogger(__name__)


# ------------------------------------------------------------------- managed files


@dataclass(frozen=True)
class ManagedFile:
    """A configuration file a role renders. `path` is a literal path or a glob; `knob` names
    the role default that holds the path (roles/<role>/defaults.yaml), so the role and the
    lock read the same value; `per_node` files hold node-specific content (addresses,
    array UUIDs) and are compared with the node's own lock entry, never with its peers."""

    role: str
    path: str
    knob: str | None = None
    per_node: bool = False
    when: str = "always"  # always | apt | dnf | raid | network | train_env


# The one list of rendered configuration files (order = report order).
MANAGED_FILES: tuple[ManagedFile, ...] = (
    ManagedFile("base", "/etc/modprobe.d/*gpuctl*"),
    ManagedFile("base", "/etc/sysctl.d/90-gpuctl.conf", knob="base_sysctl_file"),
    ManagedFile("base", "/etc/security/limits.d/90-gpuctl-memlock.conf", knob="base_limits_file"),
    ManagedFile("base", "/etc/default/grub.d/gpuctl.cfg", knob="base_grub_dropin", when="apt"),
    ManagedFile("base", "/etc/apt/apt.conf.d/51gpuctl-unattended-upgrades", knob="base_unattended_upgrades_file",
                when="apt"),
    ManagedFile("nvidia_repo", "/etc/apt/sources.list.d/*gpuctl*", when="apt"),
    ManagedFile("nvidia_repo", "/etc/apt/apt.conf.d/*gpuctl-proxy*", when="apt"),
    ManagedFile("nvidia_repo", "/etc/yum.repos.d/*gpuctl*", when="dnf"),
    ManagedFile("network", "/etc/nccl.conf", knob="network_nccl_conf"),
    ManagedFile("nvme_raid", "/etc/mdadm/mdadm.conf", knob="nvme_raid_mdadm_conf", per_node=True, when="raid"),
    ManagedFile("network", "/etc/modules-load.d/gpuctl-network.conf", knob="network_modules_file", when="network"),
    ManagedFile("network", "/etc/systemd/system/gpuctl-*", when="network"),
    ManagedFile("network", "/usr/local/sbin/gpuctl-roce-qos", knob="network_roce_qos_script", when="network"),
    ManagedFile("network", "/etc/network/interfaces.d/gpuctl-*", per_node=True, when="network"),
    ManagedFile("network", "/etc/netplan/60-gpuctl.yaml", knob="network_netplan_file", per_node=True, when="network"),
    ManagedFile("network", "/etc/NetworkManager/system-connections/gpuctl-*", per_node=True, when="network"),
    ManagedFile("train_env", "/etc/profile.d/gpuctl-train-env.sh", knob="train_env_profile_file", when="train_env"),
    ManagedFile("train_env", "/opt/gpuctl/train-env.lock.txt", knob="train_env_lock_file", when="train_env"),
)


@cache
def _role_defaults(role: str) -> dict[str, Any]:
    path = roles_dir() / role / "defaults.yaml"
    if not path.is_file():
        return {}
    return load_yaml(path)[0] or {}


def _resolve_path(mf: ManagedFile, package_manager: str) -> str:
    if mf.knob is None:
        return mf.path
    value = _role_defaults(mf.role).get(mf.knob)
    if isinstance(value, dict):
        value = value.get(package_manager)
    return str(value) if isinstance(value, str) and value.startswith("/") else mf.path


def _applies(mf: ManagedFile, spec: NodeSpec) -> bool:
    return {
        "always": True,
        "apt": spec.package_manager == "apt",
        "dnf": spec.package_manager == "dnf",
        "raid": spec.raid is not None,
        "network": spec.fabric.type != "none" or bool(spec.vlans),
        "train_env": spec.train_env is not None and spec.roles.get("train_env") == "",
    }[mf.when]


def managed_files(spec: NodeSpec) -> list[str]:
    """Paths (or globs) of the configuration files the roles render on this node."""
    out: list[str] = []
    for mf in MANAGED_FILES:
        if _applies(mf, spec):
            path = _resolve_path(mf, spec.package_manager)
            if path not in out:
                out.append(path)
    return out


def per_node_file(path: str, package_manager: str = "apt") -> bool:
    """True when `path` (a file found on a node) has node-specific content."""
    return any(mf.per_node and fnmatch.fnmatchcase(path, _resolve_path(mf, package_manager))
               for mf in MANAGED_FILES)
