"""Inventory `role_vars` change what the network, nvme_raid and lustre_client roles do on
@fake hosts (they were accepted by validation and then ignored: each role read its
defaults.yaml directly). One knob per role, asserted on the generated files/commands."""

from __future__ import annotations

from typing import Any

import pytest
import test_role_lustre_client as lustre
import test_role_network as network
import test_role_nvme_raid as raid

from gpuctl.runner.roles import load_role

pytestmark = pytest.mark.deploy


def _with(specs: list[Any], **role_vars: Any) -> list[Any]:
    return [s.model_copy(update={"role_vars": {**s.role_vars, **role_vars}}) for s in specs]


def test_network_nccl_conf_path_from_role_vars(fake: Any) -> None:
    sp = _with(network.specs(fake), network_nccl_conf="/etc/gpuctl-nccl.conf")
    h = fake.run(load_role("network").install, sp, responses=network.fresh())[sp[0].node]
    assert h.status == "ok", h.error
    assert "/etc/gpuctl-nccl.conf" in h.files and "/etc/nccl.conf" not in h.files


def test_nvme_raid_mount_options_from_role_vars(fake: Any) -> None:
    sp = _with(raid.specs(fake), nvme_raid_mount_options="defaults,nofail,noatime,discard")
    h = fake.run(load_role("nvme_raid").install, sp, responses=raid.responses())["gpu-01"]
    assert h.status == "ok", h.error
    cmds = "\n".join(h.execute_commands)
    assert "/raid xfs defaults,nofail,noatime,discard 0 0" in cmds


def test_lustre_modprobe_conf_from_role_vars(fake: Any) -> None:
    sp = _with(lustre.specs(fake, "debian12"), lustre_client_modprobe_conf="/etc/modprobe.d/gpuctl-lustre.conf")
    h = fake.run(load_role("lustre_client").install, sp, responses=lustre.fresh(sp[0]))[sp[0].node]
    assert h.status == "ok", h.error
    assert "/etc/modprobe.d/gpuctl-lustre.conf" in h.files and "/etc/modprobe.d/lustre.conf" not in h.files


def test_no_role_reads_its_defaults_around_the_override_chain() -> None:
    """Every role takes its knobs from gpuctl.operations.role_knobs (host data > --extra >
    inventory role_vars > defaults.yaml); a role reading defaults.yaml itself ignores role_vars."""
    from gpuctl.paths import roles_dir

    offenders = [p.parent.name for p in sorted(roles_dir().glob("*/install.py"))
                 if "read_text" in p.read_text() and "defaults.yaml" in p.read_text()]
    assert not offenders, offenders


def test_knobs_are_read_per_run_not_cached_from_the_first(fake: Any) -> None:
    """defaults() was functools.cache'd: the first run's (or host's) overrides stuck for every later one."""
    for path in ("/etc/modprobe.d/first.conf", "/etc/modprobe.d/second.conf"):
        sp = _with(lustre.specs(fake, "debian12"), lustre_client_modprobe_conf=path)
        h = fake.run(load_role("lustre_client").install, sp, responses=lustre.fresh(sp[0]))[sp[0].node]
        assert h.status == "ok", h.error
        assert path in h.files, sorted(h.files)


def test_a_map_knob_override_changes_only_the_entries_it_names(fake: Any) -> None:
    """role_vars `nvme_raid_mkfs_options: {ext4: -m0}` on an XFS array: the xfs entry keeps its
    default (the override used to replace the whole map, and the role died on the missing key)."""
    sp = _with(raid.specs(fake), nvme_raid_mkfs_options={"ext4": "-m0"})
    h = fake.run(load_role("nvme_raid").install, sp, responses=raid.responses())["gpu-01"]
    assert h.status == "ok", h.error
    assert "mkfs.xfs -q /dev/md" in "\n".join(h.execute_commands)
    sp = _with(raid.specs(fake), nvme_raid_mkfs_options={"xfs": "-K"})
    h = fake.run(load_role("nvme_raid").install, sp, responses=raid.responses())["gpu-01"]
    assert h.status == "ok", h.error
    assert "mkfs.xfs -K /dev/md" in "\n".join(h.execute_commands)
