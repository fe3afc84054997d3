"""The check session (every roles/*/checks.py, collected as verify collects them) loads no
install-side machinery: pyinfra, Jinja and the operations module cost ~0.3 s of start-up
CPU that verify never uses (issue 18)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
from gpuctl.checks.runner import list_checks
from gpuctl.inventory import load_inventory
from gpuctl.paths import inventories_dir
from gpuctl.spec import resolve
ids = list_checks(resolve(load_inventory(inventories_dir() / "lab.yaml")))
assert sum(map(len, ids.values())) > 50, ids
print(",".join(sorted(m for m in sys.modules
                      if m.split(".")[0] in ("pyinfra", "jinja2") or m == "gpuctl.operations")))
"""


def test_collecting_every_check_imports_no_install_side_module() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
