"""Fault finding (gpuctl.bench.localise) driven by simulated clusters: one bad node, one bad
rail, one bad link between two good nodes, everything fine, noisy figures, an unreachable
node, two nodes; and the round bound for N = 2..64."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from gpuctl.bench.localise import (
    LOOPBACK,
    PAIR,
    PERFTEST,
    RAIL,
    Limits,
    Measured,
    Probe,
    Rail,
    localise,
    round_bound,
    schedule,
    slow,
)
from gpuctl.bench.pairing import pairing_rounds

LIMITS = Limits(0.25, "test: a quarter below the stage's best")


@dataclass
class Cluster:
    """A simulated cluster: per (node, rail) the HCA's speed (seen by the node's loopback and
    every pair) and the port's / cable's (seen by pairs only), per pair a path factor."""

    n: int
    rails: int = 8
    noise: float = 0.0
    seed: int = 0
    hca: dict[tuple[str, int], float] = field(default_factory=dict)
    port: dict[tuple[str, int], float] = field(default_factory=dict)
    path: dict[frozenset[str], float] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    calls: list[list[Probe]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    @property
    def nodes(self) -> list[str]:
        return [f"n{i:02d}" for i in range(self.n)]

    def rail_map(self) -> dict[str, list[Rail]]:
        return {n: [Rail(f"mlx5_{i}", f"ibp{i}") for i in range(self.rails)] for n in self.nodes}

    def bad_node(self, node: str, factor: float = 0.4, where: str = "hca") -> Cluster:
        for i in range(self.rails):
            getattr(self, where)[(node, i)] = factor
        return self

    def speed(self, node: str, rail: int, pair: bool) -> float:
        s = self.hca.get((node, rail), 1.0)
        return s * self.port.get((node, rail), 1.0) if pair else s

    def jitter(self, v: float) -> float:
        return v * (1 + self.rng.uniform(-self.noise, self.noise))

    def __call__(self, probes: Sequence[Probe]) -> list[Measured]:
        self.calls.append(list(probes))
        out = []
        for p in probes:
            if any(n in self.down for n in p.nodes):
                out.append(Measured(p, None, "GB/s", error="ssh: connect to host: No route to host"))
                continue
            if p.kind == LOOPBACK:
                v = 90.0 * min(self.speed(p.nodes[0], i, False) for i in range(self.rails))
                out.append(Measured(p, self.jitter(v), "GB/s"))
                continue
            a, b = p.nodes
            f = self.path.get(frozenset(p.nodes), 1.0)
            rails = range(self.rails) if p.rail is None else [p.rail]
            s = min(min(self.speed(a, i, True), self.speed(b, i, True)) for i in rails) * f
            if p.kind == PAIR:
                out.append(Measured(p, self.jitter(350.0 * s), "GB/s"))
            elif p.kind == RAIL:
                out.append(Measured(p, self.jitter(48.0 * s), "GB/s"))
            else:
                assert p.kind == PERFTEST
                out.append(Measured(p, self.jitter(390.0 * s), "Gb/s"))
        return out

    def run(self, limits: Limits = LIMITS):
        return localise(self.nodes, self.rail_map(), self, limits)


def named(loc) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    return [(f.kind, f.nodes, tuple(r.hca for r in f.rails)) for f in loc.named]


def test_slow_rule():
    assert slow(70, 100, 0.25) and not slow(80, 100, 0.25)
    assert slow(90, 100, 0.25, floor=95)  # below the floor, within the fraction
    assert slow(None, 100, 0.25)  # could not be measured: the worst figure
    assert not slow(5, None, 0.25)  # nothing to compare with and no floor


def test_one_bad_node_every_rail():
    loc = Cluster(8).bad_node("n05").run()
    assert named(loc) == [("node", ("n05",), ())]
    (f,) = loc.named
    assert "loopback" in f.message and f.rail_note.startswith("every rail slow")  # against the known-good pair
    assert loc.rounds == 1 + 2 + 1 + 1 + 1 <= loc.bound  # loopback, 2 pair rounds, retest, rails, perftest


def test_one_bad_rail_named_by_its_hca():
    c = Cluster(8)
    c.hca[("n03", 5)] = 0.5
    loc = c.run()
    assert named(loc) == [("node", ("n03",), ("mlx5_5",))]
    (f,) = loc.named
    assert "mlx5_5 (ibp5)" in f.message
    # the evidence chain holds the per-rail and perftest figures of rail 5
    chain = [loc.steps[i] for i in f.evidence]
    assert {s.stage for s in chain} >= {"loopback", "pair", "retest", "rails", "perftest"}
    assert any(s.stage == "rails" and s.probe.rail == 5 and s.slow for s in chain)
    assert not any(s.stage == "rails" and s.probe.rail != 5 and s.slow for s in chain)


def test_bad_cable_shows_in_pairs_not_loopback():
    c = Cluster(6)
    c.port[("n02", 1)] = 0.3  # a cable / switch port: the node's loopback never crosses it
    loc = c.run()
    assert named(loc) == [("node", ("n02",), ("mlx5_1",))]
    assert not any(s.slow for s in loc.steps if s.stage == LOOPBACK)


def test_bad_link_between_two_good_nodes():
    c = Cluster(8)
    c.path[frozenset(("n02", "n03"))] = 0.4
    loc = c.run()
    assert [(k, n) for k, n, _ in named(loc)] == [("link", ("n02", "n03"))]
    (f,) = loc.named
    stages = [loc.steps[i].stage for i in f.evidence]
    assert stages[0] == "pair" and "rerun" in stages
    assert f.rail_note.startswith("every rail slow")  # a path factor slows every rail, the known-good pair is not


def test_everything_fine_names_nothing():
    c = Cluster(16)
    loc = c.run()
    assert named(loc) == [] and [f.kind for f in loc.findings] == ["noise"]
    assert loc.rounds == 1 + len(pairing_rounds(c.nodes))


@pytest.mark.parametrize("seed", range(20))
def test_noisy_figures(seed):
    fine = Cluster(12, noise=0.08, seed=seed).run()
    assert named(fine) == []
    c = Cluster(12, noise=0.08, seed=seed)
    c.hca[("n07", 2)] = 0.5
    assert named(c.run()) == [("node", ("n07",), ("mlx5_2",))]


def test_a_single_noisy_pair_is_not_named():
    c = Cluster(8)
    calls = {"n": 0}

    def measure(probes):
        out = c(probes)
        calls["n"] += 1
        if calls["n"] == 2:  # the first pair round: one pair reads low once
            out = [Measured(m.probe, m.value * 0.5, m.unit) if m.probe.nodes == ("n00", "n01") else m for m in out]
        return out

    loc = localise(c.nodes, c.rail_map(), measure, LIMITS)
    assert named(loc) == []
    assert [f.kind for f in loc.findings] == ["noise"] and loc.findings[0].nodes == ("n00", "n01")


def test_unreachable_node_is_named_and_left_out():
    c = Cluster(6)
    c.down.add("n04")
    c.bad_node("n01", where="port")
    loc = c.run()
    assert ("unreachable", ("n04",)) in [(f.kind, f.nodes) for f in loc.findings]
    assert named(loc) == [("node", ("n01",), ())]
    assert not any("n04" in p.nodes for call in c.calls[1:] for p in call)
    assert loc.rounds <= round_bound(5) == loc.bound


def test_two_nodes_loopback_tells_a_bad_hca():
    c = Cluster(2).bad_node("n01")
    loc = c.run()
    assert named(loc) == [("node", ("n01",), ())]
    assert loc.rounds == 4 == round_bound(2)
    assert loc.limits and "two nodes" in loc.limits[0]


def test_two_nodes_cannot_pin_a_slow_cable():
    c = Cluster(2, rails=1).bad_node("n01", where="port")
    assert [f.kind for f in c.run().findings] == ["noise"]  # one pair, no floor: nothing to compare with
    c = Cluster(2, rails=1).bad_node("n01", where="port")
    loc = c.run(Limits(0.25, "test", pair_floor=300.0, pair_floor_source="test floor"))
    assert named(loc) == []
    (f,) = [f for f in loc.findings if f.kind == "undetermined"]
    assert f.nodes == ("n00", "n01") and "cannot tell which" in f.message
    assert [r.hca for r in f.rails] == ["mlx5_0", "mlx5_0"]  # the only rail, on both ends


def test_three_nodes_lab_shape_names_node_and_interface():
    """The lab's shape: 3 nodes, one rail (rxe0 on eth1), traffic shaping on one node's
    interface (slows its pairs, not its loopback)."""
    c = Cluster(3, rails=1).bad_node("n02", factor=0.1, where="port")
    rails = {n: [Rail("rxe0", "eth1")] for n in c.nodes}
    loc = localise(c.nodes, rails, c, LIMITS)
    (f,) = loc.named
    assert (f.kind, f.nodes, [(r.hca, r.interface) for r in f.rails]) == ("node", ("n02",), [("rxe0", "eth1")])
    assert loc.rounds == 1 + 3 + 1 + 1 + 1 <= loc.bound


def test_floor_fails_a_cluster_uniformly_slow():
    """Every pair alike but under the floor: not one culprit, and said so."""
    limits = Limits(0.25, "test", pair_floor=400.0, pair_floor_source="test floor")
    loc = Cluster(6).run(limits)
    assert named(loc) == [] and [f.kind for f in loc.findings] == ["widespread"]


def test_widespread_fault_names_nothing():
    c = Cluster(6)
    for n in c.nodes[:4]:
        c.bad_node(n, where="port")
    loc = c.run()
    assert named(loc) == [] and [f.kind for f in loc.findings] == ["widespread"]


def test_measure_must_answer_every_probe():
    with pytest.raises(ValueError, match="every probe"):
        localise(["a", "b"], {}, lambda probes: [], LIMITS)


def test_schedule_is_disjoint():
    rounds = schedule([("a", "b"), ("b", "c"), ("c", "a"), ("d", "e")])
    assert rounds == [[("a", "b"), ("d", "e")], [("b", "c")], [("c", "a")]]


def _scenarios(n: int, rng: random.Random):
    nodes = [f"n{i:02d}" for i in range(n)]
    yield "fine", Cluster(n, rails=4)
    yield "bad node", Cluster(n, rails=4).bad_node(rng.choice(nodes))
    c = Cluster(n, rails=4)
    c.hca[(rng.choice(nodes), rng.randrange(4))] = 0.5
    yield "bad rail", c
    if n >= 3:
        i = rng.randrange(n)
        c = Cluster(n, rails=4)
        c.path[frozenset((nodes[i], nodes[(i + 1) % n]))] = 0.4
        yield "bad link", c
        c = Cluster(n, rails=4)
        for node in rng.sample(nodes, max(1, n // 4)):
            c.bad_node(node, where=rng.choice(["hca", "port"]))
        for _ in range(max(1, n // 5)):  # links too
            i = rng.randrange(n)
            c.path[frozenset((nodes[i], nodes[(i + 1) % n]))] = 0.4
        yield "several faults", c
    c = Cluster(n, rails=4, noise=0.3, seed=n)  # noise as large as the slow fraction
    yield "wild noise", c


@pytest.mark.parametrize("n", range(2, 65))
def test_round_bound_holds(n):
    rng = random.Random(n)
    for name, c in _scenarios(n, rng):
        loc = c.run()
        assert loc.rounds == len(c.calls), name
        assert loc.rounds <= round_bound(n) == loc.bound, (name, loc.rounds)
    assert round_bound(n) == {2: 4}.get(n, 1 + len(pairing_rounds(list(range(n)))) + 1 + 3 + 4 + 4)
    assert round_bound(n) <= 16  # a constant, whatever N


def test_findings_as_verdicts():
    from gpuctl.bench.localise import finding_verdicts
    from gpuctl.verdicts import Status

    c = Cluster(6, rails=2)
    c.down.add("n05")
    c.hca[("n02", 1)] = 0.4
    loc = c.run()
    verdicts = {v.subject.label(): v for v in finding_verdicts(loc)}
    assert verdicts["n02 mlx5_1"].status == Status.FAIL and "rounds" in verdicts["n02 mlx5_1"].message
    assert verdicts["n05"].status == Status.ERROR  # could not be measured: not a pass, not a fail
    fine = finding_verdicts(Cluster(4).run())
    assert [v.status for v in fine] == [Status.NO_THRESHOLD]  # nothing named is no pass either
    c = Cluster(6)
    for n in c.nodes[:4]:
        c.bad_node(n, where="port")
    assert [v.status for v in finding_verdicts(c.run())] == [Status.FAIL]  # widespread
