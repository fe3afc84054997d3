"""Fault finding: naming the bad node, HCA/rail or link of a slow cluster.

`localise(nodes, rails, measure, limits)` runs measurement *rounds* through an injected
`measure` (one call = one round; the probes of a round share no node's rail, so they run
at the same time) and returns a `Localisation`: the findings, every figure with the
reference it was judged against (the evidence chain), and the rounds used against the
bound `round_bound(N)`. `gpuctl.bench.run` gives it a `measure` that runs real commands
over the runner (`gpuctl.bench.suites.localise_*`); the unit tests give it simulated
clusters.

Stages (each figure judged by `slow`, the one rule):

1. loopback (1 round): every node alone, all its GPUs, shared memory and P2P off
   (NCCL_SHM_DISABLE=1, NCCL_P2P_DISABLE=1) so every byte crosses the node's own HCAs;
   a slow one is an HCA or PCIe fault on that node. A node that cannot be measured is
   named unreachable and left out of the later stages.
2. pairs (`gpuctl.bench.pairing.pairing_rounds`: 1 round for N = 2, 2 for even N, 3 for
   odd N): a 2-node all_reduce on every ring pair, disjoint pairs at once.
3. retest (1 round): every suspect (a node of a slow pair, or with a slow loopback) against
   its own known-good node (in no slow pair), all at once. More suspects than half the
   nodes is not one bad node (a switch, the fabric's settings): named as such, no retest.
   Slow with a good node: the node is bad.
4. rerun (at most 3 rounds): a slow pair whose two nodes were both fine with good nodes is
   run again; slow again, the link (path) between those two nodes is named, else the first
   figure was noise and nothing is named.
5. rails (at most 4 rounds): per-rail 2-node runs (one rank per node on local GPU i with
   NCCL_IB_HCA = HCA i) for each named node with its good partner and each named link,
   beside the same runs on two known-good nodes left free in the round (the reference).
6. perftest (at most 4 rounds): `ib_write_bw -d HCA` per HCA on the same pairs.

A figure is slow when below the floor that applies to it (the SKU's, where it holds for
the run's workload), or more than `slow_fraction` (catalog/health.yaml `fault_finding`)
below the best figure of its stage (the cluster's own best, not its median: with three
nodes two of the three ring pairs hold the bad node, so the median is a slow pair).

Bound (`round_bound`): 1 + P(N) rounds for stages 1-2 with P(2) = 1, P(N) = 2 for even
N >= 4, 3 for odd N >= 3; stage 3 is 1 round because it runs only while the suspects are
no more than the good nodes; stage 4 schedules slow ring pairs (each node in at most two)
greedily, at most 3 rounds; stages 5-6 each run the bad nodes' pairs (disjoint: 1 round)
and then the links' (ring pairs: at most 3). So N = 2: 4 rounds (no retest: there is no
third node); even N >= 4: 15; odd N >= 3: 16 — a constant, whatever N
(tests/unit/test_localise.py checks N = 2..64). One bad node takes 1 + P(N) + 3 rounds.

Two nodes: a fault on one node's HCAs or PCIe shows in its loopback and is named; a slow
cable, switch port or shaped interface shows only in the pair, and with no third node it
cannot be told which end (or the path between them) is at fault: the finding says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuctl.bench.pairing import pairing_rounds
from gpuctl.catalog import Measured as CatalogMeasured
from gpuctl.catalog import load_health, outside_workload
from gpuctl.errors import InputError
from gpuctl.remediation import Remediation
from gpuctl.spec import NodeSpec
from gpuctl.verdicts import Status, Subject, Verdict, could_not_run

LOOPBACK, PAIR, RAIL, PERFTEST = "loopback", "pair", "rail", "perftest"
ProbeKind = Literal["loopback", "pair", "rail", "perftest"]
ALL_RAILS = -1


@dataclass(frozen=True)
class Rail:
    """One rail of a node: its HCA and the network interface it sends on."""

    hca: str
    interface: str


@dataclass(frozen=True)
class Probe:
    """One measurement: a loopback of one node, or a pair run (first node: rank 0 / server),
    on every rail or on rail `rail` (an index into the nodes' rails)."""

    kind: ProbeKind
    nodes: tuple[str, ...]
    rail: int | None = None

    def uses(self) -> set[tuple[str, int]]:
        """The (node, rail) it occupies; a run on every rail occupies the whole node."""
        r = ALL_RAILS if self.rail is None else self.rail
        return {(n, r) for n in self.nodes}

    def label(self) -> str:
        where = "↔".join(self.nodes)
        return f"{self.kind} {where}" + (f" rail {self.rail}" if self.rail is not None else "")


@dataclass(frozen=True)
class Measured:
    """What `measure` returns for a probe: the figure (None: it could not be measured, then
    `error` says why), its unit, and where its raw output is kept."""

    probe: Probe
    value: float | None
    unit: str
    error: str | None = None
    raw: str | None = None


Measure = Callable[[Sequence[Probe]], Sequence[Measured]]


@dataclass(frozen=True)
class Limits:
    """What figures are judged against: `slow_fraction` (the share below the stage's best
    that is slow) and the floors that apply (None: none applies to this run's workload)."""

    slow_fraction: float
    slow_fraction_source: str
    pair_floor: float | None = None  # GB/s, a 2-node all_reduce (the multi-node floor)
    pair_floor_source: str | None = None
    perftest_floor: float | None = None  # Gb/s, ib_write_bw per HCA
    perftest_floor_source: str | None = None


@dataclass(frozen=True)
class Step:
    """One figure of the evidence chain, with what it was judged against."""

    round: int
    stage: str
    probe: Probe
    value: float | None
    unit: str
    reference: float | None  # the stage's best figure
    floor: float | None
    slow: bool | None  # None: could not be measured
    error: str | None = None
    raw: str | None = None

    def text(self) -> str:
        if self.value is None:
            return f"round {self.round} {self.stage}: {self.probe.label()}: not measured: {self.error}"
        against = []
        if self.floor is not None:
            against.append(f"floor {self.floor:g}")
        if self.reference is not None:
            against.append(f"best {self.reference:g}")
        verdict = "slow" if self.slow else "ok"
        return (f"round {self.round} {self.stage}: {self.probe.label()}: {self.value:g} {self.unit} "
                f"({', '.join(against)}): {verdict}")

    def as_dict(self) -> dict[str, Any]:
        return {"round": self.round, "stage": self.stage, "kind": self.probe.kind, "nodes": list(self.probe.nodes),
                "rail": self.probe.rail, "value": self.value, "unit": self.unit, "reference": self.reference,
                "floor": self.floor, "slow": self.slow, "error": self.error, "raw": self.raw, "text": self.text()}


FindingKind = Literal["node", "link", "unreachable", "undetermined", "widespread", "noise"]


@dataclass(frozen=True)
class Finding:
    """A conclusion: a bad node (with its HCA/rail where one was told apart), a bad link
    between two nodes, a node that could not be measured, a slow pair that could not be
    pinned on either end (two nodes), a fault too widespread for one culprit, or a slow
    figure that did not come back (noise). `evidence` indexes `Localisation.steps`."""

    kind: FindingKind
    nodes: tuple[str, ...]
    message: str
    evidence: tuple[int, ...] = ()
    rails: tuple[Rail, ...] = ()  # the HCA/interface named (empty: every rail alike, or not measured)
    rail_note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "nodes": list(self.nodes), "message": self.message,
                "evidence": list(self.evidence), "hcas": [r.hca for r in self.rails],
                "interfaces": [r.interface for r in self.rails], "rail_note": self.rail_note}


@dataclass(frozen=True)
class Localisation:
    nodes: tuple[str, ...]
    trigger: str
    rounds: int
    bound: int
    findings: tuple[Finding, ...]
    steps: tuple[Step, ...]
    limits: tuple[str, ...] = ()  # what this run could not tell apart
    slow_fraction: float = 0.0
    slow_fraction_source: str = ""

    @property
    def named(self) -> tuple[Finding, ...]:
        """The culprits: bad nodes and bad links."""
        return tuple(f for f in self.findings if f.kind in ("node", "link"))

    def as_dict(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "trigger": self.trigger, "rounds": self.rounds, "bound": self.bound,
                "findings": [f.as_dict() for f in self.findings], "steps": [s.as_dict() for s in self.steps],
                "limits": list(self.limits), "slow_fraction": self.slow_fraction,
                "slow_fraction_source": self.slow_fraction_source}


# ---------------------------------------------------------------------------- the rules


def slow(value: float | None, best: float | None, fraction: float, floor: float | None = None) -> bool:
    """The one judgement of a fault-finding figure: below the floor that applies, or more
    than `fraction` below the stage's best figure. A figure that could not be measured is
    slow (a pair that cannot run at all is the worst pair)."""
    if value is None:
        return True
    if floor is not None and value < floor:
        return True
    return best is not None and best > 0 and value < (1.0 - fraction) * best


def pair_rounds_bound(n: int) -> int:
    return len(pairing_rounds([str(i) for i in range(n)]))


#: rounds of the rerun stage at most: slow ring pairs (each node in at most two), greedily
RERUN_ROUNDS = 3
#: rounds of the rails and of the perftest stage at most: the bad nodes' pairs (disjoint: one
#: round) and then the links' (ring pairs: at most 3 rounds)
DIAGNOSE_ROUNDS = 1 + RERUN_ROUNDS


def round_bound(n: int) -> int:
    """The most rounds `localise` uses on `n` measurable nodes (module docstring)."""
    if n < 2:
        return 1
    if n == 2:
        return 1 + 1 + 1 + 1  # loopback, the pair, rails, perftest
    return 1 + pair_rounds_bound(n) + 1 + RERUN_ROUNDS + 2 * DIAGNOSE_ROUNDS


def schedule(pairs: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Pairs into rounds in which no node appears twice, greedily in the order given."""
    rounds: list[list[tuple[str, str]]] = []
    busy: list[set[str]] = []
    for a, b in pairs:
        for i, used in enumerate(busy):
            if a not in used and b not in used:
                rounds[i].append((a, b))
                used.update((a, b))
                break
        else:
            rounds.append([(a, b)])
            busy.append({a, b})
    return rounds


# ---------------------------------------------------------------------------- the search


@dataclass
class _Run:
    measure: Measure
    limits: Limits
    steps: list[Step] = field(default_factory=list)
    rounds: int = 0

    def round(self, stage: str, probes: Sequence[Probe], floor: float | None = None) -> list[int]:
        """Run one round; judge each figure against `floor` and the best of this round's
        figures; the new steps' indexes, in probe order."""
        if not probes:
            return []
        whole: set[str] = set()  # nodes a probe uses on every rail
        part: set[tuple[str, int]] = set()  # (node, rail) a per-rail probe uses
        for p in probes:
            clash = any(n in whole for n in p.nodes) or (
                any(n == m for m, _ in part for n in p.nodes) if p.rail is None
                else any((n, p.rail) in part for n in p.nodes))
            if clash:
                raise ValueError(f"round {self.rounds + 1}: {p.label()} shares a node with another probe")
            if p.rail is None:
                whole.update(p.nodes)
            else:
                part.update((n, p.rail) for n in p.nodes)
        self.rounds += 1
        got = list(self.measure(probes))
        if len(got) != len(probes) or any(g.probe != p for g, p in zip(got, probes, strict=True)):
            raise ValueError("measure must answer every probe of a round, in order")
        return self.judge(stage, got, floor)

    def rejudge(self, idx: Sequence[int], best: float | None) -> None:
        """Judge the steps `idx` again against `best` (the best of a stage spread over rounds)."""
        for i in idx:
            s = self.steps[i]
            self.steps[i] = Step(s.round, s.stage, s.probe, s.value, s.unit, best, s.floor,
                                 None if s.value is None else slow(s.value, best, self.limits.slow_fraction, s.floor),
                                 s.error, s.raw)

    def judge(self, stage: str, got: Sequence[Measured], floor: float | None) -> list[int]:
        values = [g.value for g in got if g.value is not None]
        best = max(values) if values else None
        out = []
        for g in got:
            is_slow = None if g.value is None else slow(g.value, best, self.limits.slow_fraction, floor)
            self.steps.append(Step(self.rounds, stage, g.probe, g.value, g.unit, best, floor, is_slow, g.error,
                                   g.raw))
            out.append(len(self.steps) - 1)
        return out


def localise(nodes: Sequence[str], rails: Mapping[str, Sequence[Rail]], measure: Measure, limits: Limits,
             trigger: str = "") -> Localisation:
    """Find the bad node, rail or link among `nodes` (module docstring)."""
    if len(set(nodes)) != len(nodes):
        raise ValueError("node names must be unique")
    run = _Run(measure, limits)
    findings: list[Finding] = []
    notes: list[str] = []

    # 1. loopback
    lb = run.round(LOOPBACK, [Probe(LOOPBACK, (n,)) for n in nodes])
    live = [run.steps[i].probe.nodes[0] for i in lb if run.steps[i].value is not None]
    for i in lb:
        s = run.steps[i]
        if s.value is None:
            findings.append(Finding("unreachable", s.probe.nodes, f"{s.probe.nodes[0]}: could not be measured: "
                                    f"{s.error}; left out of the search", (i,)))
    lb_slow = {run.steps[i].probe.nodes[0]: i for i in lb if run.steps[i].slow}

    def rails_of(a: str, b: str) -> int:
        return min(len(rails.get(a, ())), len(rails.get(b, ())))

    if len(live) < 2:
        for n, i in lb_slow.items():
            findings.append(Finding("node", (n,), f"{n}: the loopback all_reduce through its own HCAs is slow",
                                    (i,)))
        notes.append("fewer than two measurable nodes: no pair to compare")
        return _done(nodes, run, findings, notes, trigger, limits)

    # 2. pairs (judged together: a later round may hold the best pair)
    pair_step: dict[tuple[str, str], int] = {}
    for rnd in pairing_rounds(live):
        for p, i in zip(rnd, run.round(PAIR, [Probe(PAIR, p) for p in rnd], limits.pair_floor), strict=True):
            pair_step[p] = i
    pair_values = [v for v in (run.steps[i].value for i in pair_step.values()) if v is not None]
    run.rejudge(list(pair_step.values()), max(pair_values) if pair_values else None)
    slow_pairs = [p for p, i in pair_step.items() if run.steps[i].slow is not False]
    if len(live) == 2:
        notes.append("two nodes: a fault on one node's HCAs or PCIe shows in its loopback and is named; the one "
                     "pair is slow only below its floor (there is no other pair to compare with), and a slow cable, "
                     "switch port or interface shows only in that pair and cannot be pinned on one end")
    if not slow_pairs and not lb_slow:
        findings.append(Finding("noise", (), "no loopback and no pair is slow: nothing to name"
                                + (f" (the trigger was: {trigger})" if trigger else ""),
                                tuple(lb) + tuple(pair_step.values())))
        return _done(nodes, run, findings, notes, trigger, limits)

    diagnose: list[tuple[Finding, tuple[str, str]]] = []  # (finding, the pair its rails are measured on)
    if len(live) == 2:
        a, b = live
        pi = pair_step[(a, b)]
        if len(lb_slow) == 1:
            (n, i), = lb_slow.items()
            other = b if n == a else a
            diagnose.append((Finding("node", (n,), f"{n}: its loopback all_reduce (every byte through its own "
                                     f"HCAs) is slow, {other}'s is not", (i, pi)), (n, other)))
        else:
            diagnose.append((Finding("undetermined", (a, b),
                                     f"{a}↔{b}: " + ("both loopbacks are slow" if lb_slow else
                                                     "the pair is slow, both loopbacks are alike")
                                     + f": {a}, {b} or the path between them; two nodes cannot tell which "
                                     "(add a third node)", (*lb, pi)), (a, b)))
        findings += _diagnose(run, diagnose, [], rails, rails_of, limits)
        return _done(nodes, run, findings, notes, trigger, limits)

    # a pair that is fine clears both its nodes of a node fault; a node none of whose pairs
    # is fine (or whose loopback is slow) is a suspect
    in_good_pair = {n for p, i in pair_step.items() if run.steps[i].slow is False for n in p}
    good = [n for n in live if n in in_good_pair and n not in lb_slow]
    suspects = [n for n in live if n not in good]
    if not good or len(suspects) > len(good):
        findings.append(Finding("widespread", tuple(suspects),
                                f"{len(slow_pairs)} of {len(pair_step)} pairs are slow and {len(suspects)} of "
                                f"{len(live)} nodes have no fine pair: not one bad node or link (a switch, the "
                                "fabric's settings, congestion); nothing is named",
                                tuple(pair_step[p] for p in slow_pairs)))
        return _done(nodes, run, findings, notes, trigger, limits)

    # 3. retest every suspect against its own known-good node (all at once: good >= suspects);
    # partners in no slow pair first, so a link's rails can be measured beside a node's
    good.sort(key=lambda n: any(n in p for p in slow_pairs))
    partner = dict(zip(suspects, good, strict=False))
    retest: dict[str, int] = {}
    if suspects:
        rt = run.round("retest", [Probe(PAIR, (s, partner[s])) for s in suspects], limits.pair_floor)
        run.rejudge(rt, max(pair_values) if pair_values else None)
        retest = dict(zip(suspects, rt, strict=True))
    bad = [s for s in suspects if run.steps[retest[s]].slow is not False or s in lb_slow]
    for s in bad:
        mine = [p for p in slow_pairs if s in p]
        ev = (*(pair_step[p] for p in mine), retest[s])
        why = [f"slow in {len(mine)} of its {sum(1 for p in pair_step if s in p)} ring pairs"]
        if s in lb_slow:
            ev = (lb_slow[s], *ev)
            why.insert(0, "its loopback all_reduce is slow")
        why.append(f"slow again with the known-good {partner[s]}" if run.steps[retest[s]].slow is not False
                   else f"not slow with the known-good {partner[s]}")
        diagnose.append((Finding("node", (s,), f"{s}: " + "; ".join(why), ev), (s, partner[s])))

    # 4. slow pairs with no bad end: run them again
    cleared = [p for p in slow_pairs if p[0] not in bad and p[1] not in bad]
    links: list[tuple[Finding, tuple[str, str]]] = []
    for rnd in schedule(cleared):
        idx = run.round("rerun", [Probe(PAIR, p) for p in rnd], limits.pair_floor)
        run.rejudge(idx, max(pair_values) if pair_values else None)
        for p, i in zip(rnd, idx, strict=True):
            ev = (pair_step[p], *(retest[n] for n in p if n in retest), i)
            ok_ends = " and ".join(f"{n} is fine with " + (f"the known-good {partner[n]}" if n in retest
                                                           else "another node") for n in p)
            if run.steps[i].slow is not False:
                links.append((Finding("link", p, f"{p[0]}↔{p[1]}: slow twice while {ok_ends}: the path between "
                                      "them (cable, switch port or route)", ev), p))
            else:
                findings.append(Finding("noise", p, f"{p[0]}↔{p[1]} was slow once and not again, and {ok_ends}: "
                                        "not reproduced, nothing named", ev))
    findings += _diagnose(run, diagnose, links, rails, rails_of, limits, good)
    return _done(nodes, run, findings, notes, trigger, limits)


def _diagnose(run: _Run, nodes: Sequence[tuple[Finding, tuple[str, str]]],
              links: Sequence[tuple[Finding, tuple[str, str]]], rails: Mapping[str, Sequence[Rail]],
              rails_of: Callable[[str, str], int], limits: Limits, good: Sequence[str] = ()) -> list[Finding]:
    """Stages 5 and 6: per-rail all_reduce, then per-HCA ib_write_bw, on each finding's pair
    (the bad nodes' pairs, disjoint, first; then the links'), beside the same runs on two
    known-good nodes left free in the round (when there are two), which give the reference;
    each finding gains the HCA(s) told apart and the figures as evidence."""
    targets = [*nodes, *links]
    evidence: dict[tuple[str, str], list[int]] = {p: [] for _, p in targets}
    named: dict[tuple[str, str], set[int]] = {p: set() for _, p in targets}
    every_slow: set[tuple[str, str]] = set()  # every rail slow (against the known-good pair or a floor)
    plan = schedule([p for _, p in nodes]) + schedule([p for _, p in links])
    for stage, kind, floor in (("rails", RAIL, None), ("perftest", PERFTEST, limits.perftest_floor)):
        for rnd in plan:
            busy = {n for p in rnd for n in p}
            free = [n for n in good if n not in busy]
            ref = (free[0], free[1]) if len(free) >= 2 else None  # two known-good nodes, measured alike
            pairs = [*rnd, ref] if ref else list(rnd)
            probes = [Probe(kind, p, i) for p in pairs for i in range(rails_of(*p))]
            if not probes:
                continue
            idx = run.round(stage, probes, floor)
            ref_vals = [v for v in (run.steps[i].value for i in idx if ref and run.steps[i].probe.nodes == ref)
                        if v is not None]
            for p in rnd:  # a pair's rails against its best rail and the known-good pair's
                mine = [i for i in idx if run.steps[i].probe.nodes == p]
                vals = [v for v in (run.steps[i].value for i in mine) if v is not None] + ref_vals
                run.rejudge(mine, max(vals) if vals else None)
                evidence[p] += mine + [i for i in idx if ref and run.steps[i].probe.nodes == ref]
                flagged = {run.steps[i].probe.rail for i in mine if run.steps[i].slow is not False}
                if len(flagged) < len(mine):  # some rails slower than the pair's others
                    named[p] |= {r for r in flagged if r is not None}
                elif mine:
                    every_slow.add(p)
    out = []
    for finding, p in targets:
        n_rails = rails_of(*p)
        ends = finding.nodes if finding.kind == "link" else (p[0],) if finding.kind == "node" else p
        if n_rails == 0:
            chosen: tuple[Rail, ...] = ()
            note = "no rail to measure (no fabric port in the inventory)"
        elif named[p]:
            chosen = tuple(rails[n][i] for i in sorted(named[p]) for n in ends)
            note = "slower than the pair's other rails"
        elif n_rails == 1:
            chosen = tuple(rails[n][0] for n in ends)
            note = "the only rail"
        else:
            chosen = ()
            note = ("every rail slow" if p in every_slow else "every rail measured alike") + \
                ": the fault is common to the rails (PCIe, CPU, firmware, a shared link)"
        said = ", ".join(f"{r.hca} ({r.interface})" for r in chosen)
        msg = finding.message + (f"; HCA {said}: {note}" if chosen else f"; {note}")
        out.append(Finding(finding.kind, finding.nodes, msg, (*finding.evidence, *evidence[p]), chosen, note))
    return out


def _done(nodes: Sequence[str], run: _Run, findings: list[Finding], notes: list[str], trigger: str,
          limits: Limits) -> Localisation:
    measurable = len({s.probe.nodes[0] for s in run.steps if s.stage == LOOPBACK and s.value is not None})
    return Localisation(tuple(nodes), trigger, run.rounds, round_bound(measurable), tuple(findings),
                        tuple(run.steps), tuple(notes), limits.slow_fraction, limits.slow_fraction_source)


# ---------------------------------------------------------------------------- in a bench run


def limits_for(spec: NodeSpec, message_bytes: int) -> Limits:
    """The fault-finding limits of a node: `slow_fraction` (catalog/health.yaml) and the
    node's multi-node and ib_write_bw floors where they hold for this run's workload (full
    nodes for the 2-node all_reduce; `message_bytes` perftest messages)."""
    health = load_health().fault_finding
    if health is None:
        raise InputError("catalog/health.yaml: fault_finding.slow_fraction is missing")

    def floor(check: str, measured: CatalogMeasured) -> tuple[float | None, str | None]:
        t = spec.thresholds.get(check)
        if t is None or t.not_applicable or t.min is None or outside_workload(t.applies_to, measured):
            return None, None
        return t.min, t.source

    pair, pair_src = floor("multi_node_busbw_gb_s", CatalogMeasured(gpus_per_node=spec.hardware.gpu_count))
    perf, perf_src = floor("ib_write_bw_gbit_s", CatalogMeasured(message_bytes=message_bytes))
    return Limits(health.slow_fraction.value, health.slow_fraction.source, pair, pair_src, perf, perf_src)


def trigger(results: Sequence[Mapping[str, Any]], fraction: float) -> str | None:
    """Why fault finding starts, from a bench run's cluster results (`result_dict`s), or None:
    the multi-node all_reduce failed its floor, or an ib_write_bw pair is more than
    `fraction` below the best pair (`slow`, the one rule)."""
    why = [str(r.get("message")) for r in results
           if r.get("check") == "multi_node_busbw_gb_s" and r.get("status") == "fail"]
    pairs = [r for r in results if r.get("check") == "ib_write_bw_gbit_s" and isinstance(r.get("value"), (int, float))]
    best = max((float(r["value"]) for r in pairs), default=None)
    why += [f"ib_write_bw {r.get('subject')}: {r['value']:g} Gb/s, more than {fraction:.0%} below the best pair "
            f"({best:g} Gb/s)" for r in pairs if slow(float(r["value"]), best, fraction)]
    return "; ".join(why) or None


def finding_verdicts(loc: Localisation) -> list[Verdict]:
    """The findings as verdicts (check `fault_finding`): a named node or link fails (reseat or
    replace), a pair that cannot be pinned or a widespread fault fails (reconfigure or look
    at the fabric), a node that could not be measured could not run; nothing named is
    reported without a threshold (not a pass: the search only compares)."""
    out: list[Verdict] = []
    src = f"fault finding: slow = below the floor or {loc.slow_fraction:.0%} below the stage's best " \
          f"({loc.slow_fraction_source})"
    for f in loc.findings:
        port = ",".join(sorted({r.hca for r in f.rails})) or None
        subject = Subject(node="↔".join(f.nodes) or "cluster", port=port)
        text = f"{f.message} (rounds {loc.rounds} of at most {loc.bound})"
        if f.kind == "unreachable":
            out.append(could_not_run("fault_finding", f.message, subject, Remediation.RERUN, src))
        elif f.kind == "noise":
            out.append(Verdict("fault_finding", Status.NO_THRESHOLD, subject, None, None, "", src,
                               Remediation.NONE, text))
        else:
            rem = Remediation.RESEAT_OR_REPLACE if f.kind in ("node", "link") else Remediation.RECONFIGURE
            out.append(Verdict("fault_finding", Status.FAIL, subject, None, None, "", src, rem, text))
    return out
