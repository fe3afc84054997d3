"""Acceptance: `gpuctl plan` on a cluster nobody answers for fails per host, cleanly, fast.

A copy of inventories/h100-8x4.yaml whose nodes point at 127.0.0.1 only: two ports where
nothing listens (refused), and ports held by a listening socket that never accepts or
answers (the SSH banner never comes: the connect timeout must end it). No traffic leaves
the loopback interface.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gpuctl.paths import inventories_dir

GPUCTL = [sys.executable, "-c", "from gpuctl.cli.main import main; main()"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port that accepts TCP connections (kernel backlog) and never says a word."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


def _loopback_inventory(tmp_path: Path, ports: list[int], timeout_s: int = 2) -> Path:
    inv = yaml.safe_load((inventories_dir() / "h100-8x4.yaml").read_text())
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    inv["ssh"] = {"user": "root", "key": str(key), "connect_timeout_s": timeout_s,
                  "known_hosts": str(tmp_path / "known_hosts")}
    if "management" in inv:
        inv["management"]["cidr"] = "127.0.0.0/8"
    assert len(inv["nodes"]) == len(ports)
    for node, port in zip(inv["nodes"], ports, strict=True):
        node["address"] = "127.0.0.1"
        node["ssh_port"] = port
    path = tmp_path / "h100-8x4-loopback.yaml"
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path


def _run(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = dict(os.environ, GPUCTL_RUNS_DIR=str(tmp_path / "runs"), NO_COLOR="1", COLUMNS="200")
    t0 = time.monotonic()
    proc = subprocess.run([*GPUCTL, *args], capture_output=True, text=True, env=env, timeout=120)
    return proc, time.monotonic() - t0


def test_plan_unreachable_cluster_fails_each_host_cleanly(tmp_path: Path, silent_port: int) -> None:
    s2 = socket.socket()
    s2.bind(("127.0.0.1", 0))
    s2.listen(16)
    try:
        ports = [_free_port(), _free_port(), silent_port, s2.getsockname()[1]]
        inv = _loopback_inventory(tmp_path, ports)
        proc, seconds = _run(["plan", str(inv), "--json"], tmp_path)
    finally:
        s2.close()
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    # refused ports fail at once; silent ones after the 2 s timeout (+1 retry): seconds, not minutes
    assert seconds < 30
    out = json.loads(proc.stdout)
    assert out["exit_code"] == 3
    hosts = out["hosts"]
    assert set(hosts) == {"gpu-01", "gpu-02", "gpu-03", "gpu-04"}
    for name, h in hosts.items():
        assert h["status"] == "unreachable", name
        assert h["error"] and "\n" not in h["error"], name
        assert h["changed"] == 0 and h["rebooted"] is False
    assert "Could not connect" in hosts["gpu-01"]["error"]
    assert "banner" in hosts["gpu-03"]["error"].lower() or "timed out" in hosts["gpu-03"]["error"].lower()
    # the run record has the per-host results and pyinfra's own log
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    stage = json.loads((runs[0] / "stages" / "plan.json").read_text())
    assert stage["hosts"]["gpu-04"]["status"] == "unreachable"
    assert (runs[0] / "pyinfra.log").is_file()


def test_hosts_connect_in_parallel(tmp_path: Path) -> None:
    """Four silent hosts (2 s timeout, 2 attempts each) take one host's time, not four:
    gevent is patched before pyinfra connects, even though other CLI modules import
    paramiko/ssl first."""
    socks = []
    try:
        for _ in range(4):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(8)
            socks.append(s)
        inv = _loopback_inventory(tmp_path, [s.getsockname()[1] for s in socks])
        proc, _ = _run(["plan", str(inv), "--json"], tmp_path)
    finally:
        for s in socks:
            s.close()
    assert proc.returncode == 3
    assert "MonkeyPatchWarning" not in proc.stderr
    seconds = [h["seconds"] for h in json.loads(proc.stdout)["hosts"].values()]
    assert max(seconds) < 8, seconds  # serial would be ≥ 16 s


def test_plan_text_output_one_line_per_host(tmp_path: Path) -> None:
    inv = _loopback_inventory(tmp_path, [_free_port() for _ in range(4)])
    proc, _ = _run(["plan", str(inv)], tmp_path)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr + proc.stdout
    failed_lines = [ln for ln in proc.stderr.splitlines() if ": FAILED: " in ln]
    assert len(failed_lines) == 4  # one line per host, once
    assert "no host could be reached" in proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if "unreachable" in ln]
    assert len(rows) == 4


def test_missing_key_fails_hosts_without_connecting(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    s.settimeout(0.1)
    try:
        inv_path = _loopback_inventory(tmp_path, [s.getsockname()[1]] + [_free_port() for _ in range(3)])
        inv = yaml.safe_load(inv_path.read_text())
        inv["ssh"]["key"] = str(tmp_path / "nope")
        inv_path.write_text(yaml.safe_dump(inv))
        proc, _ = _run(["plan", str(inv_path), "--json"], tmp_path)
        with pytest.raises(TimeoutError):
            s.accept()  # nobody knocked
    finally:
        s.close()
    assert proc.returncode == 3
    out = json.loads(proc.stdout)
    assert all("not found" in h["error"] for h in out["hosts"].values())


def test_provision_requires_yes_without_a_terminal(tmp_path: Path) -> None:
    inv = _loopback_inventory(tmp_path, [_free_port() for _ in range(4)])
    proc, _ = _run(["provision", str(inv)], tmp_path)
    assert proc.returncode == 2
    assert "--yes" in proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before any run started
