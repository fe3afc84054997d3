"""Lab tier: container nodes (systemd-nspawn) for scale runs.

Four containers from the cached lab image: SSH works on each, `gpuctl provision --only
base` converges and a second run reports zero changes, the kernel-feature roles are
reported "not applicable in this node kind" (never run, never passed), and `lab down
--kind container` leaves no process, veth, namespace, mount or cgroup behind and puts
the inotify sysctl back. Needs root, systemd-nspawn and the lab image (built once).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuctl.components import container_reasons

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
NODES = 4


def _gpuctl(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuctl", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)


@pytest.fixture(scope="module")
def clab():
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("container lab nodes need root and systemd-nspawn (apt-get install systemd-container)")
    from gpuctl.lab import containers

    if containers.load_state() is not None:
        pytest.skip("a container lab is already running here (gpuctl lab down --kind container)")
    inotify_before = containers.INOTIFY_SYSCTL.read_text().strip()
    up = _gpuctl("lab", "up", "--kind", "container", "--nodes", str(NODES), "--json")
    assert up.returncode == 0, up.stdout + up.stderr
    info = json.loads(up.stdout)
    try:
        yield info, containers.load_state(), inotify_before
    finally:
        containers.down()


def test_ssh_reaches_every_node_with_real_systemd(clab) -> None:
    from gpuctl.lab.containers import ssh_argv

    info, state, _ = clab
    assert len(info["nodes"]) == NODES and info["kind"] == "container"
    for node in state.nodes:
        cmd = "hostname; cat /proc/1/comm; systemctl is-enabled apt-daily.timer || true; ip -4 -o addr show eth0"
        res = subprocess.run(ssh_argv(state, node, cmd), capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.split("\n")
        assert lines[0] == node.name
        assert lines[1] == "systemd"
        assert lines[2] == "masked"
        assert f"inet {node.address}/16" in lines[3]


def test_provision_base_converges_then_changes_nothing(clab) -> None:
    info, _, _ = clab
    inv = info["inventory"]
    first = _gpuctl("provision", inv, "--only", "base", "--yes", "--no-verify", "--json")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    hosts = json.loads(first.stdout)["hosts"]
    assert set(hosts) == {f"gpu-{i:02d}" for i in range(1, NODES + 1)}
    assert all(h["status"] == "ok" and h["failed"] == 0 for h in hosts.values())
    assert all(h["changed"] > 0 for h in hosts.values())
    second = _gpuctl("provision", inv, "--only", "base", "--yes", "--no-verify", "--json")
    assert second.returncode == 0, second.stdout[-3000:]
    again = json.loads(second.stdout)["hosts"]
    assert [h["changed"] for h in again.values()] == [0] * NODES
    assert all(h["status"] == "ok" and not h["rebooted"] for h in again.values())


def test_kernel_feature_roles_are_not_applicable(clab) -> None:
    info, _, _ = clab
    plan = _gpuctl("plan", info["inventory"], "--json")
    assert plan.returncode in (0, 1), plan.stdout[-2000:] + plan.stderr[-2000:]
    roles = {r["role"]: r["status"] for r in json.loads(plan.stdout)["roles"]}
    for role in container_reasons():
        if role in ("lustre_client", "timesync"):  # not in this inventory (no Lustre; timesync off): first
            continue
        assert roles[role].startswith("skipped: not applicable in this node kind (container"), (role, roles[role])
    assert roles["base"] == "runs" and roles["cuda"] == "runs"


def test_down_leaves_nothing_behind(clab) -> None:
    from gpuctl.lab import containers
    from gpuctl.lab.state import pid_alive

    _, state, inotify_before = clab
    pids = [n.process.pid for n in state.nodes if n.process]
    down = _gpuctl("lab", "down", "--kind", "container", "--json")
    assert down.returncode == 0, down.stderr
    assert len(json.loads(down.stdout)["stopped"]) >= NODES
    assert containers.leftovers() == {"links": [], "netns": [], "mounts": [], "cgroups": [], "processes": []}
    # Gone or a zombie: `lab up` ran in a child process that exited, so nspawn was
    # reparented to this machine's PID 1, which is not an init that reaps promptly.
    assert not any(pid_alive(p) for p in pids)
    assert containers.INOTIFY_SYSCTL.read_text().strip() == inotify_before
    assert containers.load_state() is None
