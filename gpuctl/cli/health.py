"""`gpuctl health`: fast read-only passive health checks of every node, with drain reasons."""

from __future__ import annotations

import click

from gpuctl.cli.common import console, emit_json, handle_errors, json_option, limit_option, styled
from gpuctl.errors import ExitCode
from gpuctl.health import COULD_NOT_RUN, HEALTHY, PER_NODE_LIMIT_S, UNHEALTHY, HealthResult, run_health
from gpuctl.inventory import load_inventory
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve

HEALTH_EXIT_HELP = "Exit codes: 0 every node healthy, 1 a node unhealthy, 2 usage or input error, 3 could not run."


def health_exit_code(result: HealthResult) -> ExitCode:
    """0 all healthy; 1 a node unhealthy (whatever else); 3 a node could not be checked."""
    return {HEALTHY: ExitCode.OK, UNHEALTHY: ExitCode.CHECKS_FAILED}.get(result.status, ExitCode.EXECUTION)


def print_result(result: HealthResult) -> None:
    """One line per node on stderr; the drain reasons of unhealthy nodes on stdout, one per line."""
    err = console(stderr=True)
    for name, n in sorted(result.nodes.items()):
        if n.status == UNHEALTHY:
            continue
        if n.status == HEALTHY:
            judged = sum(1 for f in n.findings if f.status == "pass")
            skipped = sum(1 for f in n.findings if f.status == "not_judged")
            err.print(styled((f"{name}: healthy", "green"), f" ({judged} passed, {skipped} not judged, "
                             f"{n.seconds:.1f} s)"))
        else:
            why = n.unreachable or "; ".join(f"{c}: {w}" for c, w in n.could_not_run.items())
            err.print(styled((f"{name}: could not check", "yellow"), f": {why}"))
    for _name, n in sorted(result.nodes.items()):
        line = n.drain_line()
        if line:
            click.echo(line)
    counts = {s: sum(1 for n in result.nodes.values() if n.status == s) for s in (HEALTHY, UNHEALTHY, COULD_NOT_RUN)}
    err.print(f"health: {counts[HEALTHY]} healthy, {counts[UNHEALTHY]} unhealthy, {counts[COULD_NOT_RUN]} could not "
              f"be checked in {result.duration_s:.1f} s — run record {result.run_id}")


@click.command("health", epilog=HEALTH_EXIT_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@json_option
@click.option("--timeout", "per_node_s", type=click.IntRange(1, 600), default=PER_NODE_LIMIT_S, show_default=True,
              help="Seconds each node may take; a node still running then is cut and reported.")
@handle_errors
def health(inventory: str, limit: tuple[str, ...], as_json: bool, per_node_s: int) -> None:
    """Passive, read-only health checks of the nodes of INVENTORY, all at once: Xid since boot,
    clock-event (throttle) reasons on idle GPUs, NVSwitch fabric state, PCIe AER, IB port error
    counters (change since the last run), firmware alike on every node and as in the lock, and
    GPU↔NIC NUMA placement. Each unhealthy node gets one line on stdout usable as a drain
    reason: `gpuctl: <check>: <subject>: <detail> → <remediation>`."""
    loaded = load_inventory(inventory)
    specs = resolve(loaded, limit)
    record = RunRecord.create("health", loaded.path, loaded.matrix.path)
    try:
        result = run_health(loaded, specs, raw_dir=record.path / "raw-health", per_node_s=per_node_s)
    except Exception:
        record.finish("error")
        raise
    result.run_id = record.id
    record.stage("health", result.as_dict())
    record.finish(result.status)
    if as_json:
        emit_json(result.as_dict())
    else:
        print_result(result)
    raise SystemExit(int(health_exit_code(result)))


def register(main: click.Group) -> None:
    main.add_command(health)
