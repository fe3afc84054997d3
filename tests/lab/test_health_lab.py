"""Lab tier: `gpuctl health` on the lab's nodes (issue 19): healthy nodes are healthy, each
passive-health fault of the stand-in (throttle, fabric not ready, one node's VBIOS different,
Xid 79) is named on the faulty node only, and the wall time per node and for the whole run
is printed and recorded. NOT RUN by the helper that wrote it (the lab tier needs QEMU).

The VBIOS fault is judged against the lock file (two lab nodes have no majority), so the
test records a lock of the healthy lab first and restores the previous one afterwards.
"""

from __future__ import annotations

import time

import pytest
from labrun import ensure_provisioned

from gpuctl.health import HEALTHY, UNHEALTHY, run_health
from gpuctl.inventory import load_inventory
from gpuctl.spec import resolve

pytestmark = [pytest.mark.lab, pytest.mark.slow]

FAULTY = 0
#: fault -> the health check that must fail on the faulty node (subject prefix)
EXPECTED = {"throttle": ("clock_events", "GPU 3 "), "fabric_not_ready": ("nvswitch_fabric", "GPU 0 "),
            "vbios_differs": ("firmware", "vbios/0"), "xid_79": ("xid", "")}


@pytest.fixture(scope="module")
def provisioned(lab, tmp_path_factory):
    ensure_provisioned(lab.inventory_path, tmp_path_factory.mktemp("runs"))
    return load_inventory(lab.inventory_path)


def _lock_of(loaded, specs):
    from gpuctl.lock import read_nodes

    found = read_nodes(loaded, specs)
    assert not found.errors, found.errors
    return {n: dict(e.firmware) for n, e in found.nodes.items()}


def test_health_healthy_then_each_fault_on_its_node_only(provisioned, lab, tmp_path, monkeypatch, record_property):
    from gpuctl.lab.standin.faults import apply_fault

    monkeypatch.setenv("GPUCTL_STATE_DIR", str(tmp_path / "state"))
    loaded = provisioned
    specs = resolve(loaded, ())
    lock = _lock_of(loaded, specs)
    t0 = time.monotonic()
    healthy = run_health(loaded, specs, lock=lock)
    wall = time.monotonic() - t0
    record_property("health_wall_s", round(wall, 2))
    record_property("health_per_node_s", {n: round(h.seconds, 2) for n, h in healthy.nodes.items()})
    print(f"\nhealth of {len(specs)} lab nodes: {wall:.1f} s; per node "
          f"{ {n: round(h.seconds, 2) for n, h in healthy.nodes.items()} }")
    assert healthy.status == HEALTHY, {n: h.as_dict() for n, h in healthy.nodes.items()}
    faulty, others = specs[FAULTY].node, [s.node for s in specs if s.node != specs[FAULTY].node]
    injected = []
    try:
        for f in EXPECTED:
            apply_fault(faulty, f, state=lab)
            injected.append(f)
        result = run_health(loaded, specs, lock=lock)
        node = result.nodes[faulty]
        assert node.status == UNHEALTHY
        for f, (check, subject) in EXPECTED.items():
            assert any(x.check == check and x.subject.startswith(subject) for x in node.failed), (f, node.as_dict())
        assert node.drain_line() and node.drain_line().startswith("gpuctl: xid: ")
        for other in others:
            assert result.nodes[other].status == HEALTHY, result.nodes[other].as_dict()
    finally:
        for f in reversed(injected):
            apply_fault(faulty, f, clear=True, state=lab)
