"""Deploy tier: roles/dcgm: its service started on a fresh node,
restarted on an upgrade.
Its pins, holds and converged run are the shared ones of tests/deploy/test_package_roles.py."""

from __future__ import annotations

import pytest
from gpu_scenarios import inventory, pins_in, responses, run_role

pytestmark = pytest.mark.deploy


def test_dcgm_service_started_not_restarted_on_fresh(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    h = run_role(fake, "dcgm", specs, "ubuntu2204-fresh")
    assert "systemctl enable --now nvidia-dcgm" in h.execute_commands
    assert "systemctl restart nvidia-dcgm" not in h.execute_commands


def test_dcgm_upgrade_restarts_running_service(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    old = [line.replace("\t1:4.5.2-1\t", "\t1:4.4.1-1\t") for line in
           responses("ubuntu2204-converged")[": gpuctl-fact packages;"]]
    h = run_role(fake, "dcgm", specs, "ubuntu2204-converged", packages=old)
    assert pins_in(h.execute_commands) == ["datacenter-gpu-manager-4-cuda13=1:4.5.2-1",
                                           "datacenter-gpu-manager-4-core=1:4.5.2-1"]
    assert h.execute_commands[-1] == "systemctl restart nvidia-dcgm"
    # the upgrade drops apt's hold on the moved packages: they are held again
    assert "apt-mark hold datacenter-gpu-manager-4-cuda13 datacenter-gpu-manager-4-core" in h.execute_commands
