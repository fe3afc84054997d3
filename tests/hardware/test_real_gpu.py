"""Hardware tier: on a machine with a real NVIDIA GPU, gpuctl's parsers and verdicts on the
real tools' output, and `gpuctl verify` / `gpuctl bench --suite quick` through the local
connector with the one-GPU inventory. Skipped where there is no GPU (CI, the lab host)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuctl.analyze import analyze_text
from gpuctl.bench.suites import TOOL_DIRS
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


# Checks that must have run and passed (not skipped into a pass) on any GPU machine.
MUST_PASS = ("nvidia_driver.gpu_count", "nvidia_driver.gpu_model", "nvidia_driver.gpu_pcie_width",
             "nvidia_driver.nvml_readable")


def verify_problems(data: dict, host_name: str = "h200-01", provisioned: bool = False) -> list[str]:
    """What `gpuctl verify --json` says is wrong with the hardware: a required check that did
    not pass, a hardware check that failed or could not run, a failure that does not say what
    was expected, found and to be done; where the machine was provisioned to the matrix, any
    failure at all. Empty when the machine is healthy."""
    host = data["hosts"][host_name]
    if host["status"] == "unreachable":
        return [f"unreachable: {host['unreachable_reason']}"]
    problems = []
    passed = {name.split("[", 1)[0] for name in host["passed"]}
    problems += [f"{name} did not pass" for name in MUST_PASS if name not in passed]
    for c in host["failed"] + host["could_not_run"]:
        if _is_hardware_check(c["check"]):
            problems.append(f"{c['check']}: {c['message']}")
    for c in host["failed"]:
        if not (c["expected"] and c["found"] and c["remediation"]):
            problems.append(f"{c['check']} failed without expected/found/remediation: {c}")
    if provisioned and data["status"] != "pass":
        problems.append(f"provisioned to the matrix, yet verify is {data['status']}: "
                        f"{[c['check'] for c in host['failed'] + host['could_not_run']]}")
    return problems


def test_verify_passes_on_this_machine() -> None:
    """`gpuctl verify` through the local connector: every hardware check passes (none may be
    skipped into a pass: at least the GPU count, model and PCIe width ran), every failure is
    explained, and where the machine was provisioned to the matrix the whole verify passes."""
    env = dict(os.environ, NO_COLOR="1")
    verify = subprocess.run([*GPUCTL, "verify", str(INVENTORY), "--json"], capture_output=True, text=True,
                            env=env, timeout=900)
    _out("verify.json", verify.stdout)
    assert "Traceback" not in verify.stderr, verify.stderr
    assert verify.returncode in (0, 1), verify.stderr
    provisioned = os.environ.get("GPUCTL_HW_PROVISIONED") == "1"
    assert verify_problems(json.loads(verify.stdout), provisioned=provisioned) == []
    if provisioned:
        assert verify.returncode == 0


def _have_tool(name: str) -> bool:
    return shutil.which(name) is not None or any(Path(d, name).exists() for d in TOOL_DIRS)


def test_quick_bench_on_this_machine() -> None:
    """`gpuctl bench --suite quick`: nothing measured fails on a healthy GPU; the bandwidth
    probe's figures pass where the probe is installed, and the training run's (loss falls,
    replicas agree, MFU of its throughput phase) where PyTorch is; tools that are not
    installed (nccl-tests, fio without a RAID) are reported as such, not as failures."""
    env = dict(os.environ, NO_COLOR="1")
    bench = subprocess.run([*GPUCTL, "bench", str(INVENTORY), "--suite", "quick", "--json"], capture_output=True,
                           text=True, env=env, timeout=900)
    _out("bench.json", bench.stdout)
    _out("bench-stderr.txt", bench.stderr)
    assert "Traceback" not in bench.stderr
    results = json.loads(bench.stdout)["hosts"]["h200-01"]["results"]
    assert results
    assert [r["message"] for r in results if r["status"] == "fail"] == []
    ran = {r["check"] for r in results if r["status"] in ("pass", "warn")}
    if _have_tool("gpuctl-bwprobe"):
        assert {"h2d_gb_s", "d2h_gb_s", "hbm_copy_fraction"} <= ran, results
    if importlib.util.find_spec("torch") is not None:
        assert {"train_loss_falls", "train_ranks_agree", "train_mfu_fraction"} <= ran, results
