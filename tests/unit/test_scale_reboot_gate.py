"""The rolling-reboot bound at fleet scale, on the RebootGate itself: 64 and 500 hosts as
gevent greenlets with random reboot times and random hosts that never come back; an
observer samples the fleet continuously. Never more than max_unavailable down, the
slots are really used, lost hosts keep their slot and halt the rollout.

(tests/deploy/test_runner_reboot.py proves the same through pyinfra on 6 @fake hosts.)"""

from __future__ import annotations

import random

import gevent
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.runner.reboot import RebootGate, RebootHalted, default_max_unavailable


class Fleet:
    def __init__(self) -> None:
        self.down: set[str] = set()
        self.peak = 0
        self.samples = 0


def _rollout(hosts: int, max_unavailable: int, lost: set[int], seed: int) -> tuple[RebootGate, Fleet, dict]:
    rng = random.Random(seed)
    gate = RebootGate(max_unavailable)
    fleet = Fleet()
    outcome: dict[str, str] = {}
    durations = [rng.uniform(0.0005, 0.004) for _ in range(hosts)]

    def reboot(i: int) -> None:
        name = f"gpu-{i:03d}"
        try:
            with gate.slot(name, poll_s=0.001):
                fleet.down.add(name)
                fleet.peak = max(fleet.peak, len(fleet.down))
                gevent.sleep(durations[i])
                if i in lost:
                    raise RuntimeError("did not come back")
                fleet.down.discard(name)
            outcome[name] = "ok"
        except RebootHalted:
            outcome[name] = "halted"
        except RuntimeError:
            outcome[name] = "lost"

    def observe() -> None:
        while True:
            fleet.samples += 1
            assert len(gate.down) <= max_unavailable
            gevent.sleep(0)

    watcher = gevent.spawn(observe)
    gevent.joinall([gevent.spawn(reboot, i) for i in range(hosts)], raise_error=True)
    watcher.kill()
    return gate, fleet, outcome


@pytest.mark.parametrize("hosts", [64, 500])
def test_default_fraction_at_scale_is_used_and_never_exceeded(hosts: int) -> None:
    n = default_max_unavailable(hosts)
    assert n == hosts // 10
    gate, fleet, outcome = _rollout(hosts, n, lost=set(), seed=hosts)
    assert fleet.peak == n and gate.peak_down == n  # bounded, and the bound was really used
    assert set(outcome.values()) == {"ok"} and len(outcome) == hosts
    assert all(gate.rebooted(name) for name in outcome)
    assert fleet.samples > hosts


@settings(max_examples=25, deadline=None)
@given(hosts=st.integers(2, 80), max_unavailable=st.integers(1, 8), data=st.data())
def test_bound_holds_whatever_fails(hosts: int, max_unavailable: int, data: st.DataObject) -> None:
    lost = data.draw(st.sets(st.integers(0, hosts - 1), max_size=hosts // 2))
    gate, fleet, outcome = _rollout(hosts, max_unavailable, lost, seed=hosts * 31 + max_unavailable)
    assert fleet.peak <= max_unavailable and gate.peak_down <= max_unavailable
    lost_hosts = {h for h, o in outcome.items() if o == "lost"}
    assert len(lost_hosts) <= max_unavailable  # a bad node never takes down more than allowed
    assert gate.down == lost_hosts  # lost hosts keep their slot (they are unavailable)
    if len(lost_hosts) == max_unavailable:
        assert gate.halted
    halted = [h for h, o in outcome.items() if o == "halted"]
    if halted:
        assert gate.halted and not any(gate.rebooted(h) for h in halted)
    if not lost:
        assert set(outcome.values()) == {"ok"}
