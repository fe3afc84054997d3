"""Deploy tier: roles/cuda: the CUDA profile it writes.
Its pins, holds and converged run are the shared ones of tests/deploy/test_package_roles.py."""

from __future__ import annotations

import pytest
from gpu_scenarios import inventory, run_role

pytestmark = pytest.mark.deploy


def test_cuda_profile(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    h = run_role(fake, "cuda", specs, "ubuntu2204-fresh")
    prof = h.files["/etc/profile.d/gpuctl-cuda.sh"]
    assert "export CUDA_HOME=/usr/local/cuda-13.0" in prof
    assert 'export PATH="/usr/local/cuda-13.0/bin:$PATH"' in prof
    assert "/usr/local/cuda-13.0/lib64" in prof
