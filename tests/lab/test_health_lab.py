"""Lab tier: the passive health checks on the lab's nodes (issue 19). Healthy nodes are healthy
in `gpuctl health` and in verify's health checks; each stand-in fault of a passive check
(throttle, fabric not ready, one node's VBIOS different, Xid 79, ACS redirect on a PCIe switch
port, PCIe AER errors, NVLink error counters rising) is then named on the faulty node only — by
`gpuctl health` AND by `gpuctl verify` — and both are clean again once the faults are cleared.
The wall time of `gpuctl health` per node and for the whole run is printed and recorded.
Passed 2026-12-05 on a fresh clone with its own lab (2 nodes): 3200 s, of which 2839 s lab up
and provision at load 13–19, 356 s the test itself.

The faults do not mask one another, so they are injected together and judged once (the tier
must fit CI on 2 cores). The VBIOS fault is judged against the lock file (two lab nodes have no
majority), so the test records a lock of the healthy lab first and removes it afterwards.

Counters: NVLink replay and CRC errors rising are a warning by health.yaml counter_rises.nvlink
(a retried, corrected link), so the faulty node carries a warning for them, not a failure, and
verify (which has no warning status) cannot name them: the test asserts health's warning and
nothing of verify for that fault. Soft-RoCE has no IB port counters (reported, not judged) and
the lab's one virtio NIC has no NUMA node (GPU↔NIC affinity reported, not judged).
"""

from __future__ import annotations

import time

import pytest
from labrun import ensure_provisioned

from gpuctl.checks.model import CheckStatus
from gpuctl.checks.runner import run_verify
from gpuctl.health import HEALTHY, UNHEALTHY, run_health
from gpuctl.healthpolicy import FAIL, WARN
from gpuctl.inventory import load_inventory
from gpuctl.spec import resolve

pytestmark = [pytest.mark.lab, pytest.mark.slow]

FAULTY = 0
#: fault -> (health check, subject prefix, status on the faulty node, verify check id or None)
EXPECTED: dict[str, tuple[str, str, str, str | None]] = {
    "throttle": ("clock_events", "GPU 3 ", FAIL, "nvidia_driver.health_clock_events"),
    "fabric_not_ready": ("nvswitch_fabric", "GPU 0 ", FAIL, "fabricmanager.health_nvswitch_fabric"),
    "vbios_differs": ("firmware", "vbios/0", FAIL, "nvidia_driver.health_gpu_firmware"),
    "xid_79": ("xid", "", FAIL, "nvidia_driver.no_fatal_xid"),
    # GPU 2 (3a:00.0) sits below the switch downstream port 39:00.0 (gpuctl.lab.pcisim)
    "acs_redirect": ("pcie_acs", "0000:39:00.0", FAIL, "nvidia_driver.health_pcie_acs"),
    "pcie_aer": ("pcie_aer", "GPU 0000:9a:00.0", FAIL, "nvidia_driver.health_pcie_aer"),
    "nvlink_errors": ("nvlink_errors", "GPU 1 link 0", WARN, None),
}
HEALTH_ROLES = ("nvidia_driver", "fabricmanager", "network")
VERIFY_HEALTH = {c for *_, c in EXPECTED.values() if c}


@pytest.fixture(scope="module")
def provisioned(lab, tmp_path_factory):
    ensure_provisioned(lab.inventory_path, tmp_path_factory.mktemp("runs"))
    return load_inventory(lab.inventory_path)


def _lock(loaded, specs):
    from gpuctl.lock.model import build_lock
    from gpuctl.lock.read import read_nodes

    found = read_nodes(loaded, specs)
    assert not found.errors, found.errors
    return build_lock(loaded, found.nodes)


def _health(loaded, specs, record_property, label):
    t0 = time.monotonic()
    result = run_health(loaded, specs)
    wall = time.monotonic() - t0
    per_node = {n: round(h.seconds, 2) for n, h in result.nodes.items()}
    record_property(f"health_{label}_wall_s", round(wall, 2))
    record_property(f"health_{label}_per_node_s", per_node)
    print(f"\nhealth ({label}) of {len(specs)} lab nodes: {wall:.1f} s; per node {per_node}")
    return result


def _verify_health_failures(loaded, host):
    """verify's passive checks (and the Xid check) that fail on `host`, with their messages."""
    result = run_verify(loaded, roles=HEALTH_ROLES)
    checks = result.hosts[host].checks
    return {c.check: c.message for c in checks if c.status is CheckStatus.FAIL
            and (c.check.split(".", 1)[1].startswith("health_") or c.check in VERIFY_HEALTH)}


def test_health_healthy_then_each_fault_on_its_node_only(provisioned, lab, tmp_path, monkeypatch, record_property):
    from gpuctl.lab.standin.faults import apply_fault
    from gpuctl.lock.model import lock_path, write_lock

    monkeypatch.setenv("GPUCTL_STATE_DIR", str(tmp_path / "state"))
    loaded = provisioned
    specs = resolve(loaded, ())
    faulty, others = specs[FAULTY].node, [s.node for s in specs if s.node != specs[FAULTY].node]
    lock_file = lock_path(loaded.path)
    assert not lock_file.exists(), f"{lock_file} exists: the test would overwrite someone's lock"
    write_lock(_lock(loaded, specs), lock_file)
    injected: list[str] = []
    try:
        one = _health(loaded, specs[:1], record_property, "one_node")  # the wall time of one node alone
        assert one.status == HEALTHY, one.as_dict()
        healthy = _health(loaded, specs, record_property, "healthy")  # also the counters' baseline
        assert healthy.status == HEALTHY, {n: h.as_dict() for n, h in healthy.nodes.items()}
        for name in (faulty, *others):
            assert _verify_health_failures(loaded, name) == {}, name

        for f in EXPECTED:
            apply_fault(faulty, f, state=lab)
            injected.append(f)
        time.sleep(2)  # the NVLink counters of the stand-in rise once a second
        result = _health(loaded, specs, record_property, "faulty")
        node = result.nodes[faulty]
        assert node.status == UNHEALTHY
        for f, (check, subject, status, _) in EXPECTED.items():
            assert any(x.check == check and x.subject.startswith(subject) and x.status == status
                       for x in node.findings), (f, node.as_dict())
        assert node.drain_line() and node.drain_line().startswith("gpuctl: xid: ")
        for other in others:
            h = result.nodes[other]
            assert h.status == HEALTHY and not [x for x in h.findings if x.status in (FAIL, WARN)], h.as_dict()

        failed = _verify_health_failures(loaded, faulty)
        want = {c for *_, c in EXPECTED.values() if c}
        assert set(failed) == want, failed
        for f, (_, subject, _, check) in EXPECTED.items():
            if check and subject:
                assert subject.strip() in failed[check], (f, failed[check])
        for other in others:
            assert _verify_health_failures(loaded, other) == {}, other

        for f in reversed(injected):
            apply_fault(faulty, f, clear=True, state=lab)
        injected.clear()
        cleared = _health(loaded, specs, record_property, "cleared")
        assert cleared.status == HEALTHY, {n: [x.as_dict() for x in h.failed] for n, h in cleared.nodes.items()}
        assert _verify_health_failures(loaded, faulty) == {}
    finally:
        for f in reversed(injected):
            apply_fault(faulty, f, clear=True, state=lab)
        lock_file.unlink(missing_ok=True)
