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
