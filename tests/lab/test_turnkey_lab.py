"""Lab tier: turnkey end to end on the lab nodes — an injected preflight failure stops
it, a resume after clearing the fault skips what passed and delivers the bundle.

The handover hands one customer account over (a key made for the test); the provider's
key stays (remove_provider_key: false) so later lab tests can still log in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from gpuctl.lab.standin.faults import apply_fault

pytestmark = [pytest.mark.lab, pytest.mark.slow]

GPUCTL = [sys.executable, "-c", "from gpuctl.cli.entry import run; run()"]


def _turnkey(inventory: Path, runs: Path, *extra: str) -> tuple[int, dict]:
    env = dict(os.environ, GPUCTL_RUNS_DIR=str(runs), NO_COLOR="1")
    proc = subprocess.run([*GPUCTL, "turnkey", str(inventory), "--yes", "--suite", "quick", "--json", *extra],
                          capture_output=True, text=True, env=env, timeout=3600)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def test_turnkey_stops_at_preflight_then_resumes_to_a_bundle(lab, tmp_path: Path) -> None:
    key = tmp_path / "customer"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@customer", "-f", str(key)],
                   check=True)
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    data["handover"] = {"accounts": [{"name": "alice", "ssh_keys": [key.with_suffix(".pub").read_text().strip()],
                                      "sudo": True}], "remove_provider_key": False}
    inventory = Path(lab.inventory_path).with_name("lab-turnkey.yaml")
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    runs = tmp_path / "runs"
    node = lab.nodes[0].name
    apply_fault(node, "pcie_x8", gpu=3)
    try:
        code, first = _turnkey(inventory, runs)
    finally:
        apply_fault(node, "pcie_x8", clear=True)
    assert code == 1 and first["failed_stage"] == "preflight", first
    assert "x8" in first["stages"]["preflight"]["detail"]
    assert first["resume"].endswith(Path(first["run"]).name)

    code, second = _turnkey(inventory, runs, "--resume", Path(first["run"]).name)
    assert code == 0, second
    assert second["run"] == first["run"]
    assert [s["status"] for s in second["stages"].values()] == ["pass"] * 5
    bundle = Path(second["stages"]["handover"]["data"]["bundle"])
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
    assert any(n.endswith("SHA256SUMS") for n in names)
    assert any(n.endswith(".lock.yaml") for n in names)
    assert not any("id_ed25519" in n and not n.endswith(".pub") for n in names)
    login = subprocess.run(["ssh", "-i", str(key), "-p", str(lab.nodes[0].ssh_port), "-o", "BatchMode=yes",
                            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                            "alice@127.0.0.1", "sudo", "-n", "true"], capture_output=True, text=True, timeout=120)
    assert login.returncode == 0, login.stderr
