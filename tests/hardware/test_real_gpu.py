"""Hardware tier: on a machine with a real NVIDIA GPU, gpuctl's parsers and verdicts on the
real tools' output, and `gpuctl verify` / `gpuctl bench --suite quick` through the local
connector with the one-GPU inventory. Skipped where there is no GPU (CI, the lab host)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
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


# ---------------------------------------------------------------- training environment (issue 16 item 8)

# The train_env checks that hold on any GPU machine with a working PyTorch, whoever installed
# it: torch imports, sees the SKU's GPUs, and a matmul on every GPU equals the CPU's. The
# version and lock checks (torch_version, torch_cuda, torch_nccl, installed_matches_lock) are
# pins: they hold where the machine was provisioned to the matrix (GPUCTL_HW_PROVISIONED=1).
TRAIN_ENV_CHECKS = ("train_env.torch_imports", "train_env.gpu_count", "train_env.gpu_matmul")
#: where the hardware tier puts a stand-in training environment (a bin/python that runs the
#: machine's own torch) and the probe: under /opt/gpuctl, where the role's knobs may point
HW_TRAIN_DIR = "/opt/gpuctl/hw-check"


def verify_train_env_problems(data: dict, host_name: str = "h200-01", provisioned: bool = False) -> list[str]:
    """What `gpuctl verify --json` says is wrong with the training environment on a machine
    whose PyTorch it was pointed at: a train_env hardware check that did not pass (or never
    ran), and where the machine was provisioned to the matrix any train_env check that did not
    pass. Empty when torch works on every GPU."""
    host = data["hosts"][host_name]
    if host["status"] == "unreachable":
        return [f"unreachable: {host['unreachable_reason']}"]
    passed = {name.split("[", 1)[0] for name in host["passed"]}
    problems = [f"{name} did not pass" for name in TRAIN_ENV_CHECKS if name not in passed]
    for c in host["failed"] + host["could_not_run"]:
        base = c["check"].split("[", 1)[0]
        if base in TRAIN_ENV_CHECKS or (provisioned and base.startswith("train_env.")):
            problems.append(f"{c['check']}: {c['message']}")
    return problems


def torch_python() -> str | None:
    """A python with PyTorch on this machine: $GPUCTL_TORCH_PYTHON, the training environment's
    (/opt/gpuctl/train-env), this python, python3 (None: no PyTorch here)."""
    from gpuctl.bench.suites import default_train_env

    for python in (os.environ.get("GPUCTL_TORCH_PYTHON"), f"{default_train_env()}/bin/python", sys.executable,
                   shutil.which("python3")):
        if python and Path(python).is_file():
            ok = subprocess.run([python, "-c", "import torch"], capture_output=True, timeout=300)
            if ok.returncode == 0:
                return python
    return None


def train_env_role_vars(python: str, folder: str = HW_TRAIN_DIR) -> dict[str, str]:
    """roles/train_env's knobs pointing at `python`'s PyTorch: the environment itself where
    it is the role's (/opt/gpuctl/train-env), else `folder`/train-env whose bin/python runs
    `python` (a venv's python keeps its venv that way); the role's probe program beside it."""
    from gpuctl.bench.suites import default_train_env
    from gpuctl.paths import templates_dir

    base = Path(folder)
    base.mkdir(parents=True, exist_ok=True)
    probe = base / "train-env-probe.py"
    probe.write_text((templates_dir() / "train_env" / "probe.py").read_text())
    if python == f"{default_train_env()}/bin/python":
        env = default_train_env()
    else:
        (base / "train-env" / "bin").mkdir(parents=True, exist_ok=True)
        wrapper = base / "train-env" / "bin" / "python"
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(python)} "$@"\n')
        wrapper.chmod(0o755)
        env = str(base / "train-env")
    return {"train_env_path": env, "train_env_probe_file": str(probe)}


def inventory_copy(tmp: Path, role_vars: dict[str, str] | None = None, address: str | None = None) -> Path:
    """The one-GPU inventory with role_vars added (and the node's address replaced)."""
    import yaml

    doc = yaml.safe_load(INVENTORY.read_text())
    if role_vars:
        doc["role_vars"] = {**doc.get("role_vars", {}), **role_vars}
    if address is not None:
        doc["nodes"][0]["address"] = address
    path = tmp / INVENTORY.name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


needs_torch = pytest.mark.skipif(torch_python() is None, reason="no python with PyTorch on this machine")


@needs_torch
def test_train_env_checks_on_this_machine(tmp_path: Path) -> None:
    """`gpuctl verify` with roles/train_env's knobs pointing at this machine's PyTorch: torch
    imports, sees the SKU's GPU count, and the matmul on every GPU matches the CPU; where the
    machine was provisioned to the matrix, the pinned versions and the lock hold too."""
    python = torch_python()
    assert python is not None
    inventory = inventory_copy(tmp_path, train_env_role_vars(python))
    verify = subprocess.run([*GPUCTL, "verify", str(inventory), "--json"], capture_output=True, text=True,
                            env=dict(os.environ, NO_COLOR="1"), timeout=900)
    _out("verify-train-env.json", verify.stdout)
    assert "Traceback" not in verify.stderr, verify.stderr
    data = json.loads(verify.stdout)
    provisioned = os.environ.get("GPUCTL_HW_PROVISIONED") == "1"
    assert verify_train_env_problems(data, provisioned=provisioned) == []


def _cuda_gpus(python: str) -> int:
    out = subprocess.run([python, "-c", "import torch; print(torch.cuda.device_count() if "
                          "torch.cuda.is_available() else 0)"], capture_output=True, text=True, timeout=300)
    return int(out.stdout.strip() or 0) if out.returncode == 0 else 0


@needs_torch
def test_torchrun_on_every_gpu_of_this_node(tmp_path: Path) -> None:
    """The bench's own multi-node training path on this one node: the node's own training run
    (the scaling baseline), then one torchrun launcher with --nnodes 1 and one rank per GPU
    (`torchrun_argv`, c10d rendezvous on this node), judged by the same verdicts
    (`judge_launchers`, `judge_training_multi_node`): the launcher finished, the loss falls,
    every rank's parameters agree, nothing fails; the figures go to $OUT/torchrun.json."""
    from dataclasses import replace

    from gpuctl.bench import suites
    from gpuctl.bench.remote import SshTarget
    from gpuctl.bench.run import BenchRun
    from gpuctl.inventory import load_inventory
    from gpuctl.runrecord import RunRecord
    from gpuctl.spec import resolve

    python = torch_python()
    assert python is not None
    gpus = _cuda_gpus(python)
    if gpus == 0:
        pytest.skip(f"{python}'s PyTorch sees no CUDA GPU")
    role_vars = train_env_role_vars(python)
    # the rendezvous needs an address (the inventory's node is `@local`, which is not one);
    # the commands still run through the local target
    loaded = load_inventory(inventory_copy(tmp_path, role_vars, address="127.0.0.1"))
    specs = resolve(loaded)
    suite = replace(suites.SUITES["quick"], nccl_tests=(), multi_node=False, bwprobe=False, ib=False, fio=False,
                    gdsio=False, dcgm=False, training=True, training_rdzv_timeout_s=60,
                    training_step_timeout_s=60, training_launch_timeout_s=300)
    record = RunRecord.create("bench", loaded.path)
    targets = {s.node: SshTarget(name=s.node, address="@local") for s in specs}
    bench = BenchRun(loaded, specs, suite, record, targets, train_env=role_vars["train_env_path"])
    bench.run_node(specs[0])
    bench.run_training_multi_node(specs)
    verdicts = [{"check": v.check, "status": v.status.value, "node": v.subject.node, "value": v.value,
                 "message": v.message} for v in bench.hosts[specs[0].node].verdicts + bench.cluster.verdicts]
    _out("torchrun.json", json.dumps({"training": bench.training, "verdicts": verdicts}, indent=1, default=str))
    got = {v["check"]: v for v in verdicts if v["node"] != specs[0].node}
    argv = bench.training.get("argv", {}).get(specs[0].node, [])
    assert argv[argv.index("--nnodes") + 1:argv.index("--nnodes") + 2] == ["1"], argv
    assert argv[argv.index("--nproc-per-node") + 1] == str(specs[0].hardware.gpu_count), argv
    assert [v["message"] for v in verdicts if v["status"] in ("fail", "error")] == []
    assert got["train_launcher"]["status"] == "pass"
    assert got["train_loss_falls"]["status"] == "pass" and got["train_ranks_agree"]["status"] == "pass"
    assert bench.training["world_size"] == specs[0].hardware.gpu_count == gpus
    assert bench.training["backend"] == "nccl" and bench.training["ran"]["nccl"]
    assert got["train_scaling_efficiency"]["status"] in ("pass", "warn")  # one node against itself alone
