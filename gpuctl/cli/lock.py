"""`gpuctl lock`, `gpuctl drift`, `gpuctl rebuild`: the CLI over gpuctl.lock."""

from __future__ import annotations

import click
from rich.table import Table

from gpuctl.cli.common import (
    EXIT_CODES_HELP,
    console,
    emit_json,
    handle_errors,
    json_option,
    limit_option,
    require_yes,
    yes_option,
)
from gpuctl.cli.tables import Headers, Row, print_verdicts
from gpuctl.errors import ExitCode
from gpuctl.inventory import load_inventory
from gpuctl.runrecord import RunRecord

_LOCK_OPTION = click.option("--lock-file", "lock_file", type=click.Path(dir_okay=False), default=None,
                            help="Lock file (default: <inventory>.lock.yaml beside the inventory).")


@click.command("lock", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@_LOCK_OPTION
@json_option
@handle_errors
def lock_cmd(inventory: str, limit: tuple[str, ...], lock_file: str | None, as_json: bool) -> None:
    """Read the installed versions, holds, kernel, nvidia module, firmware and configuration
    hashes from every node and write INVENTORY's lock file. With --limit, only those nodes'
    entries are replaced. Exit 3 when a node cannot be read (nothing written)."""
    from gpuctl.lock.locking import lock

    loaded = load_inventory(inventory)
    record = RunRecord.create("lock", loaded.path, loaded.matrix.path)
    try:
        out = lock(loaded, limit, record=record, path=lock_file)
    except Exception:
        record.finish("failed")
        raise
    record.finish("ok")
    if as_json:
        emit_json({"path": str(out.path), "run_id": record.id, "lock": out.lock.model_dump(mode="json")})
        return
    con = console()
    table = Table("node", "kernel", "nvidia module", "packages", "firmware", "files")
    for name, e in out.lock.nodes.items():
        versions = e.package_versions()
        table.add_row(name, e.kernel or "", e.nvidia_module or "-",
                      f"{sum(v is not None for v in versions.values())}/{len(versions)} installed",
                      str(len(e.firmware)), f"{sum(v is not None for v in e.files.values())} present")
    con.print(table)
    con.print(f"lock file: {out.path} (run record {record.id})", markup=False, highlight=False)


@click.command("drift", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@_LOCK_OPTION
@json_option
@handle_errors
def drift_cmd(inventory: str, limit: tuple[str, ...], lock_file: str | None, as_json: bool) -> None:
    """Read the nodes now and show what differs from the lock file and between nodes
    (a node that differs from the majority of its peers). Exit 1 on any drift."""
    from gpuctl.lock.drifting import drift

    loaded = load_inventory(inventory)
    record = RunRecord.create("drift", loaded.path, loaded.matrix.path)
    report = drift(loaded, limit, record=record, path=lock_file)
    record.finish("ok" if report.clean else "drift")
    if as_json:
        emit_json({"run_id": record.id, **report.as_dict()})
    else:
        con = console()
        if report.clean:
            con.print(f"no drift on {len(report.nodes)} node(s) (run record {record.id})", markup=False)
        else:
            rows = [Row(d.node, d.key, f"drift ({d.kind})", _short(d.found), _short(d.expected), d.note)
                    for d in report.items]
            print_verdicts(con, rows, Headers(subject="node", check="what", status="against", value="found",
                                              threshold="expected", message="note"))
            con.print(f"{len(report.items)} difference(s) (run record {record.id})", markup=False)
    raise SystemExit(int(ExitCode.OK if report.clean else ExitCode.CHECKS_FAILED))


def _short(v: str | None) -> str:
    if v is None:
        return "absent"
    return v[:12] + "…" if len(v) == 64 and all(c in "0123456789abcdef" for c in v) else v


@click.command("rebuild", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--host", "host", required=True, help="The replaced node to bring to the lock.")
@_LOCK_OPTION
@click.option("--no-verify", is_flag=True, help="Do not run verify after provisioning.")
@click.option("--bench-suite", default="quick", show_default=True,
              help="Bench suite run on the node and one peer afterwards; 'none' to skip.")
@yes_option
@json_option
@handle_errors
def rebuild_cmd(inventory: str, host: str, lock_file: str | None, no_verify: bool, bench_suite: str,
                yes: bool, as_json: bool) -> None:
    """Provision the replaced node HOST with package pins from the lock (its peers' versions),
    check it equals the lock and its peers, then verify and bench it. Exit 1 when it does not.
    Asks first on a terminal; --yes otherwise."""
    from gpuctl.lock.rebuilding import rebuild
    from gpuctl.runner.bootstrap import ensure_patched

    ensure_patched()
    loaded = load_inventory(inventory)
    require_yes(yes, "rebuild", f"reinstalls node {host} of {inventory} (packages, reboots)")
    record = RunRecord.create("rebuild", loaded.path, loaded.matrix.path, cluster=loaded.inventory.cluster.name,
                              inventory_text=loaded.text)
    out = rebuild(loaded, host, record, path=lock_file, verify=not no_verify,
                          bench=None if bench_suite == "none" else bench_suite)
    record.finish("ok" if out.ok else "failed")
    if as_json:
        emit_json({"run_id": record.id, **out.as_dict()})
    else:
        con = console()
        for p in out.pins:
            con.print(f"pin from lock: {p}", markup=False)
        con.print(f"provision: {out.provision['status']}", markup=False)
        for d in out.drift.items:
            con.print(f"drift: {d.message()}", markup=False)
        if out.verify is not None:
            con.print(f"verify: {out.verify.get('status')}", markup=False)
        if out.bench is not None:
            con.print(f"bench: {out.bench.get('status')}", markup=False)
        for n in out.notes:
            con.print(n, markup=False)
        con.print(f"rebuild of {host}: {'ok' if out.ok else 'FAILED'} (run record {record.id})", markup=False)
    if out.provision.get("status") != "ok" and all(h["status"] == "unreachable"
                                                    for h in out.provision.get("hosts", {}).values()):
        raise SystemExit(int(ExitCode.EXECUTION))
    raise SystemExit(int(ExitCode.OK if out.ok else ExitCode.CHECKS_FAILED))


def register(main: click.Group) -> None:
    main.add_command(lock_cmd)
    main.add_command(drift_cmd)
    main.add_command(rebuild_cmd)
