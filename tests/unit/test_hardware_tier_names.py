"""The hardware tier names the checks it requires to pass on a real GPU machine: each name
must be a check some role really has, or the tier would assert on checks that never run."""

from __future__ import annotations

import ast
from pathlib import Path

from gpuctl.paths import roles_dir

HW_TEST = Path(__file__).resolve().parents[1] / "hardware" / "test_real_gpu.py"


def _hardware_checks() -> tuple[str, ...]:
    tree = ast.parse(HW_TEST.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "HARDWARE_CHECKS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("HARDWARE_CHECKS not found in tests/hardware/test_real_gpu.py")


def test_every_hardware_check_name_is_a_real_check() -> None:
    names = _hardware_checks()
    assert len(names) >= 10
    for name in names:
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
