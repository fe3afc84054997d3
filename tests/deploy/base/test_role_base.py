"""Deploy tier: roles/base on fresh Ubuntu 22.04 / Debian 12 (no GRUB) / Rocky 9 and converged hosts."""

from __future__ import annotations

import logging

import pytest
from gpu_scenarios import converged_files, inventory, responses

from gpuctl.runner.roles import load_role

pytestmark = pytest.mark.deploy


def _base():
    return load_role("base").install


def test_fresh_ubuntu2204(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    h = fake.run(_base(), specs, responses=responses("ubuntu2204-fresh"))["gpu-01"]
    assert h.status == "ok", h.error
    cmds = h.execute_commands
    # prerequisites: everything present on the stock image → nothing installed
    assert not any("apt-get install" in c for c in cmds)
    assert "update-initramfs -u -k all" in cmds
    assert "update-grub" in cmds
    assert "sysctl -q -p /etc/sysctl.d/90-gpuctl.conf" in cmds
    assert h.files["/etc/modprobe.d/gpuctl-blacklist.conf"].splitlines()[1:] == [
        "blacklist nouveau", "options nouveau modeset=0"]
    assert 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"' in h.files["/etc/default/grub.d/gpuctl.cfg"]
    sysctl = h.files["/etc/sysctl.d/90-gpuctl.conf"]
    assert "vm.max_map_count = 1048576" in sysctl and "kernel.numa_balancing = 0" in sysctl
    assert "*    hard memlock unlimited" in h.files["/etc/security/limits.d/90-gpuctl-memlock.conf"]
    uu = h.files["/etc/apt/apt.conf.d/51gpuctl-unattended-upgrades"]
    assert '"nvidia-driver-580-open$";' in uu and '"libnccl2$";' in uu and '"nvidia-fabricmanager$";' in uu
    # the order: initramfs rebuilt after the blacklist is written
    assert cmds.index("update-initramfs -u -k all") > min(
        i for i, c in enumerate(cmds) if "chmod 644 /etc/modprobe.d/gpuctl-blacklist.conf" in c)


def test_sysctl_floor_never_lowers_a_higher_running_value(fake, tmp_path):
    """A node already tuned above a floor (a real H200 VM runs vm.max_map_count 8250340) keeps
    its value, in the drop-in too (systemd-sysctl applies it last at boot); lower values are
    raised to the floor; a second run with that file in place changes nothing."""
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    running = ["vm.max_map_count=8250340", "net.core.rmem_max=4194304", "net.core.wmem_max=4194304"]
    h = fake.run(_base(), specs, responses=responses("ubuntu2204-fresh", sysctl=running))["gpu-01"]
    assert h.status == "ok", h.error
    sysctl = h.files["/etc/sysctl.d/90-gpuctl.conf"]
    assert "vm.max_map_count = 8250340" in sysctl
    assert "net.core.rmem_max = 134217728" in sysctl and "kernel.numa_balancing = 0" in sysctl
    again = fake.run(_base(), specs, responses=responses("ubuntu2204-fresh", sysctl=running,
                                                         files=converged_files(h)))["gpu-01"]
    assert not any("sysctl" in c for c in again.execute_commands)


def test_fresh_debian12_without_grub_reports_not_applicable(fake, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    specs = fake.specs(inventory(tmp_path, "debian12"), limit=["gpu-01"])
    h = fake.run(_base(), specs, responses=responses("debian12-fresh"))["gpu-01"]
    assert h.status == "ok", h.error
    cmds = h.execute_commands
    assert "update-grub" not in cmds
    assert "/etc/default/grub.d/gpuctl.cfg" not in h.files
    assert h.op("GRUB drop-in").status == "unchanged"
    assert "not applicable: host does not boot through GRUB" in caplog.text
    # pciutils is missing from the recorded Debian 12 host: exactly that gets installed
    installs = [c for c in cmds if "apt-get install" in c]
    assert len(installs) == 1 and installs[0].endswith(" pciutils")


def test_fresh_rocky9_uses_grubby_and_dracut(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "rhel9"), limit=["gpu-01"])
    h = fake.run(_base(), specs, responses=responses("rocky9-fresh"))["gpu-01"]
    assert h.status == "ok", h.error
    cmds = h.execute_commands
    assert "grubby --update-kernel=ALL --args=iommu=pt" in cmds
    assert "dracut -f --regenerate-all" in cmds
    assert "dnf install -y --disableplugin=versionlock python3-dnf-plugin-versionlock epel-release" in cmds
    assert "/etc/apt/apt.conf.d/51gpuctl-unattended-upgrades" not in h.files
    assert not any("update-grub" in c or "update-initramfs" in c for c in cmds)


def test_rocky9_with_iommu_already_on_the_command_line_is_a_noop_for_grubby(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "rhel9"), limit=["gpu-01"])
    boot = [line if not line.startswith("args=") else line + " iommu=pt"
            for line in (responses("rocky9-fresh")[": gpuctl-fact boot;"])]
    h = fake.run(_base(), specs, responses=responses("rocky9-fresh", boot=boot))["gpu-01"]
    assert not any("grubby" in c for c in h.execute_commands)


def test_converged_host_changes_nothing(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    first = fake.run(_base(), specs, responses=responses("ubuntu2204-fresh"))["gpu-01"]
    again = fake.run(_base(), specs, responses=responses("ubuntu2204-fresh", files=converged_files(first)))["gpu-01"]
    assert again.status == "ok"
    assert again.changed_ops == []
    assert again.execute_commands == []
    # facts read once each, at prepare: files, boot, the running sysctl floors, packages
    assert len(again.prepare_commands) == 4


def test_changed_sysctl_rewrites_and_applies_only_sysctl(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    first = fake.run(_base(), specs, responses=responses("ubuntu2204-fresh"))["gpu-01"]
    files = [line for line in converged_files(first) if not line.endswith("/etc/sysctl.d/90-gpuctl.conf")]
    h = fake.run(_base(), specs, responses=responses("ubuntu2204-fresh", files=files))["gpu-01"]
    assert h.changed_ops == ["base | Write sysctl settings (kernel.numa_balancing, net.core.rmem_max, "
                             "net.core.wmem_max, vm.max_map_count)", "base | Apply sysctl settings"]
