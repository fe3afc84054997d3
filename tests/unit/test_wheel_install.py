"""`pip install .` gives a gpuctl that works from any directory, with its data inside the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpuctl.paths import inventories_dir

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_installs_and_validates_examples_from_another_directory(tmp_path: Path) -> None:
    pytest.importorskip("hatchling")
    wheel_dir = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheel_dir), str(CHECKOUT)], check=True, capture_output=True)
    wheel = next(wheel_dir.glob("gpuctl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("roles/nvidia_driver/install.py", "matrices/r580-cuda13.0.yaml", "catalog/skus/hgx-h100-80gb.yaml",
                    "templates/nvidia_repo/preferences.j2", "deploy/provision.py", "inventories/h100-8x4.yaml"):
        assert f"gpuctl/_share/{shipped}" in names, shipped
    # Install the wheel alone into its own folder and put it first on the path: the
    # dependencies come from this environment, gpuctl only from the wheel.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=str(target), NO_COLOR="1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([sys.executable, "-c", "import gpuctl.paths as p; print(p.share_root())"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where == str(target / "gpuctl" / "_share"), where
    for inv in sorted(inventories_dir().glob("*.yaml")):
        proc = subprocess.run([sys.executable, "-m", "gpuctl", "inventory", "validate", str(inv)],
                              cwd=elsewhere, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    listing = subprocess.run([sys.executable, "-m", "gpuctl", "matrix", "list", "--json"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, check=True).stdout
    assert "r580-cuda13.0" in listing
