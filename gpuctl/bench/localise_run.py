"""Fault finding inside `gpuctl bench`: the real commands behind `gpuctl.bench.localise`.

`run(bench, live, rsh, why)` gives `localise.localise` a `measure` whose every probe is a real
command over the bench's runner (`gpuctl.bench.remote`): the loopback all_reduce on its node
(`suites.loopback_script`), pair and per-rail all_reduce launched from the head under the
run's SSH trust (`suites.pair_script`), `ib_write_bw` server and client per HCA
(`suites.perftest_script`); every output is kept in the run record (`raw/<host>/localise_r<round>_…`),
the findings become `fault_finding` verdicts, and the result (`Localisation.as_dict`) is
returned for bench.json's `localisation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from gpuctl.bench import localise, remote, suites
from gpuctl.errors import ParseError
from gpuctl.parsers.nccl import parse_nccl_tests
from gpuctl.parsers.perftest import parse_ib_write_bw
from gpuctl.spec import NodeSpec

if TYPE_CHECKING:
    from gpuctl.bench.run import BenchRun


def limits(spec: NodeSpec) -> localise.Limits:
    """The node's fault-finding limits, for the message size its ib_write_bw runs with."""
    return localise.limits_for(spec, int(suites.perftest_params(spec, "ib_write_bw")[1]))


def run(bench: BenchRun, live: Sequence[NodeSpec], rsh: str, why: str) -> dict[str, Any]:
    """Name the bad node, HCA or link among `live` (module docstring); the verdicts go to the
    bench's cluster results, the localisation is returned."""
    head = live[0]
    bench.progress(f"fault finding over {len(live)} nodes: {why}")
    rails = {s.node: [localise.Rail(p.hca, p.interface) for p in s.fabric.ports] for s in live}
    loc = localise.localise([s.node for s in live], rails, measure_for(bench, head, rsh), limits(head), why)
    bench.cluster.add(localise.finding_verdicts(loc), "fault_finding", None, None)
    for f in loc.findings:
        bench.progress(f"fault finding: {f.message}")
    return loc.as_dict()


def measure_for(bench: BenchRun, head: NodeSpec, rsh: str) -> localise.Measure:
    """The fault finding's `measure`: every probe of a round at once, each a real command."""
    limit = bench.suite.localise_timeout_s
    rounds = [0]

    def one(probe: localise.Probe) -> localise.Measured:
        specs = [bench.by_name[x] for x in probe.nodes]
        name = f"localise_r{rounds[0]:02d}_{probe.kind}_" + "_".join(probe.nodes) + (
            f"_rail{probe.rail}" if probe.rail is not None else "")
        if probe.kind == localise.PERFTEST:
            a, b = specs
            i = probe.rail or 0
            srv, cli = remote.run_server_client(
                bench.targets[a.node], suites.perftest_script("ib_write_bw", a, i), bench.targets[b.node],
                suites.perftest_script("ib_write_bw", b, i, suites.fabric_address(a, i)), timeout_s=limit)
            bench.keep(bench.cluster, a.node, f"{name}_server", srv)
            raw = bench.keep(bench.cluster, b.node, f"{name}_client", cli)
            try:
                return localise.Measured(probe, parse_ib_write_bw(cli.stdout).bw_avg_gbit_s, "Gb/s", raw=raw)
            except ParseError as exc:
                return localise.Measured(probe, None, "Gb/s", cli.reason() if not cli.ok else str(exc), raw)
        if probe.kind == localise.LOOPBACK:
            where, script = specs[0].node, suites.loopback_script(bench.suite, specs[0])
        else:
            where = head.node
            script = suites.pair_script(specs[0], specs[1], bench.suite, bench.record.id, rsh, probe.rail,
                                        launcher=head.node)
        res = remote.run(bench.targets[where], script, limit)
        raw = bench.keep(bench.cluster, where, name, res)
        try:
            return localise.Measured(probe, parse_nccl_tests(res.stdout).large_msg_busbw_gb_s, "GB/s", raw=raw)
        except ParseError as exc:
            return localise.Measured(probe, None, "GB/s", res.reason() if not res.ok else str(exc), raw)

    def measure(probes: Sequence[localise.Probe]) -> list[localise.Measured]:
        rounds[0] += 1
        bench.progress(f"fault finding round {rounds[0]}: " + ", ".join(p.label() for p in probes))
        with ThreadPoolExecutor(max_workers=max(1, min(64, len(probes)))) as pool:
            return list(pool.map(one, probes))

    return measure
