"""Deploy tier: roles/peermem — its module at boot and now; converged = no change; skipped without OFED."""

from __future__ import annotations

import pytest
from gpu_scenarios import inventory, rerun_converged, run_role

pytestmark = pytest.mark.deploy


def test_peermem_fresh(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    h = run_role(fake, "peermem", specs, "ubuntu2204-fresh")
    assert h.status == "ok", h.error
    assert h.files["/etc/modules-load.d/nvidia-peermem.conf"].splitlines()[-1] == "nvidia-peermem"
    assert h.execute_commands[-1] == "modprobe nvidia-peermem"


def test_peermem_converged_and_loaded(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    first = run_role(fake, "peermem", specs, "ubuntu2204-fresh")
    h = rerun_converged(fake, "peermem", specs, first)
    assert h.execute_commands == [] and h.changed_ops == []


def test_peermem_skipped_without_ofed(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    specs = [specs[0].model_copy(update={"roles": {**specs[0].roles,
                                                    "peermem": "nvidia-peermem needs OFED on a fabric"}})]
    h = run_role(fake, "peermem", specs, "ubuntu2204-fresh")
    assert h.ops == [] and h.commands == []
