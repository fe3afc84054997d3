"""Lab tier: `gpuctl verify` passes healthy lab nodes and catches every injected fault on
the faulty node only, and the node passes again once the faults are cleared.

Faults that do not mask one another are injected together and verified once (the tier
must fit CI on 2 cores): group A (emulated GPU faults, Xid, fabric manager, RDMA port,
RAID), then group B (driver/library mismatch hides every nvidia-smi reading, so it runs
apart; the netdev rate with it). slow_nccl is a benchmark finding (gpuctl bench), not a
verify one. Checks of roles this checkout does not have yet are not run (nothing to
verify), and faults that need those roles are not injected — both are printed.
"""

from __future__ import annotations

import shlex
import sys
import time

import pytest
from labrun import ensure_provisioned

from gpuctl.checks.model import CheckStatus, HostStatus
from gpuctl.checks.runner import run_verify
from gpuctl.inventory import load_inventory
from gpuctl.runner.roles import role_available
from gpuctl.runrecord import RunRecord
from gpuctl.spec import ROLE_ORDER

pytestmark = [pytest.mark.lab, pytest.mark.slow]

GPUCTL = [sys.executable, "-c", "from gpuctl.cli.main import main; main()"]
FAULTY, HEALTHY = 0, 1  # node indexes

# fault → (roles it needs provisioned, check ids that must fail on the faulty node)
EXPECTED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "gpu_missing": (("nvidia_driver",), ("nvidia_driver.gpu_count", "nvidia_driver.gpu_present[gpu7]")),
    "pcie_x8": (("nvidia_driver",), ("nvidia_driver.gpu_pcie_width[gpu3]",)),
    "nvlink_pairs": (("nvidia_driver",), ("nvidia_driver.nvlink_pair[gpu0-gpu2]",
                                          "nvidia_driver.nvlink_pair[gpu4-gpu6]")),
    "ecc_uncorrectable": (("nvidia_driver",), ("nvidia_driver.gpu_ecc_errors[gpu2]",)),
    "row_remap_pending": (("nvidia_driver",), ("nvidia_driver.gpu_row_remap[gpu1]",)),
    "xid_79": (("nvidia_driver",), ("nvidia_driver.no_fatal_xid",)),
    "fm_down": (("fabricmanager",), ("fabricmanager.service_active[nvidia-fabricmanager]",)),
    "ib_port_down": (("network",), ("network.fabric_port_state[rxe0]",)),
    "raid_degraded": (("nvme_raid",), ("nvme_raid.raid_state",)),
    "driver_mismatch": (("nvidia_driver",), ("nvidia_driver.driver_versions_agree", "nvidia_driver.nvml_readable")),
    "ib_rate_200": (("network",), ("network.fabric_port_rate[rxe0]",)),
}
GROUPS = (
    ("gpu_missing", "pcie_x8", "nvlink_pairs", "ecc_uncorrectable", "row_remap_pending", "xid_79", "fm_down",
     "ib_port_down", "raid_degraded"),
    ("driver_mismatch", "ib_rate_200"),
)


@pytest.fixture(scope="module")
def provisioned(lab, tmp_path_factory):
    """The lab provisioned with every role this checkout has (a no-op when already done)."""
    roles = [r for r in ROLE_ORDER if role_available(r)]
    skip = [r for r in ROLE_ORDER if r not in roles]
    runs = tmp_path_factory.mktemp("runs")
    assert not skip, f"roles missing from this checkout: {skip}"
    ensure_provisioned(lab.inventory_path, runs)
    print(f"\nroles verified: {roles}\nroles not in this checkout (not verified): {skip}")
    return load_inventory(lab.inventory_path), roles, runs


def _verify(loaded, roles, runs):
    record = RunRecord.create("verify", loaded.path, loaded.matrix.path, root=runs)
    t0 = time.monotonic()
    result = run_verify(loaded, None, record, roles=roles)
    return result, time.monotonic() - t0


def _failed(result, host):
    return {c.check for c in result.hosts[host].checks if c.status is CheckStatus.FAIL}


def _assert_healthy(result, names):
    for name in names:
        h = result.hosts[name]
        bad = [(c.check, c.status.value, c.message) for c in h.checks
               if c.status in (CheckStatus.FAIL, CheckStatus.ERROR)]
        assert h.status is HostStatus.PASS, (name, bad)
        assert h.count(CheckStatus.PASS) > 20, name


def test_healthy_lab_nodes_pass(provisioned, record_property):
    loaded, roles, runs = provisioned
    result, wall = _verify(loaded, roles, runs)
    _assert_healthy(result, [n.name for n in loaded.inventory.nodes])
    record_property("verify_wall_s", round(wall, 1))
    record_property("remote_commands", result.remote_commands)
    print(f"\nhealthy verify of {len(result.hosts)} nodes: {wall:.1f} s, remote commands {result.remote_commands}, "
          f"checks per host {[len(h.checks) for h in result.hosts.values()]}")


@pytest.mark.parametrize("group", GROUPS, ids=["gpu-xid-fm-port-raid", "driver-mismatch-rate"])
def test_injected_faults_are_caught_on_that_node_only(provisioned, lab, group, record_property):
    from gpuctl.lab.standin.faults import apply_fault

    loaded, roles, runs = provisioned
    nodes = [n.name for n in loaded.inventory.nodes]
    faulty, healthy = nodes[FAULTY], nodes[HEALTHY]
    faults = [f for f in group if set(EXPECTED[f][0]) <= set(roles)]
    if not faults:
        pytest.skip(f"none of {', '.join(group)} can be injected: their roles are not in this checkout")
    print(f"\ninjecting on {faulty}: {faults}; not injected (role missing): {sorted(set(group) - set(faults))}")
    injected = []
    try:
        for f in faults:
            apply_fault(faulty, f, state=lab)
            injected.append(f)
        result, wall = _verify(loaded, roles, runs)
        failed = _failed(result, faulty)
        for f in faults:
            missing = set(EXPECTED[f][1]) - failed
            assert not missing, f"fault {f} not caught: {missing} did not fail on {faulty}"
        for c in result.hosts[faulty].failed:  # every failure is explained
            assert c.expected and c.found and c.remediation, c
        _assert_healthy(result, [healthy])
        record_property(f"verify_with_faults_wall_s[{'+'.join(faults)}]", round(wall, 1))
        print(f"verify with {len(faults)} faults: {wall:.1f} s; {len(failed)} checks failed on {faulty}, "
              f"0 on {healthy}")
    finally:
        for f in reversed(injected):
            apply_fault(faulty, f, clear=True, state=lab)
    cleared, _ = _verify(loaded, roles, runs)
    _assert_healthy(cleared, nodes)


def test_slow_nccl_is_judged_by_bench_not_verify(provisioned, lab):
    """slow_nccl (bus bandwidth at 60 % of the SKU's) leaves every verify check passing — verify
    has no bandwidth check — and the bench's own all_reduce script, judged against the SKU,
    fails on the faulty node and passes on the healthy one."""
    from gpuctl.analyze import analyze_text
    from gpuctl.bench import suites
    from gpuctl.catalog import load_sku
    from gpuctl.lab.ssh import ssh_run
    from gpuctl.lab.standin.faults import apply_fault
    from gpuctl.spec import resolve

    loaded, roles, runs = provisioned
    specs = {s.node: s for s in resolve(loaded)}
    nodes = [n.name for n in loaded.inventory.nodes]
    faulty, healthy = nodes[FAULTY], nodes[HEALTHY]
    sku = load_sku(loaded.inventory.cluster.sku)
    status = {}
    apply_fault(faulty, "slow_nccl", state=lab)
    try:
        result, _ = _verify(loaded, roles, runs)
        _assert_healthy(result, nodes)
        for name in (faulty, healthy):
            script = suites.nccl_script("all_reduce_perf", suites.SUITES["quick"], specs[name])
            out = ssh_run(name, f"bash -c {shlex.quote(script)}", state=lab, timeout=300)
            assert out.returncode == 0, out.stdout[-2000:]
            status[name] = analyze_text("nccl", out.stdout, sku, source=f"{name}:all_reduce_perf").status.value
    finally:
        apply_fault(faulty, "slow_nccl", clear=True, state=lab)
    assert status[faulty] == "fail", status
    assert status[healthy] in ("pass", "warn"), status


def test_unreachable_node_is_could_not_run(provisioned):
    """A node whose SSH port answers nothing is 'unreachable', not 'failed'."""
    loaded, roles, _runs = provisioned
    from gpuctl.spec import resolve

    specs = [s.model_copy(update={"ssh_port": 9}) for s in resolve(loaded)[:1]]
    result = run_verify(loaded, specs, None, roles=roles[:2], timeout_s=20)
    assert result.status is HostStatus.UNREACHABLE
