"""`gpuctl mirror up|check`: the cluster's package cache and the offline mirror check (gpuctl.mirror)."""

from __future__ import annotations

import click

from gpuctl.cli.common import EXIT_CODES_HELP, console, emit_json, handle_errors, json_option, limit_option
from gpuctl.errors import ExitCode, InputError
from gpuctl.inventory import load_inventory
from gpuctl.runrecord import RunRecord


@click.group("mirror")
def mirror() -> None:
    """The cluster's package cache (repos.cache_host) and offline mirror (repos.offline)."""


@mirror.command("up", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@json_option
@handle_errors
def up_cmd(inventory: str, as_json: bool) -> None:
    """Install and configure apt-cacher-ng on repos.cache_host; the other nodes then fetch
    every package through it."""
    from gpuctl.mirror import mirror_up
    from gpuctl.runner.bootstrap import ensure_patched

    ensure_patched()
    loaded = load_inventory(inventory)
    record = RunRecord.create("mirror", loaded.path, loaded.matrix.path, cluster=loaded.inventory.cluster.name,
                              inventory_text=loaded.text)
    res = mirror_up(loaded, record)
    record.finish(res["status"])
    if as_json:
        emit_json(res)
    else:
        for node, h in res["hosts"].items():
            console().print(f"{node}: {h['status']} {h.get('error', '')}".rstrip(), markup=False)
    if res["status"] != "ok":
        raise SystemExit(int(ExitCode.EXECUTION if all(h["status"] == "unreachable" for h in res["hosts"].values())
                             else ExitCode.CHECKS_FAILED))


@mirror.command("check", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@json_option
@handle_errors
def check_cmd(inventory: str, limit: tuple[str, ...], as_json: bool) -> None:
    """Check that the mirror's package index has every pinned package version of every node.
    Exit 1 naming each missing one."""
    from gpuctl.mirror import fetch_index, missing_packages
    from gpuctl.spec import resolve

    loaded = load_inventory(inventory)
    specs = resolve(loaded, limit)
    if any(s.package_manager != "apt" for s in specs):
        raise InputError("gpuctl mirror check reads apt Packages indexes; dnf repositories are not supported yet")
    report = missing_packages(specs, fetch_index(specs[0].repo.url), specs[0].repo.url)
    if as_json:
        emit_json(report.as_dict())
    else:
        con = console()
        for line in report.lines():
            con.print(f"missing: {line}", markup=False)
        con.print(f"{report.repo_url}: {report.checked - len(report.missing)} of {report.checked} pinned "
                  "package versions present", markup=False)
    raise SystemExit(int(ExitCode.OK if report.ok else ExitCode.CHECKS_FAILED))


def register(main: click.Group) -> None:
    main.add_command(mirror)
