"""`gpuctl handover`: customer accounts, keys, sudo; the provider key removed last (gpuctl.handover)."""

from __future__ import annotations

import click

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
from gpuctl.errors import ExitCode
from gpuctl.inventory import load_inventory
from gpuctl.runrecord import RunRecord


@click.command("handover", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@yes_option
@json_option
@handle_errors
def handover_cmd(inventory: str, limit: tuple[str, ...], yes: bool, as_json: bool) -> None:
    """Create the customer's accounts from INVENTORY's handover block (keys, sudo checked with
    visudo) and, with handover.remove_provider_key, remove the provider's key — only after a
    customer sudo account has logged in over SSH in the same run. Exit 1 when a node failed.
    Asks first on a terminal; --yes otherwise."""
    from gpuctl.handover import handover
    from gpuctl.runner.bootstrap import ensure_patched

    ensure_patched()
    loaded = load_inventory(inventory)
    require_yes(yes, "handover", f"creates customer accounts on the nodes of {inventory}"
                + (" and removes the provider's key" if loaded.inventory.handover.remove_provider_key else ""))
    record = RunRecord.create("handover", loaded.path, loaded.matrix.path, cluster=loaded.inventory.cluster.name,
                              inventory_text=loaded.text)
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




@click.command("bundle", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--run", "runs", multiple=True, metavar="RUN",
              help="Run record(s) to include (id, folder or latest-<command>); default: the latest "
                   "preflight, provision, verify, bench, handover and lock runs.")
@click.option("--out", "out", type=click.Path(), default="bundles", show_default=True,
              help="The .tar.gz to write, or a folder to write it in.")
@json_option
@handle_errors
def bundle_cmd(inventory: str, runs: tuple[str, ...], out: str, as_json: bool) -> None:
    """Write the delivery bundle: acceptance report (HTML + JSON), lock file, run records,
    MANIFEST.json and SHA256SUMS in one .tar.gz; secrets redacted, private keys left out."""
    from gpuctl.bundle import make_bundle
    from gpuctl.errors import InputError
    from gpuctl.lock.model import lock_path

    loaded = load_inventory(inventory)
    refs = runs or tuple(f"latest-{c}" for c in ("preflight", "provision", "verify", "bench", "handover", "lock"))
    records = []
    for ref in refs:
        try:
            records.append(RunRecord.open(ref))
        except InputError:
            if runs:
                raise
    lock = lock_path(loaded.path)
    res = make_bundle(records, out, lock_file=lock if lock.is_file() else None,
                      cluster=loaded.inventory.cluster.name)
    if as_json:
        emit_json(res.as_dict())
    else:
        con = console()
        con.print(f"bundle: {res.path} ({len(res.files)} files, report {res.report})", markup=False)
        for e in res.excluded:
            con.print(f"left out: {e['path']} ({e['reason']})", markup=False)
        if not lock.is_file():
            con.print(f"no lock file {lock}: run `gpuctl lock` to include one", markup=False)


def register(main: click.Group) -> None:
    main.add_command(handover_cmd)
    main.add_command(bundle_cmd)
