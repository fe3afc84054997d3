"""Hardware tier: on a machine with a real NVIDIA GPU, gpuctl's parsers and verdicts on the
real tools' output, and `gpuctl verify` / `gpuctl bench --suite quick` through the local
connector with the one-GPU inventory. Skipped where there is no GPU (CI, the lab host)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuctl.analyze import analyze_text
from gpuctl.catalog import load_sku
from gpuctl.paths import inventories_dir

pytestmark = [
    pytest.mark.hardware,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi: not a GPU machine"),
]

INVENTORY = inventories_dir() / "single-h200-local.yaml"
GPUCTL = [sys.executable, "-c", "from gpuctl.cli.entry import run; run()"]


def _out(name: str, text: str) -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out, name).write_text(text)


def test_real_nvidia_smi_parses_and_identifies_the_gpu() -> None:
    q = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, check=True).stdout
    _out("nvidia-smi-q.txt", q)
    result = analyze_text("nvidia-smi-q", q, load_sku("single-h200"))
    names = [f.value for f in result.figures if f.name.endswith(".name")]
    assert names and all("H200" in str(n) for n in names), result.figures
    assert result.status.value in ("pass", "warn"), [vd.message for vd in result.verdicts]


# The checks that judge the hardware itself: they hold on any healthy H200 machine, whoever
# installed its software. The package/version-pin checks also hold where the machine was
# provisioned to the inventory's matrix (GPUCTL_HW_PROVISIONED=1, e.g. after `gpuctl provision`).
HARDWARE_CHECKS = (
    "nvidia_driver.nvml_readable", "nvidia_driver.driver_versions_agree", "nvidia_driver.gpu_count",
    "nvidia_driver.gpu_present", "nvidia_driver.gpu_model", "nvidia_driver.gpu_memory",
    "nvidia_driver.gpu_ecc_mode", "nvidia_driver.gpu_ecc_errors", "nvidia_driver.gpu_retired_pages",
    "nvidia_driver.gpu_row_remap", "nvidia_driver.gpu_pcie_width", "nvidia_driver.nvlink_pair",
    "nvidia_driver.no_fatal_xid", "base.cpu_memory",
)


def _is_hardware_check(name: str) -> bool:
    return name.split("[", 1)[0] in HARDWARE_CHECKS


def test_verify_passes_on_this_machine() -> None:
    """`gpuctl verify` through the local connector: every hardware check passes (none may be
    skipped into a pass: at least the GPU count, model and PCIe width ran), every failure is
    explained, and where the machine was provisioned to the matrix the whole verify passes."""
    env = dict(os.environ, NO_COLOR="1")
    verify = subprocess.run([*GPUCTL, "verify", str(INVENTORY), "--json"], capture_output=True, text=True,
                            env=env, timeout=900)
    _out("verify.json", verify.stdout + "\n# stderr\n" + verify.stderr)
    assert "Traceback" not in verify.stderr
    assert verify.returncode in (0, 1), verify.stderr
    data = json.loads(verify.stdout)
    host = data["hosts"]["h200-01"]
    assert host["status"] != "unreachable", host["unreachable_reason"]
    checks = host["checks"]
    hardware = [c for c in checks if _is_hardware_check(c["check"])]
    ran = {c["check"].split("[", 1)[0] for c in hardware if c["status"] == "pass"}
    for needed in ("nvidia_driver.gpu_count", "nvidia_driver.gpu_model", "nvidia_driver.gpu_pcie_width",
                   "nvidia_driver.nvml_readable"):
        assert needed in ran, f"{needed} did not pass: {[c for c in hardware if c['check'].startswith(needed)]}"
    bad = [c for c in hardware if c["status"] not in ("pass", "skip")]
    assert not bad, bad
    for c in checks:  # every failure says what was expected, what was found and what to do
        if c["status"] == "fail":
            assert c["expected"] and c["found"] and c["remediation"], c
    if os.environ.get("GPUCTL_HW_PROVISIONED") == "1":
        assert data["status"] == "pass" and verify.returncode == 0, host["failed"]


def test_quick_bench_on_this_machine() -> None:
    env = dict(os.environ, NO_COLOR="1")
    bench = subprocess.run([*GPUCTL, "bench", str(INVENTORY), "--suite", "quick", "--json"], capture_output=True,
                           text=True, env=env, timeout=900)
    _out("bench.json", bench.stdout + "\n# stderr\n" + bench.stderr)
    assert "Traceback" not in bench.stderr
    assert json.loads(bench.stdout)["hosts"]["h200-01"]["results"]
