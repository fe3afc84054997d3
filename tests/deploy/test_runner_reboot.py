"""Deploy tier: rolling reboots never take more than --max-unavailable nodes down at once.

Six @fake hosts whose reboot takes time: from the reboot command until the boot id
changes, a host is "down" (its commands fail like an unreachable host's would). The fake
hosts themselves count how many are down at once — independent of the gate's own
bookkeeping — and the test asserts the bound.
"""

from __future__ import annotations

import time

import gevent
import pytest
from pyinfra.api import deploy

from gpuctl.deploy_context import RunOptions
from gpuctl.runner.reboot import BOOT_ID_COMMAND, RebootGate, default_max_unavailable, rolling_reboot

pytestmark = pytest.mark.deploy

REBOOT_S = 0.3
DRIVER = "580.95.05"


@deploy("Reboot test")
def reboot_all() -> None:
    rolling_reboot(name=f"Reboot to load NVIDIA driver {DRIVER}", reason="test",
                   confirm_command="cat /sys/module/nvidia/version", confirm_output=DRIVER,
                   delay_s=0.01, interval_s=0.02, timeout_s=10, _if=lambda: True)


class FakeFleet:
    """Per-host boot state shared by the fake responses of every host."""

    def __init__(self, nodes: list[str], bad_module: set[str] = frozenset()) -> None:
        self.boot = {n: 1 for n in nodes}
        self.down_since: dict[str, float] = {}
        self.peak = 0
        self.reboots: dict[str, int] = {n: 0 for n in nodes}
        self.bad_module = set(bad_module)

    def responses(self, node: str) -> dict:
        def reboot(_cmd: str) -> str:
            self.down_since[node] = time.monotonic()
            self.reboots[node] += 1
            self.peak = max(self.peak, len(self.down_since))
            return ""

        def boot_id(_cmd: str):
            since = self.down_since.get(node)
            if since is not None:
                if time.monotonic() - since < REBOOT_S:
                    gevent.sleep(0.01)
                    return {"success": False, "stderr": "ssh: connect to host: Connection refused"}
                del self.down_since[node]
                self.boot[node] += 1
            return f"boot-{node}-{self.boot[node]}"

        def module_version(_cmd: str) -> str:
            return "550.0.0" if node in self.bad_module else DRIVER

        return {"&& reboot )": reboot, BOOT_ID_COMMAND: boot_id, "/sys/module/nvidia/version": module_version}


@pytest.mark.parametrize("max_unavailable", [1, 2])
def test_never_more_than_max_unavailable_down(fake, max_unavailable: int) -> None:
    specs = fake.specs("lab.yaml")
    nodes = [f"node-{i}" for i in range(6)]
    specs = [specs[0].model_copy(update={"node": n}) for n in nodes]
    fleet = FakeFleet(nodes)
    t0 = time.monotonic()
    run = fake.run(reboot_all, specs, options=RunOptions(max_unavailable=max_unavailable),
                   host_responses={n: fleet.responses(n) for n in nodes})
    elapsed = time.monotonic() - t0
    assert all(run[n].status == "ok" for n in nodes), {n: run[n].error for n in nodes}
    assert all(run[n].rebooted for n in nodes)
    assert fleet.reboots == {n: 1 for n in nodes}
    assert fleet.peak <= max_unavailable          # the bound, seen from the hosts
    assert fleet.peak == max_unavailable          # and it was really used (not serialised)
    assert run.gate.peak_down == fleet.peak
    # 6 reboots of REBOOT_S in batches of N: roughly 6/N × REBOOT_S
    assert elapsed >= (6 / max_unavailable) * REBOOT_S * 0.9
    js = run.summary.to_json()
    assert all(js["hosts"][n]["rebooted"] is True for n in nodes)


def test_a_node_that_comes_back_wrong_halts_the_rollout(fake) -> None:
    # Every node would come back with the wrong module (a bad driver build): whichever node
    # gets the one slot first reboots, comes back wrong, keeps its slot — and no other node
    # is taken down. (Deterministic whatever order the hosts reach the gate in.)
    specs = fake.specs("lab.yaml")
    nodes = [f"node-{i}" for i in range(6)]
    specs = [specs[0].model_copy(update={"node": n}) for n in nodes]
    fleet = FakeFleet(nodes, bad_module=set(nodes))
    run = fake.run(reboot_all, specs, options=RunOptions(max_unavailable=1),
                   host_responses={n: fleet.responses(n) for n in nodes})
    rebooted = [n for n in nodes if fleet.reboots[n]]
    assert fleet.peak <= 1
    assert len(rebooted) == 1, rebooted
    first = rebooted[0]
    assert run[first].status == "failed" and "expected '580.95.05'" in run[first].error
    assert not run[first].rebooted  # down, not a successful reboot
    for n in nodes:
        if n != first:
            assert run[n].status == "failed" and "rolling reboot halted" in run[n].error, (n, run[n].error)
            assert first in run[n].error
    assert run.summary.exit_code() == 1


def test_healthy_nodes_before_the_bad_one_stay_ok(fake) -> None:
    # One bad node among good ones: good nodes that rebooted before it are ok; after its
    # failure nobody else reboots (by the gate's own timestamps).
    specs = fake.specs("lab.yaml")
    nodes = [f"node-{i}" for i in range(6)]
    specs = [specs[0].model_copy(update={"node": n}) for n in nodes]
    fleet = FakeFleet(nodes, bad_module={"node-0"})
    run = fake.run(reboot_all, specs, options=RunOptions(max_unavailable=1),
                   host_responses={n: fleet.responses(n) for n in nodes})
    assert fleet.peak <= 1
    assert run["node-0"].status == "failed" and "expected '580.95.05'" in run["node-0"].error
    bad = run.gate.records["@fake/node-0"]
    failed_at = bad.started + (bad.seconds or 0.0)
    for n in nodes[1:]:
        rec = run.gate.records.get(f"@fake/{n}")
        if rec is None:
            assert "rolling reboot halted" in run[n].error, (n, run[n].error)
        else:
            assert rec.started < failed_at, f"{n} rebooted after node-0 had failed"
            assert run[n].status == "ok" and run[n].rebooted
    assert run.summary.exit_code() == 1


def test_no_reboot_when_not_needed(fake) -> None:
    @deploy("Maybe reboot")
    def maybe() -> None:
        rolling_reboot(name="Reboot if needed", reason="test", delay_s=0.01, interval_s=0.01, _if=lambda: False)

    specs = fake.specs("lab.yaml")
    run = fake.run(maybe, specs)
    for n in ("gpu-01", "gpu-02"):
        assert run[n].status == "ok" and not run[n].rebooted
        assert run[n].execute_commands == []
        assert run[n].op("Reboot if needed").status == "unchanged"


def test_plan_shows_reboot_as_decided_at_run_time(fake) -> None:
    specs = fake.specs("lab.yaml")
    run = fake.run(reboot_all, specs, dry=True)
    op = run["gpu-01"].op("Reboot to load")
    assert op.status == "may change"
    assert run["gpu-01"].execute_commands == [] and run["gpu-01"].commands == []


def test_default_max_unavailable() -> None:
    assert [default_max_unavailable(n) for n in (1, 4, 9, 10, 19, 20, 64)] == [1, 1, 1, 1, 1, 2, 6]
    with pytest.raises(ValueError):
        RebootGate(0)
