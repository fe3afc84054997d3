"""Deploy tier: roles/ofed: a matching DOCA-OFED install skipped and
reported; nothing without a fabric.
Its pins, holds and converged run are the shared ones of tests/deploy/test_package_roles.py."""

from __future__ import annotations

import logging

import pytest
from gpu_scenarios import inventory, run_role

pytestmark = pytest.mark.deploy


def test_ofed_matching_install_is_skipped_and_reported(fake, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    h = run_role(fake, "ofed", specs, "ubuntu2204-converged")
    assert h.execute_commands == []
    assert "DOCA-OFED 3.2.1 already installed; install skipped" in caplog.text


def test_ofed_not_without_fabric(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    off = specs[0].components["ofed"].model_copy(update={"enabled": False, "reason": "no fabric in the inventory"})
    specs = [specs[0].model_copy(update={"components": {**specs[0].components, "ofed": off}})]
    h = run_role(fake, "ofed", specs[:1], "ubuntu2204-fresh", node=specs[0].node)
    assert h.ops == [] and h.commands == []
