"""`gpuctl mirror up|check|wheels`: the cluster's package cache and the offline mirror check (gpuctl.mirror)."""

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
    record = RunRecord.create("mirror", loaded.path, loaded.matrix.path)
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


@mirror.command("wheels", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.argument("dest", type=click.Path(file_okay=False))
@click.option("--index", "index_url", default=None, help="Upstream PEP 691 index (default: the matrix's index_url).")
@json_option
@handle_errors
def wheels_cmd(inventory: str, dest: str, index_url: str | None, as_json: bool) -> None:
    """Fill DEST/simple/ (a PEP 503 index) with the training environment's wheels: every file of
    the matrix's lock for the inventory's Python, each checked against its locked sha256; files
    already there are kept. Serve DEST/simple/ and point train_env_index_url at it. Exit 1 naming
    each locked package upstream lacks."""
    from pathlib import Path

    from gpuctl.wheelhouse import fill_for_inventory

    loaded = load_inventory(inventory)
    report = fill_for_inventory(loaded, Path(dest), index_url)
    if as_json:
        emit_json(report.as_dict())
    else:
        con = console()
        for line in report.missing:
            con.print(f"missing: {line}", markup=False)
        con.print(f"{dest}/simple: {len(report.fetched)} wheel(s) fetched ({report.bytes_fetched} bytes), "
                  f"{len(report.cached)} already there", markup=False)
    raise SystemExit(int(ExitCode.OK if report.ok else ExitCode.CHECKS_FAILED))


def register(main: click.Group) -> None:
    main.add_command(mirror)
