"""Lab tier: what goes wrong in a real rollout, on real QEMU guests over real SSH.

1. A node is killed (QEMU SIGKILL, like pulling the power) in the middle of a provision
   that has work to do on it — while its apt/dpkg is installing, when the timing allows:
   the other node completes and verifies, the run reports the killed one and exits 1;
   the node is started again and the rerun finishes it (dpkg's interrupted state is
   repaired by the role, not by hand) and verifies both.
2. A driver version change (the lab matrix with another R580 release, 580.95.05 →
   580.126.16, the stand-in repository rebuilt with both) triggers exactly one reboot per
   node, one node at a time (max-unavailable 1 of 2), and the nodes come back with the new
   module loaded and verified. Rolling back to the shipped matrix does the same.

Boots are counted by a oneshot unit this test installs in each guest (one line per boot),
not by trusting gpuctl's own report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from labrun import ensure_provisioned, lab_changed, mark_converged

from gpuctl.lab.nodes import kill_node, start_node
from gpuctl.lab.ssh import ssh_run
from gpuctl.matrix import load_matrix, matrix_names

pytestmark = [pytest.mark.lab, pytest.mark.slow]

GPUCTL = [sys.executable, "-m", "gpuctl"]
NEW_DRIVER = "580.126.16"  # a real R580 release (facts.md: a public cloud image's pin)

BOOTLOG_UNIT = """[Unit]
Description=gpuctl lab test: count boots
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'echo "$(cat /proc/sys/kernel/random/boot_id) $(date +%%s)" >> /var/lib/labtest-boots'

[Install]
WantedBy=multi-user.target
"""


def sh(lab: Any, node: str, cmd: str, timeout: float = 300) -> str:
    return ssh_run(node, cmd, state=lab, check=True, timeout=timeout).stdout


def provision(inventory: str | Path, runs: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    env = dict(os.environ, GPUCTL_RUNS_DIR=str(runs), NO_COLOR="1")
    proc = subprocess.run([*GPUCTL, "provision", str(inventory), "--yes", "--json", *extra],
                          capture_output=True, text=True, env=env, timeout=3600)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def base_version(lab: Any) -> str:
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    return load_matrix(data["cluster"]["matrix"]).matrix.driver.version


def loaded_driver(lab: Any, node: str) -> str:
    return sh(lab, node, "cat /sys/module/nvidia/version").strip()


def boots(lab: Any, node: str) -> list[str]:
    return [ln for ln in sh(lab, node, "cat /var/lib/labtest-boots 2>/dev/null || true").splitlines() if ln]


def installed(abbrev: str) -> bool:
    """dpkg's ${db:Status-Abbrev}: 'ii ' installed, 'hi ' installed and held."""
    return abbrev[1:2] == "i"


DCGM_STATUS = "dpkg-query -W -f='${db:Status-Abbrev}' datacenter-gpu-manager-4-core 2>/dev/null || true"


def host_errors(out: dict) -> dict:
    return {n: h["error"] for n, h in out["hosts"].items() if h["status"] != "ok"}


@pytest.fixture(scope="module")
def converged(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The lab at its own matrix, every role applied (a no-op when an earlier test did it),
    with the boot counter installed, the current boot counted and all of it on disk: the
    killed-node test pulls a node's power, and an unsynced unit file would not survive it
    (CI saw exactly that: gpu-02 counted no boot at all after its restart)."""
    ensure_provisioned(lab.inventory_path, tmp_path_factory.mktemp("rollout-runs"))
    for n in lab.nodes:
        ssh_run(n.name, "cat > /etc/systemd/system/labtest-bootlog.service && systemctl daemon-reload && "
                        "systemctl enable -q labtest-bootlog.service && "
                        "systemctl start labtest-bootlog.service && sync", state=lab, check=True,
                input=BOOTLOG_UNIT.replace("%%", "%"))
        assert boots(lab, n.name), f"{n.name}: the boot counter recorded nothing"
    yield lab
    for n in lab.nodes:  # not gpuctl's: it must not stay behind as drift
        ssh_run(n.name, "systemctl disable -q labtest-bootlog.service; rm -f /var/lib/labtest-boots "
                        "/etc/systemd/system/labtest-bootlog.service; systemctl daemon-reload", state=lab, timeout=120)


def test_node_killed_mid_provision_others_finish_and_rerun_completes_it(converged: Any, tmp_path: Path) -> None:
    lab = converged
    victim, survivor = lab.nodes[-1].name, lab.nodes[0].name
    lab_changed()
    # give the victim real work: DCGM removed (held packages, so apt must be told)
    sh(lab, victim, "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q --allow-change-held-packages "
                    "datacenter-gpu-manager-4-cuda13 datacenter-gpu-manager-4-core >/dev/null")
    env = dict(os.environ, GPUCTL_RUNS_DIR=str(tmp_path / "runs"), NO_COLOR="1")
    run = subprocess.Popen([*GPUCTL, "provision", lab.inventory_path, "--yes", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    # kill the victim while apt is installing there (or, failing that, while the run is still going)
    killed_during = "the run"
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline and run.poll() is None:
        probe = ssh_run(victim, f"pgrep -f 'apt-get install' >/dev/null && echo apt; {DCGM_STATUS}",
                        state=lab, timeout=30).stdout
        if probe.startswith("apt"):
            killed_during = "apt-get install"
            break
        if installed(probe):
            break  # DCGM already back: kill now, the run still has its later roles to do
        time.sleep(0.3)
    assert run.poll() is None, "provision ended before the node could be killed"
    kill_node(victim, state=lab)
    stdout, stderr = run.communicate(timeout=3600)
    assert "Traceback" not in stderr, stderr[-3000:]
    first = json.loads(stdout)
    assert first["exit_code"] == 1, (first["exit_code"], host_errors(first))
    assert first["hosts"][survivor]["status"] == "ok", host_errors(first)
    assert first["hosts"][victim]["status"] in ("failed", "unreachable"), first["hosts"][victim]
    verify = first.get("verify") or {}
    if verify.get("hosts"):
        assert verify["hosts"][survivor]["status"] == "pass", verify["hosts"][survivor]

    start_node(victim, wait=True, timeout=600, state=lab)
    dpkg_state = sh(lab, victim, "ls -A /var/lib/dpkg/updates | wc -l; "
                                 "dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' 'datacenter-gpu-manager-4-*'"
                                 " 2>/dev/null || true")
    second = provision(lab.inventory_path, tmp_path / "runs")[1]
    assert second["exit_code"] == 0, host_errors(second) or second.get("verify")
    assert all(h["status"] == "ok" for h in second["hosts"].values())
    assert second["hosts"][survivor]["changed"] == 0  # nothing left to do there
    assert second["verify"]["status"] == "pass"
    assert sh(lab, victim, DCGM_STATUS).startswith("hi")  # back, and held
    mark_converged(lab.inventory_path)
    print(f"\nkilled {victim} during {killed_during}; its dpkg state after the restart:\n{dpkg_state}"
          f"rerun changed {second['hosts'][victim]['changed']} operation(s) there")


def _variant_matrix(folder: Path, matrix: str, old: str) -> Path:
    """`matrix` with another driver release: every package pinned at the driver's version
    (driver, kernel module, utils, persistenced, fabric manager, NSCQ) moves with it."""
    src = load_matrix(matrix)
    text = src.path.read_text().replace(old, NEW_DRIVER)
    name = f"{src.matrix.name}-driver-{NEW_DRIVER}"
    text = text.replace(f"name: {src.matrix.name}\n", f"name: {name}\n", 1)
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def _rollout(lab: Any, inventory: Path, runs: Path, version: str) -> dict:
    before = {n.name: boots(lab, n.name) for n in lab.nodes}
    assert all(before.values()), f"boot counter lost on a node before the rollout: {before}"
    proc, out = provision(inventory, runs)
    assert proc.returncode == 0, host_errors(out) or out.get("verify") or proc.stderr[-3000:]
    stage = json.loads((runs / out["run_id"] / "stages" / "provision.json").read_text())
    assert stage["reboots"]["max_unavailable"] == 1
    assert stage["reboots"]["peak_down"] == 1  # one node at a time
    for n in lab.nodes:
        h = out["hosts"][n.name]
        assert h["status"] == "ok" and h["rebooted"] is True, (n.name, h)
        after = boots(lab, n.name)
        assert len(after) == len(before[n.name]) + 1, (n.name, before[n.name], after)  # exactly one reboot
        assert loaded_driver(lab, n.name) == version
        assert f"  {version}  " in sh(lab, n.name, "head -1 /proc/driver/nvidia/version")
        assert sh(lab, n.name, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").split() == [version] * 8
        assert sh(lab, n.name, "systemctl is-active nvidia-fabricmanager").strip() == "active"
    assert out["verify"]["status"] == "pass", out["verify"]
    return out


def test_driver_version_change_reboots_each_node_once_and_rolls_back(converged: Any, tmp_path: Path) -> None:
    from gpuctl.lab.standin.repo import build_repo

    lab = converged
    old = base_version(lab)
    inv = tmp_path / "inventory.yaml"
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    # the inventory names the matrix (issue 17: never a path); a site matrix lives in matrices/ beside it
    (tmp_path / "matrices").mkdir()
    variant = _variant_matrix(tmp_path / "matrices", data["cluster"]["matrix"], old)
    data["cluster"]["matrix"] = variant.stem
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    rc = subprocess.run([*GPUCTL, "matrix", "check", str(variant), "--sku", data["cluster"]["sku"]],
                        capture_output=True, text=True)
    assert rc.returncode == 0, rc.stdout + rc.stderr
    t0 = time.monotonic()
    build_repo(matrices=[*matrix_names(), str(variant)])
    repo_s = time.monotonic() - t0

    lab_changed()
    t0 = time.monotonic()
    up = _rollout(lab, inv, tmp_path / "runs", NEW_DRIVER)
    up_s = time.monotonic() - t0
    t0 = time.monotonic()
    down = _rollout(lab, Path(lab.inventory_path), tmp_path / "runs", old)
    down_s = time.monotonic() - t0
    mark_converged(lab.inventory_path)
    print(f"\nrepo rebuild {repo_s:.0f} s; upgrade {old} → {NEW_DRIVER}: {up_s:.0f} s "
          f"({ {n: h['changed'] for n, h in up['hosts'].items()} } changed); rollback: {down_s:.0f} s "
          f"({ {n: h['changed'] for n, h in down['hosts'].items()} } changed)")
