"""`gpuctl bench`: run the smoke or acceptance benchmarks on the nodes and judge them."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from gpuctl.bench.run import exit_code, run_bench
from gpuctl.bench.suites import SUITES
from gpuctl.cli.common import EXIT_CODES_HELP, console, emit_json, handle_errors, json_option, limit_option, styled
from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve

_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "error": "red", "no-threshold": "dim",
          "not-applicable": "dim"}


def _value(r: dict[str, Any]) -> str:
    v = r.get("value")
    if v is None:
        return ""
    text = f"{v:,.4g}" if isinstance(v, float) else str(v)
    return f"{text} {r.get('unit') or ''}".strip()


def _print(data: dict[str, Any]) -> None:
    out = console()
    table = Table("node / pair", "test", "check", "status", "value", "threshold", "message")
    rows = [r for h in data["hosts"].values() for r in h["results"]] + data["cluster"]["results"]
    for r in rows:
        st = r["status"]
        thr = "" if r.get("threshold") is None else f"{r['threshold']}"
        table.add_row(r["subject"], r["test"], r["check"], styled((st, _STYLE.get(st, ""))), _value(r), thr,
                      r["message"] if st not in ("pass",) else "")
    out.print(table)
    out.print(styled(f"bench {data['suite']}: ", (data["status"], "bold"), f" — run record {data['run_id']}"))


@click.command("bench", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--suite", type=click.Choice(sorted(SUITES)), default="quick", show_default=True,
              help="quick: all_reduce, probe, IB, fio, training; acceptance adds all_gather, "
                   "reduce_scatter and dcgmi diag -r 2 with larger sizes.")
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
    data = run_bench(loaded, specs, SUITES[suite], record,
                     progress=None if as_json else (lambda msg: err.print(styled((f"… {msg}", "dim")))))
    record.finish(data["status"])
    if as_json:
        emit_json({"run_id": data["run_id"], "suite": data["suite"], "status": data["status"],
                   "hosts": {h: {"status": d["status"], "results": d["results"]} for h, d in data["hosts"].items()},
                   "cluster": {"status": data["cluster"]["status"], "results": data["cluster"]["results"]}})
    else:
        _print(data)
    raise SystemExit(int(exit_code(data["status"])))


def register(main: click.Group) -> None:
    main.add_command(bench)
