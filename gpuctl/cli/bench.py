"""`gpuctl bench`: run the smoke or acceptance benchmarks on the nodes and judge them."""

from __future__ import annotations

from typing import Any

import click

from gpuctl.bench.run import exit_code, run_bench
from gpuctl.bench.suites import SUITES
from gpuctl.cli.common import EXIT_CODES_HELP, console, emit_json, handle_errors, json_option, limit_option, styled
from gpuctl.cli.tables import Headers, Row, print_verdicts
from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory
from gpuctl.report.gather import fmt_threshold, fmt_value
from gpuctl.results import BenchStage, bench_stage
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve


def rows(data: dict[str, Any] | BenchStage) -> list[Row]:
    """The verdict rows of a bench result (`run_bench`'s shape, read through its typed model
    `gpuctl.results.BenchStage`), nodes first, then the cluster."""
    stage = data if isinstance(data, BenchStage) else bench_stage(data)
    # each node's rows against its own thresholds; the cluster rows against the first node's
    results = ([(r, stage.thresholds_of(name)) for name, h in stage.hosts.items() for r in h.results]
               + [(r, stage.thresholds) for r in stage.cluster.results])
    return [Row(r.subject, r.check, str(r.status), fmt_value(r.value, r.unit or ""),
                fmt_threshold(r.check, r.threshold, r.unit or "", own),
                r.message or "", r.emulated or "", r.unit or "")
            for r, own in results]


def _print(stage: BenchStage) -> None:
    out = console()
    print_verdicts(out, rows(stage), Headers(subject="node / pair"))
    out.print(styled(f"bench {stage.suite}: ", (str(stage.status), "bold"), f" — run record {stage.run_id}"))


@click.command("bench", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--suite", type=click.Choice(sorted(SUITES)), default="quick", show_default=True,
              help="quick: all_reduce, probe, IB, fio, training; acceptance adds all_gather, "
                   "reduce_scatter and dcgmi diag -r 2 with larger sizes; training: the training run alone.")
@limit_option
@json_option
@handle_errors
def bench(inventory: str, suite: str, limit: tuple[str, ...], as_json: bool) -> None:
    """Run benchmarks on the nodes of INVENTORY over SSH and judge them against the SKU's
    thresholds. Exit 0 pass/warn, 1 any failure, 3 a benchmark could not run."""
    loaded = load_inventory(inventory)
    specs = resolve(loaded, limit)
    if not specs:
        raise InputError(f"--limit {' '.join(limit)} selects no node of {inventory}")
    record = RunRecord.create("bench", loaded.path, loaded.matrix.path, cluster=loaded.inventory.cluster.name,
                              inventory_text=loaded.text)
    err = console(stderr=True)
    stage = run_bench(loaded, specs, SUITES[suite], record,
                      progress=None if as_json else (lambda msg: err.print(styled((f"… {msg}", "dim")))))
    status = str(stage.status)
    record.finish(status)
    if as_json:
        out = {"run_id": stage.run_id, "suite": stage.suite, "status": status,
               "hosts": {h: {"status": str(b.status), "results": [r.dump() for r in b.results]}
                         for h, b in stage.hosts.items()},
               "cluster": {"status": str(stage.cluster.status),
                           "results": [r.dump() for r in stage.cluster.results]}}
        if stage.localisation.ran:  # the named node/link, HCA, interface and rounds
            out["localisation"] = stage.localisation.dump()
        emit_json(out)
    else:
        _print(stage)
    raise SystemExit(int(exit_code(status)))


def register(main: click.Group) -> None:
    main.add_command(bench)
