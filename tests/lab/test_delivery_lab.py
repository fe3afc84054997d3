"""Lab tier: lock → drift on real nodes, a hand change shows, a fresh node is rebuilt to the lock.

Needs the QEMU lab (`lab` fixture) and a full provision of it (several minutes under TCG).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from labrun import ensure_provisioned, gpuctl_json, lab_changed, mark_converged

from gpuctl.inventory import load_inventory
from gpuctl.lab import nodes as lab_nodes
from gpuctl.lab.ssh import ssh_run
from gpuctl.lock import drifting, locking
from gpuctl.runrecord import RunRecord

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def provisioned(lab, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    ensure_provisioned(lab.inventory_path, runs)
    return load_inventory(Path(lab.inventory_path)), runs


def test_lock_drift_and_a_hand_change(provisioned, lab, tmp_path):
    loaded, runs = provisioned
    lock_file = tmp_path / "lab.lock.yaml"
    out = locking.lock(loaded, record=RunRecord.create("lock", root=runs), path=lock_file)
    entry = out.lock.nodes["gpu-01"]
    # read from the node: every enabled component's packages installed, held, at a version
    versions = entry.package_versions()
    assert versions and all(v is not None for v in versions.values()), versions
    assert entry.kernel and entry.files.get("/etc/nccl.conf")
    assert drifting.drift(loaded, path=lock_file).clean
    mark_converged(loaded.path)
    # a hand change on one node: nccl.conf edited and a package un-held
    lab_changed()
    ssh_run("gpu-02", "echo NCCL_DEBUG=INFO >> /etc/nccl.conf && apt-mark unhold libnccl2", state=lab, check=True)
    report = drifting.drift(loaded, path=lock_file)
    found = {(d.node, d.kind, d.key) for d in report.items}
    assert ("gpu-02", "lock", "file /etc/nccl.conf") in found
    assert ("gpu-02", "lock", "hold libnccl2") in found
    assert {d.node for d in report.items if d.kind == "lock"} == {"gpu-02"}


def test_rebuild_fresh_node_to_the_lock(provisioned, lab, tmp_path):
    loaded, runs = provisioned
    ensure_provisioned(loaded.path, runs)  # the lock is taken of a converged cluster (the test above drifted gpu-02)
    lock_file = tmp_path / "lab.lock.yaml"
    locking.lock(loaded, record=RunRecord.create("lock", root=runs), path=lock_file)
    assert drifting.drift(loaded, path=lock_file).clean
    lab_changed()
    lab_nodes.replace_node("gpu-02", state=lab, timeout=600)
    assert ssh_run("gpu-02", "dpkg-query -W nvidia-driver", state=lab).returncode != 0  # really fresh
    before = drifting.drift(loaded, path=lock_file)
    assert any(d.node == "gpu-02" for d in before.items)  # the fresh node has nothing installed
    code, out, err = gpuctl_json("rebuild", str(loaded.path), "--yes", "--host", "gpu-02",
                                 "--lock-file", str(lock_file), "--bench-suite", "none", runs=runs)
    assert out["provision"]["status"] == "ok", (out["provision"], err[-2000:])
    assert out["drift"]["status"] == "clean", out["drift"]
    assert out["verify"]["status"] == "pass", out["verify"]
    assert code == 0 and out["status"] == "ok", out
    assert drifting.drift(loaded, path=lock_file).clean
    mark_converged(loaded.path)
