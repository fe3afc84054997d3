"""The lock hashes each managed file where the node really has it: a component's file whose path
is a knob (role_vars, else its default) is read by `gpuctl lock` / `drift` at the value the
inventory resolves, the path install writes and verify reads (issue 18: the lock hashed the
defaults, so a `network_nccl_conf` override left the real file out of the lock)."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl import components
from gpuctl.inventory import load_inventory_text
from gpuctl.knobs import Path as PathKnob
from gpuctl.lock.managed import in_glob, managed_files, per_node_file
from gpuctl.lock.read import read_script
from gpuctl.paths import inventories_dir
from gpuctl.spec import NodeSpec, resolve

LAB = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"

#: every knob naming (part of) the path of a file the lock hashes, overridden to a value its type allows
OVERRIDES: dict[str, Any] = {
    "network_nccl_conf": "/etc/gpuctl/nccl.conf",
    "network_modules_file": "/etc/modules-load.d/site-network.conf",
    "network_roce_qos_script": "/usr/local/bin/site-roce-qos",
    "network_roce_qos_unit": "site-roce-qos.service",
    "network_soft_roce_unit_prefix": "site-rxe-",
    "network_netplan_file": "/etc/netplan/70-site.yaml",
    "network_ifupdown_prefix": "site-",
    "base_blacklist_file": "/etc/modprobe.d/site-blacklist.conf",
    "base_sysctl_file": "/etc/sysctl.d/80-site.conf",
    "base_limits_file": "/etc/security/limits.d/80-site-memlock.conf",
    "base_grub_dropin": "/etc/default/grub.d/site.cfg",
    "base_unattended_upgrades_file": "/etc/apt/apt.conf.d/52site-unattended-upgrades",
    "nvidia_repo_sources_file": "/etc/apt/sources.list.d/site-nvidia.sources",
    "nvidia_repo_apt_proxy_file": "/etc/apt/apt.conf.d/01site-proxy",
    "nvme_raid_mdadm_conf": {"apt": "/etc/mdadm.conf"},
}
#: where each override lands in the lock's list (a glob where the role writes one file per interface)
EXPECTED = {
    "/etc/gpuctl/nccl.conf", "/etc/modules-load.d/site-network.conf", "/usr/local/bin/site-roce-qos",
    "/etc/systemd/system/site-roce-qos.service", "/etc/systemd/system/site-rxe-*", "/etc/netplan/70-site.yaml",
    "/etc/network/interfaces.d/site-*", "/etc/modprobe.d/site-blacklist.conf", "/etc/sysctl.d/80-site.conf",
    "/etc/security/limits.d/80-site-memlock.conf", "/etc/default/grub.d/site.cfg",
    "/etc/apt/apt.conf.d/52site-unattended-upgrades", "/etc/apt/sources.list.d/site-nvidia.sources",
    "/etc/apt/apt.conf.d/01site-proxy", "/etc/mdadm.conf",
}


def _spec(role_vars: dict[str, Any]) -> NodeSpec:
    data = yaml.safe_load(LAB.read_text())
    data["role_vars"] = {**data.get("role_vars", {}), **role_vars}
    loaded = load_inventory_text(yaml.safe_dump(data), "site.yaml", base_dir=inventories_dir())
    return resolve(loaded)[0]


def _matched(path: str, patterns: list[str]) -> bool:
    return any(in_glob(path, p) for p in patterns)


def test_the_lock_hashes_overridden_files_where_the_node_has_them() -> None:
    default, site = managed_files(_spec({})), managed_files(_spec(OVERRIDES))
    missing = sorted(p for p in EXPECTED if not _matched(p.replace("*", "eth1"), site))
    assert not missing, f"the lock does not hash the overridden paths {missing}; it reads {site}"
    # a file that is a knob's whole value is no longer read at its default
    for gone in ("/etc/nccl.conf", "/etc/sysctl.d/90-gpuctl.conf", "/etc/mdadm/mdadm.conf",
                 "/etc/netplan/60-gpuctl.yaml", "/usr/local/sbin/gpuctl-roce-qos"):
        assert gone in default and gone not in site
    script = read_script(_spec(OVERRIDES))
    assert "/etc/gpuctl/nccl.conf" in script and "/etc/mdadm.conf" in script


def test_node_specific_files_follow_their_overridden_paths() -> None:
    site = _spec(OVERRIDES)
    assert per_node_file("/etc/mdadm.conf", site) and per_node_file("/etc/netplan/70-site.yaml", site)
    assert per_node_file("/etc/network/interfaces.d/site-eth1.100", site)
    assert not per_node_file("/etc/gpuctl/nccl.conf", site)
    default = _spec({})
    assert per_node_file("/etc/mdadm/mdadm.conf", default) and not per_node_file("/etc/mdadm.conf", default)


def _knob_paths(key: str) -> list[str]:
    owner = components.knob_owner(key)
    value = components.defaults(owner).get(key) if owner else None
    values = value.values() if isinstance(value, dict) else [value]
    return [v for v in values if isinstance(v, str) and v.startswith("/")]


@pytest.mark.parametrize("comp", [c for c in components.registry() if c.files], ids=lambda c: c.name)
def test_every_path_knob_of_a_locked_file_is_declared_on_it(comp: components.Component) -> None:
    """A file knob whose default the lock reads (a literal path or inside a glob) must be named by
    that ManagedFile (`knob`, a `{placeholder}` or `covers`): else an override moves the file out of
    the lock's sight. A folder knob holding a glob's files must be the glob's placeholder."""
    at_defaults = managed_files(_spec({}))
    for key, kind in comp.knobs.items():
        if not isinstance(kind, PathKnob):
            continue
        for default in _knob_paths(key):
            holders = [f for f in comp.files if key in f.knobs()]
            if kind.is_dir or key.endswith("_dir"):
                under = [p for p in at_defaults if posixpath.dirname(p) == default]
                assert not under or holders, f"{key}: {under} lie in its folder {default}, which is not a placeholder"
            elif _matched(default, at_defaults) or default in at_defaults:
                assert holders, f"{key} ({default}) is read by the lock but no ManagedFile of {comp.name} names it"


def test_a_map_override_changes_only_the_entries_it_names() -> None:
    """`nvme_raid_mdadm_conf: {apt: …}` leaves the dnf entry at its default, as install reads it
    (`role_knobs`); the one knob reader returned the bare override, so a dnf node's lock read
    the file at the apt default (and a `timesync_service: {apt: …}` left dnf with no unit)."""
    apt_only = {"nvme_raid_mdadm_conf": {"apt": "/etc/mdadm.conf"}}  # the dnf entry's default
    dnf = _spec(apt_only).model_copy(update={"package_manager": "dnf"})
    files = managed_files(dnf)
    assert "/etc/mdadm.conf" in files and "/etc/mdadm/mdadm.conf" not in files
    assert components.knob_value("timesync_service", {"timesync_service": {"apt": "chrony-site"}}) == {
        "apt": "chrony-site", "dnf": "chronyd"}
