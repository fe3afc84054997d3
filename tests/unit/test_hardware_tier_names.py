"""The hardware tier names the checks it requires to pass on a real GPU machine: each name
must be a check some role really has, or the tier would assert on checks that never run."""

from __future__ import annotations

import ast
from pathlib import Path

from gpuctl.paths import roles_dir

HW_TEST = Path(__file__).resolve().parents[1] / "hardware" / "test_real_gpu.py"


def _hardware_checks(name: str = "HARDWARE_CHECKS") -> tuple[str, ...]:
    tree = ast.parse(HW_TEST.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{name} not found in tests/hardware/test_real_gpu.py")


def test_every_hardware_check_name_is_a_real_check() -> None:
    names = _hardware_checks()
    assert len(names) >= 10
    train_env = _hardware_checks("TRAIN_ENV_CHECKS")
    assert {n.split(".", 1)[0] for n in train_env} == {"train_env"} and len(train_env) == 3
    for name in names + train_env:
        role, check = name.split(".", 1)
        src = (roles_dir() / role / "checks.py").read_text()
        assert f"def test_{check}(" in src, f"{name}: no such check in roles/{role}/checks.py"


def _hardware_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpuctl_hw_tier", HW_TEST)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verify_problems_on_the_real_h200_json() -> None:
    """The hardware tier's judgement on `gpuctl verify --json` from the real H200 (not
    provisioned by gpuctl: its packages and sysctls differ from the matrix, its hardware is
    healthy): no hardware problem; the same JSON with a GPU at the wrong width, a required check
    that never ran, or claimed provisioned, is one."""
    import copy
    import json

    hw = _hardware_module()
    real = json.loads((Path(__file__).resolve().parents[1] / "data" / "fixtures" / "verify"
                       / "h200-local-unprovisioned-real.json").read_text())
    assert real["status"] == "fail" and real["hosts"]["h200-01"]["counts"]["fail"] == 31
    assert hw.verify_problems(real) == []
    narrow = copy.deepcopy(real)
    host = narrow["hosts"]["h200-01"]
    host["passed"].remove("nvidia_driver.gpu_pcie_width[gpu0]")
    host["failed"].append({"check": "nvidia_driver.gpu_pcie_width[gpu0]", "expected": "16", "found": "8",
                           "remediation": "reseat_or_replace", "message": "GPU 0 PCIe link x8"})
    assert hw.verify_problems(narrow) == ["nvidia_driver.gpu_pcie_width did not pass",
                                          "nvidia_driver.gpu_pcie_width[gpu0]: GPU 0 PCIe link x8"]
    unexplained = copy.deepcopy(real)
    unexplained["hosts"]["h200-01"]["failed"][0]["found"] = ""
    assert len(hw.verify_problems(unexplained)) == 1
    assert hw.verify_problems(real, provisioned=True)[0].startswith("provisioned to the matrix, yet verify is fail")


# ---------------------------------------------------------------- training environment (issue 16 item 8)

REAL_CPU_TORCH = (Path(__file__).resolve().parents[1] / "data" / "fixtures" / "verify"
                  / "cpu-torch-train-env-local-real.json")


def test_train_env_problems_on_a_real_verify_of_a_cpu_torch() -> None:
    """The hardware tier's judgement of the train_env checks, on a real `gpuctl verify --json`
    whose train_env knobs pointed (the tier's way) at a CPU-only torch on a GPU-less machine:
    torch imports, so that check is not named; torch sees no GPU, so gpu_count and the matmul
    are; the version pins are named only where the machine claims to be provisioned. The same
    record with those two checks passed (a healthy GPU machine) has no problem."""
    import copy
    import json

    hw = _hardware_module()
    real = json.loads(REAL_CPU_TORCH.read_text())
    host = real["hosts"]["h200-01"]
    assert "train_env.torch_imports" in host["passed"]
    problems = hw.verify_train_env_problems(real)
    assert problems == ["train_env.gpu_count did not pass", "train_env.gpu_matmul did not pass",
                        "train_env.gpu_count: torch sees 0 GPU(s), single-h200 has 1",
                        "train_env.gpu_matmul[gpu0]: torch does not see gpu0 (it sees 0); see train_env.gpu_count"]
    pinned = hw.verify_train_env_problems(real, provisioned=True)
    assert any(p.startswith("train_env.torch_version: torch is 2.13.0+cpu, the matrix pins 2.11.0+cu130")
               for p in pinned)
    assert any(p.startswith("train_env.installed_matches_lock: ") for p in pinned)
    healthy = copy.deepcopy(real)
    h = healthy["hosts"]["h200-01"]
    moved = [c for c in h["failed"] + h["could_not_run"] if c["check"].split("[")[0] in hw.TRAIN_ENV_CHECKS]
    h["failed"] = [c for c in h["failed"] if c not in moved]
    h["could_not_run"] = [c for c in h["could_not_run"] if c not in moved]
    h["passed"] += [c["check"] for c in moved]
    assert hw.verify_train_env_problems(healthy) == []
    broken = copy.deepcopy(healthy)
    b = broken["hosts"]["h200-01"]
    b["passed"].remove("train_env.torch_imports")
    b["failed"].append({"check": "train_env.torch_imports", "message": "`import torch` fails in /opt/gpuctl/train-env",
                        "expected": "torch imports", "found": "ImportError", "remediation": "reconfigure"})
    assert hw.verify_train_env_problems(broken) == [
        "train_env.torch_imports did not pass",
        "train_env.torch_imports: `import torch` fails in /opt/gpuctl/train-env"]


def test_the_tiers_training_environment_is_one_the_role_accepts(tmp_path: Path) -> None:
    """The knobs the tier sets are ones an inventory may hold (under /opt/gpuctl) and reach the
    role; the stand-in environment's bin/python runs the given python (its venv kept)."""
    import subprocess
    import sys

    from gpuctl.inventory import load_inventory
    from gpuctl.spec import resolve, train_env_knob

    hw = _hardware_module()
    role_vars = {"train_env_path": f"{hw.HW_TRAIN_DIR}/train-env",
                 "train_env_probe_file": f"{hw.HW_TRAIN_DIR}/train-env-probe.py"}
    [spec] = resolve(load_inventory(hw.inventory_copy(tmp_path, role_vars)))
    assert {k: train_env_knob(spec, k) for k in role_vars} == role_vars
    [spec] = resolve(load_inventory(hw.inventory_copy(tmp_path, None, address="127.0.0.1")))
    assert spec.address == "127.0.0.1"
    made = hw.train_env_role_vars(sys.executable, folder=str(tmp_path / "hw"))
    assert made["train_env_path"] == str(tmp_path / "hw" / "train-env")
    out = subprocess.run([f"{made['train_env_path']}/bin/python", "-c", "import sys; print(sys.prefix)"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == sys.prefix
    assert Path(made["train_env_probe_file"]).read_text().startswith('"""gpuctl train_env probe')


def test_hardware_check_script_parses_and_runs_the_training_step() -> None:
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "scripts" / "hardware-check"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, timeout=30).returncode == 0
    # its two pytest steps (each with its own time limit) run every hardware test exactly once
    import re

    selections = re.findall(r"-k '([^']+)'", script.read_text())
    assert len(selections) == 2

    def collected(*args: str) -> set[str]:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "-m", "hardware", str(HW_TEST), *args], capture_output=True, text=True, timeout=120)
        return {ln.split("::", 1)[1] for ln in proc.stdout.splitlines() if "::" in ln}

    every = collected()
    parts = [collected("-k", k) for k in selections]
    assert {"test_train_env_checks_on_this_machine", "test_torchrun_on_every_gpu_of_this_node"} == parts[1]
    assert parts[0] | parts[1] == every and not parts[0] & parts[1] and len(every) >= 5
