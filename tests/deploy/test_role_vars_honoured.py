"""Inventory `role_vars` change what the network, nvme_raid and lustre_client roles do on
@fake hosts (they were accepted by validation and then ignored: each role read its
defaults.yaml directly). One knob per role, asserted on the generated files/commands."""

from __future__ import annotations

from typing import Any

import pytest
import test_role_lustre_client as lustre
import test_role_network as network
import test_role_nvme_raid as raid

from gpuctl import components
from gpuctl.deploy_context import RunOptions
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


# ---------------------------------------------------------------- names install and verify share

FAST = RunOptions(extra={"nvidia_driver_reboot_delay_s": "0", "nvidia_driver_reboot_interval_s": "0"})


def _inventory_with(tmp_path: Any, **role_vars: Any) -> Any:
    import yaml
    from gpu_scenarios import inventory

    path = inventory(tmp_path, "ubuntu2204")
    data = yaml.safe_load(path.read_text())
    data["role_vars"] = {**(data.get("role_vars") or {}), **role_vars}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(("role", "knob", "unit"), [
    ("dcgm", "dcgm_service", "gpuctl-dcgm"),
    ("fabricmanager", "fabricmanager_service", "gpuctl-fm"),
    ("nvidia_driver", "nvidia_driver_persistenced_service", "gpuctl-persistenced"),
])
def test_a_service_knob_names_one_unit_for_install_and_verify(fake: Any, tmp_path: Any, role: str, knob: str,
                                                             unit: str) -> None:
    """role_vars `dcgm_service: X` enabled X on install while verify checked nvidia-dcgm (issue 18):
    the unit is read into the NodeSpec once; the role enables it and the checks look for it."""
    from gpu_scenarios import responses

    from gpuctl.checks.api import services_of

    specs = fake.specs(_inventory_with(tmp_path, **{knob: unit}), limit=["gpu-01"])
    assert services_of(role)(specs[0]) == [unit]
    h = fake.run(load_role(role).install, specs, responses=responses("ubuntu2204-fresh"), options=FAST)["gpu-01"]
    assert any(f"Enable and start {unit} " in n for n in h.op_names), h.op_names
    default = components.defaults(role)[knob]
    said = "\n".join([*h.op_names, *h.execute_commands])
    assert f"start {default} " not in said and f"systemctl enable --now {default}" not in said


@pytest.mark.parametrize(("role", "knob", "module"), [
    ("peermem", "peermem_module", "gpuctl-peermem"), ("gds", "gds_module", "gpuctl-fs")])
def test_a_module_knob_names_one_module_for_install_and_verify(fake: Any, tmp_path: Any, role: str, knob: str,
                                                              module: str) -> None:
    from gpuctl.checks.api import modules_of

    specs = fake.specs(_inventory_with(tmp_path, **{knob: module}), limit=["gpu-01"])
    assert modules_of(role)(specs[0]) == [module.replace("-", "_")]  # as /proc/modules names it


def test_a_spec_knob_from_host_data_is_refused(fake: Any, tmp_path: Any) -> None:
    """Host data / --extra reach install only; a unit name there would split install from verify."""
    from gpu_scenarios import responses

    specs = fake.specs(_inventory_with(tmp_path), limit=["gpu-01"])
    h = fake.run(load_role("dcgm").install, specs, responses=responses("ubuntu2204-fresh"),
                 options=RunOptions(extra={"dcgm_service": "other"}), dry=True)["gpu-01"]
    assert h.status != "ok" and "role_vars" in h.error, h.error
