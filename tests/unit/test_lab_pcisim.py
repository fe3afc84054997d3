"""Lab PCI view: preflight, unchanged, sees the profile's GPUs and the injected faults.

Runs the guest script in a private mount namespace on this machine (root + unshare), so
the bind mount over /sys/bus/pci/devices never leaves the test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuctl.inventory import load_inventory
from gpuctl.lab.pcisim import GUEST_SCRIPT
from gpuctl.lab.standin.profile import write_profile
from gpuctl.preflight import PREFLIGHT_SCRIPT, judge_node, parse_preflight
from gpuctl.spec import resolve

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")


def preflight_in_namespace(tmp_path: Path, faults: str) -> str:
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "profile.json").write_text(json.dumps(write_profile("gpu-01", "hgx-h100-80gb", 1)))
    (etc / "faults").write_text(faults)
    (tmp_path / "pcisim.py").write_text(GUEST_SCRIPT)
    (tmp_path / "preflight.sh").write_text(PREFLIGHT_SCRIPT)
    inner = f"python3 {tmp_path / 'pcisim.py'} && bash {tmp_path / 'preflight.sh'}"
    env = {**os.environ, "GPUCTL_LAB_ETC": str(etc), "GPUCTL_LAB_PCI_VIEW": str(tmp_path / "view"),
           "GPUCTL_LAB_LOAD_DRIVER": "0"}
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", inner], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def failures(text: str) -> dict[str, list[str]]:
    loaded = load_inventory(LAB_INVENTORY)
    spec = resolve(loaded, ["gpu-01"])[0]
    out: dict[str, list[str]] = {}
    for v in judge_node(parse_preflight(text), spec, loaded):
        if v.status.value == "fail" and v.check.startswith(("gpu", "nvswitch")):
            out.setdefault(v.check, []).append(v.message)
    return out


def test_healthy_profile_shows_eight_h100s(tmp_path: Path) -> None:
    facts = parse_preflight(preflight_in_namespace(tmp_path, ""))
    assert [g.device_id for g in facts.gpus] == ["2330"] * 8
    assert len(facts.nvswitches) == 4
    assert failures(preflight_in_namespace(tmp_path, "")) == {}
    # the host's own view is untouched
    assert not any(Path("/sys/bus/pci/devices", g.bus_id).exists() and
                   Path("/sys/bus/pci/devices", g.bus_id, "vendor").read_text().strip() == "0x10de"
                   for g in facts.gpus)


def test_faults_show_in_the_view(tmp_path: Path) -> None:
    found = failures(preflight_in_namespace(tmp_path, "gpu_missing gpu=7\npcie_x8 gpu=3\n"))
    assert "7 NVIDIA GPU(s) on the PCI bus, ordered 8" in found["gpu_count"][0]
    assert any("0000:5d:00.0" in m or "x8" in m for m in found["gpu_pcie_width"])
