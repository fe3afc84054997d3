"""`pip install .` gives a gpuctl that works from any directory, with its data inside the wheel."""

from __future__ import annotations

import subprocess
import sys
import venv
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
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True,
                   capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([str(py), "-c", "import gpuctl.paths as p; print(p.share_root())"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(env_dir)) and where.endswith("_share"), where
    for inv in sorted(inventories_dir().glob("*.yaml")):
        proc = subprocess.run([str(env_dir / "bin" / "gpuctl"), "inventory", "validate", str(inv)],
                              cwd=elsewhere, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    listing = subprocess.run([str(env_dir / "bin" / "gpuctl"), "matrix", "list", "--json"], cwd=elsewhere,
                             capture_output=True, text=True, check=True).stdout
    assert "r580-cuda13.0" in listing
