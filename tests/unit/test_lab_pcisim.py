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


def preflight_in_namespace(tmp_path: Path, faults: str, script: str = PREFLIGHT_SCRIPT) -> str:
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "profile.json").write_text(json.dumps(write_profile("gpu-01", "hgx-h100-80gb", 1)))
    (etc / "faults").write_text(faults)
    (tmp_path / "pcisim.py").write_text(GUEST_SCRIPT)
    (tmp_path / "preflight.sh").write_text(script)
    inner = f"python3 {tmp_path / 'pcisim.py'} && bash {tmp_path / 'preflight.sh'}"
    env = {**os.environ, "GPUCTL_LAB_ETC": str(etc), "GPUCTL_LAB_PCI_VIEW": str(tmp_path / "view"),
           "GPUCTL_LAB_PCI_TREE": str(tmp_path / "tree"), "GPUCTL_LAB_LOAD_DRIVER": "0"}
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


# ---------------------------------------------------------------- passive health (issue 19)

def health_in_namespace(tmp_path: Path, faults: str) -> list:
    """The health probe's own sysfs read and `lspci -vvv` of the bridges, in the view, judged
    by the health checks (gpuctl.healthpolicy): ACS, AER, NUMA."""
    from gpuctl import healthpolicy as hp
    from gpuctl.checks.probe import health_sysfs_script
    from gpuctl.parsers.files import parse_tail_bundle
    from gpuctl.parsers.health import parse_pci_sysfs
    from gpuctl.parsers.lspci import parse_lspci

    mark = "=====GPUCTL-LSPCI====="
    text = preflight_in_namespace(tmp_path, faults, f"( {health_sysfs_script()} )\necho {mark}\n"
                                  "lspci -D -vvv -d ::0604 2>/dev/null")
    sysfs_text, lspci_text = text.split(mark + "\n")
    sysfs = parse_pci_sysfs(parse_tail_bundle(sysfs_text)[0])
    findings = hp.judge_acs(sysfs, parse_lspci(lspci_text)) + hp.judge_aer(sysfs, None)
    return [f for f in findings if f.status in (hp.FAIL, hp.PASS)]


needs_lspci = pytest.mark.skipif(not shutil.which("lspci"), reason="needs lspci (pciutils)")


@needs_lspci
def test_gpus_sit_below_switch_ports_with_acs_off(tmp_path: Path) -> None:
    found = health_in_namespace(tmp_path, "")
    # 8 GPUs, each below its switch's upstream and downstream port: 16 switch ports read by lspci
    assert [(f.check, f.status) for f in found] == [("pcie_acs", "pass")]
    assert "16 devices" in found[0].detail


@needs_lspci
def test_acs_redirect_and_aer_faults_are_named(tmp_path: Path) -> None:
    found = health_in_namespace(tmp_path, "acs_redirect gpu=2\npcie_aer gpu=4\n")
    failed = sorted((f.check, f.subject) for f in found if f.status == "fail")
    # GPU 2 at 3a:00.0 below downstream port 39:00.0; GPU 4 at 9a:00.0
    assert failed == [("pcie_acs", "0000:39:00.0"), ("pcie_aer", "GPU 0000:9a:00.0")], found
