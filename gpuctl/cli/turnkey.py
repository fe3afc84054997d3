"""`gpuctl turnkey`: the provider's whole delivery, order → rack → install → hand over."""

from __future__ import annotations

import sys

import click

from gpuctl.cli.common import (
    EXIT_CODES_HELP,
    console,
    emit_json,
    handle_errors,
    json_option,
    limit_option,
    require_yes,
    styled,
    yes_option,
)
from gpuctl.cli.tables import Headers, Row, print_verdicts
from gpuctl.errors import ExitCode
from gpuctl.turnkey import run_turnkey
from gpuctl.turnkey_stages import default_stages

_STYLE = {"pass": "green", "fail": "bold red", "skipped": "dim", "running": "cyan"}


@click.command("turnkey", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--resume", "resume", metavar="RUN", help="Continue a turnkey run (its id or folder).")
@click.option("--suite", type=click.Choice(["quick", "acceptance"]), default="acceptance", show_default=True,
              help="Benchmark suite for the bench stage.")
@click.option("--allow-wipe", is_flag=True, help="Let the RAID step wipe the devices listed under storage.raid.wipe.")
@click.option("--max-unavailable", type=int, default=None, help="Nodes rebooting at once (default 10 %, >= 1).")
@click.option("--strict-host-keys", is_flag=True, help="Require known host keys.")
@limit_option
@yes_option
@json_option
@handle_errors
def turnkey(inventory: str, resume: str | None, suite: str, allow_wipe: bool, max_unavailable: int | None,
            strict_host_keys: bool, limit: tuple[str, ...], yes: bool, as_json: bool) -> None:
    """Preflight → provision → verify → bench → handover, each stage recorded in one run
    folder. On a failure it stops and prints how to resume; a resume skips the stages that
    passed unless the inventory or the matrix changed. Asks first on a terminal; --yes
    otherwise."""
    out = console(stderr=as_json)

    def on_stage(name: str, status: str) -> None:
        out.print(styled((f"{name}: {status}", _STYLE.get(status, "white"))))

    result = run_turnkey(
        inventory, default_stages(), resume=resume, limit=limit, on_stage=on_stage,
        confirm=lambda loaded, specs: require_yes(
            yes, "turnkey", f"installs, reboots and hands over {len(specs)} node(s) of cluster "
                            f"{loaded.inventory.cluster.name} ({inventory})"),
        options={"allow_wipe": allow_wipe, "max_unavailable": max_unavailable, "suite": suite,
                 "strict_host_keys": strict_host_keys},
    )
    if as_json:
        emit_json({"status": "pass" if result.ok else "fail", "run": str(result.record.path),
                   "failed_stage": result.failed_stage, "stages": result.stages,
                   "resume": None if result.ok else result.resume_hint(inventory)})
    else:
        rows = [Row(name, "", st["status"], str(st.get("seconds", "")), "", str(st.get("detail", "")))
                for name, st in result.stages.items()]
        print_verdicts(out, rows, Headers(subject="stage", check=None, value="seconds", threshold=None,
                                          message="detail"), title=f"turnkey {result.record.id}", quiet=frozenset())
        if result.ok:
            bundle = result.record.meta().get("bundle")
            out.print(styled(("delivered", "green"), f": run {result.record.path}"
                             + (f", bundle {bundle}" if bundle else "")))
        else:
            out.print(styled((f"stopped at {result.failed_stage}", "bold red"),
                             f"; fix the cause, then resume with:\n  {result.resume_hint(inventory)}"))
    if not result.ok:
        sys.exit(int(ExitCode.CHECKS_FAILED))


def register(main: click.Group) -> None:
    main.add_command(turnkey)
