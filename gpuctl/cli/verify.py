"""`gpuctl verify`: check every node against its NodeSpec over SSH and report what differs."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from gpuctl.checks.model import CheckStatus, HostStatus, VerifyResult
from gpuctl.checks.runner import run_verify
from gpuctl.cli.common import EXIT_CODES_HELP, console, emit_json, handle_errors, json_option, limit_option, styled
from gpuctl.errors import ExitCode
from gpuctl.hostlist import fold
from gpuctl.inventory import load_inventory
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve

_STYLE = {"pass": "green", "fail": "red", "error": "yellow", "unreachable": "red", "skip": "dim"}


def verify_exit_code(result: VerifyResult) -> ExitCode:
    """0 every check passed; 1 a check failed; 3 checks could not run (no host reachable,
    or some checks or hosts could not be checked)."""
    status = result.status
    if status is HostStatus.PASS:
        return ExitCode.OK
    if status is HostStatus.FAIL:
        return ExitCode.CHECKS_FAILED
    return ExitCode.EXECUTION


def json_summary(result: VerifyResult) -> dict[str, Any]:
    """What `--json` prints: per host its status, counts, failed and could-not-run checks (with
    what was expected and found), and the names of the checks that passed or were skipped (so
    a consumer knows what was covered, not only what went wrong)."""
    hosts = {}
    for name, h in sorted(result.hosts.items()):
        d = h.as_dict()
        hosts[name] = {"status": d["status"], "counts": d["counts"], "failed": d["failed"],
                       "could_not_run": d["could_not_run"], "unreachable_reason": d["unreachable_reason"],
                       "passed": [c.check for c in h.checks if c.status is CheckStatus.PASS],
                       "skipped": [c.check for c in h.checks if c.status is CheckStatus.SKIP]}
    return {"status": result.status.value, "run_id": result.run_id, "duration_s": round(result.duration_s, 2),
            "hosts": hosts}


def print_result(result: VerifyResult) -> None:
    out = console()
    table = Table("host", "status", "pass", "fail", "could not run", "skipped")
    for name, h in sorted(result.hosts.items()):
        # status and counts only: the host's full dict (every check) is the run record's
        st = h.status.value
        table.add_row(name, styled((st, _STYLE.get(st, ""))), *(str(h.count(s)) for s in (
            CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR, CheckStatus.SKIP)))
    out.print(table)
    failed = [(n, c) for n, h in sorted(result.hosts.items()) for c in h.failed]
    if failed:
        out.print(styled("\n", (f"{len(failed)} failed check(s)", "bold")))
    # The same finding on many nodes is one entry naming them (64 nodes: one line per
    # finding, not per node); the run record keeps every host's own result.
    same: dict[tuple[str, str, str, str, str], list[str]] = {}
    for n, c in failed:
        same.setdefault((c.check, c.message, str(c.expected), str(c.found), str(c.remediation)), []).append(n)
    for (check, message, expected, found, remediation), names in same.items():
        where = names[0] if len(names) == 1 else f"on {len(names)} hosts {fold(names)}"
        out.print(styled(("FAIL", "red"), f" {where} ", (check, "bold"), f": {message}"))
        out.print(f"     expected: {expected}\n     found:    {found}\n     remediation: {remediation}")
    for name, h in sorted(result.hosts.items()):
        if h.unreachable_reason:
            out.print(styled(("UNREACHABLE", "red"), f" {name}: {h.unreachable_reason}"))
            continue
        errors = h.errors
        if errors:
            shown = errors[:10]
            for c in shown:
                out.print(styled(("COULD NOT RUN", "yellow"), f" {name} {c.check}: {c.message}"))
            if len(errors) > len(shown):
                out.print(styled((f"… and {len(errors) - len(shown)} more checks on {name} could not run", "yellow")))
    out.print(styled("verify: ", (result.status.value, "bold"),
                     f" in {result.duration_s:.1f} s — run record {result.run_id}"))


@click.command("verify", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@json_option
@click.option("--parallel", type=click.IntRange(1, 256), default=None,
              help="Hosts checked at once (default: all, up to 64).")
@handle_errors
def verify(inventory: str, limit: tuple[str, ...], as_json: bool, parallel: int | None) -> None:
    """Check the nodes of INVENTORY against their NodeSpec (packages, services, modules,
    GPUs, NVLink, fabric, VLANs, RAID, mounts). Exit 0 all pass, 1 a check failed,
    3 checks could not run (e.g. no host reachable)."""
    loaded = load_inventory(inventory)
    specs = resolve(loaded, limit)
    record = RunRecord.create("verify", loaded.path, loaded.matrix.path)
    try:
        result = run_verify(loaded, specs, record, limit, parallel)
    except Exception:
        record.finish("error")
        raise
    record.finish(result.status.value)
    if as_json:
        emit_json(json_summary(result))
    else:
        print_result(result)
    raise SystemExit(int(verify_exit_code(result)))


def register(main: click.Group) -> None:
    main.add_command(verify)
