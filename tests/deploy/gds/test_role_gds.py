"""Deploy tier: roles/gds — its module at boot and now, cufile.json, pins; converged = no change."""

from __future__ import annotations

import json

import pytest
from gpu_scenarios import inventory, pins_in, rerun_converged, run_role

pytestmark = pytest.mark.deploy


def test_gds_fresh_ubuntu2204(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    h = run_role(fake, "gds", specs, "ubuntu2204-fresh")
    assert h.status == "ok", h.error
    assert pins_in(h.execute_commands) == ["nvidia-fs-dkms=2.26.6-1", "nvidia-fs=2.26.6-1",
                                           "nvidia-gds-13-0=13.0.2-1"]
    assert "apt-mark hold nvidia-fs-dkms nvidia-fs nvidia-gds-13-0" in h.execute_commands
    cufile = json.loads(h.files["/etc/cufile.json"])
    assert cufile["properties"]["allow_compat_mode"] is True
    assert cufile["properties"]["rdma_dev_addr_list"] == [
        "192.168.1.11", "192.168.2.11", "192.168.3.11", "192.168.4.11",
        "192.168.5.11", "192.168.6.11", "192.168.7.11", "192.168.8.11"]
    assert h.files["/etc/modules-load.d/nvidia-fs.conf"].splitlines()[-1] == "nvidia-fs"
    assert h.execute_commands[-1] == "modprobe nvidia-fs"


def test_gds_converged(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    first = run_role(fake, "gds", specs, "ubuntu2204-fresh")
    h = rerun_converged(fake, "gds", specs, first)
    assert h.execute_commands == [] and h.changed_ops == []
    assert len(h.prepare_commands) == 3


def test_gds_rocky9(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "rhel9"), limit=["gpu-01"])
    h = run_role(fake, "gds", specs, "rocky9-fresh")
    assert ("dnf install -y --disableplugin=versionlock nvidia-fs-dkms-2.26.6-1 nvidia-fs-2.26.6-1 "
            "nvidia-gds-13-0-13.0.2-1") in h.execute_commands
