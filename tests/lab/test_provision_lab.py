"""Lab tier: provision the lab nodes twice over real SSH; the second run changes nothing.

Runs `gpuctl provision` as a user would (subprocess, --yes --json). Roles that do not
exist yet in this checkout are skipped explicitly (and reported as skipped). The figures
the issue asks for — operations, remote commands and wall time of a first and a no-op
run — are printed (pytest -s) and attached to the test report as properties.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labrun import mark_converged

from gpuctl.runner.roles import role_available
from gpuctl.spec import ROLE_ORDER

pytestmark = [pytest.mark.lab, pytest.mark.slow]

GPUCTL = [sys.executable, "-c", "from gpuctl.cli.main import main; main()"]


def _provision(inventory: str, skip: list[str], runs: Path) -> tuple[dict, float, str]:
    args = ["provision", inventory, "--yes", "--json"]
    if skip:
        args += ["--skip", ",".join(skip)]
    env = dict(os.environ, GPUCTL_RUNS_DIR=str(runs), NO_COLOR="1")
    t0 = time.monotonic()
    proc = subprocess.run([*GPUCTL, *args], capture_output=True, text=True, env=env, timeout=3600)
    wall = time.monotonic() - t0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert proc.returncode == out["exit_code"]
    return out, wall, proc.stderr


def _figures(out: dict, wall: float) -> dict:
    hosts = out["hosts"].values()
    return {
        "wall_s": round(wall, 1),
        "run_s": out["seconds"],
        "operations_per_host": max(h["operations"] for h in hosts),
        "remote_commands_per_host": max(h["remote_commands"] for h in hosts),
        "changed": sum(h["changed"] for h in hosts),
        "rebooted": [n for n, h in out["hosts"].items() if h["rebooted"]],
    }


def test_provision_twice_second_run_is_a_no_op(lab, tmp_path: Path, record_property) -> None:
    inventory = str(lab.inventory_path)
    skip = [r for r in ROLE_ORDER if not role_available(r)]
    first, wall1, err1 = _provision(inventory, skip, tmp_path / "runs")
    assert first["exit_code"] == 0, {n: h["error"] for n, h in first["hosts"].items()} or err1[-2000:]
    assert all(h["status"] == "ok" for h in first["hosts"].values())
    for r in skip:
        assert {"role": r, "status": "skipped: --skip"} in first["roles"]

    second, wall2, err2 = _provision(inventory, skip, tmp_path / "runs")
    assert second["exit_code"] == 0, err2[-2000:]
    for name, h in second["hosts"].items():
        assert h["status"] == "ok", name
        assert h["changed"] == 0, (name, [o for o in _changed_ops(tmp_path / "runs", second["run_id"], name)])
        assert h["failed"] == 0 and h["rebooted"] is False, name
        assert h["unchanged"] == h["operations"] > 0, name

    mark_converged(inventory)  # later lab tests reuse this converged cluster
    f1, f2 = _figures(first, wall1), _figures(second, wall2)
    record_property("first_run", f1)
    record_property("noop_run", f2)
    print(f"\nfirst run: {f1}\nno-op run: {f2}\nskipped roles: {skip}")


def _changed_ops(runs: Path, run_id: str, host: str) -> list[str]:
    stage = json.loads((runs / run_id / "stages" / "provision.json").read_text())
    return [o["operation"] for o in stage["hosts"][host]["operations_detail"] if o["status"] == "changed"]
