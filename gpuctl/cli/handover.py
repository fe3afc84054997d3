"""`gpuctl handover`: customer accounts, keys, sudo; the provider key removed last (gpuctl.handover)."""

from __future__ import annotations

import click

from gpuctl.cli.common import EXIT_CODES_HELP, console, emit_json, handle_errors, json_option, limit_option
from gpuctl.errors import ExitCode
from gpuctl.inventory import load_inventory
from gpuctl.runrecord import RunRecord


@click.command("handover", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@json_option
@handle_errors
def handover_cmd(inventory: str, limit: tuple[str, ...], as_json: bool) -> None:
    """Create the customer's accounts from INVENTORY's handover block (keys, sudo checked with
    visudo) and, with handover.remove_provider_key, remove the provider's key — only after a
    customer sudo account has logged in over SSH in the same run. Exit 1 when a node failed."""
    from gpuctl.handover import handover
    from gpuctl.runner.bootstrap import ensure_patched

    ensure_patched()
    loaded = load_inventory(inventory)
    record = RunRecord.create("handover", loaded.path, loaded.matrix.path)
    out = handover(loaded, limit, record)
    record.finish("ok" if out.ok else "failed")
    hosts = out.run.get("hosts", {})
    if as_json:
        emit_json({"run_id": record.id, **out.as_dict()})
    else:
        con = console()
        for node, h in hosts.items():
            line = f"{node}: {h['status']}" + (f" — {h['error']}" if h.get("error") else "")
            con.print(line, markup=False, highlight=False)
        con.print(f"handover: {'ok' if out.ok else 'FAILED'} (run record {record.id})", markup=False)
    if hosts and all(h["status"] == "unreachable" for h in hosts.values()):
        raise SystemExit(int(ExitCode.EXECUTION))
    raise SystemExit(int(ExitCode.OK if out.ok else ExitCode.CHECKS_FAILED))


def register(main: click.Group) -> None:
    main.add_command(handover_cmd)
