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


@mirror.command("wheels", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.argument("dest", type=click.Path(file_okay=False), required=False)
@click.option("--index", "index_url", default=None, help="Upstream PEP 691 index (default: the matrix's index_url).")
@json_option
@handle_errors
def wheels_cmd(inventory: str, dest: str | None, index_url: str | None, as_json: bool) -> None:
    """Fill a wheelhouse (a PEP 503 index, DIR/simple/) with the training environment's wheels:
    every file of the matrix's lock for the inventory's Python, each checked against its locked
    sha256; files already there are kept. Without DEST: the cache host's wheelhouse, filled on
    the cache host (role_vars.package_mirror_wheels: true; it serves it to every node). With
    DEST: that folder here (serve it and set train_env_index_url). Exit 1 naming each locked
    package upstream lacks."""
    from pathlib import Path

    from gpuctl.wheelhouse import fill_for_inventory

    loaded = load_inventory(inventory)
    if dest is None:
        from gpuctl.mirror import fill_cache_wheels

        if index_url is not None:
            raise InputError("--index applies to a local DEST; the cache host fetches from the matrix's index_url")
        record = RunRecord.create("mirror-wheels", loaded.path, loaded.matrix.path)
        res = fill_cache_wheels(loaded, record=record)
        record.finish("ok" if res["status"] == "ok" else "failed")
        where, ok = f"{res['node']}:{res['dir']}/simple", res["status"] == "ok"
        missing, fetched, size, cached = res["missing"], res["fetched"], res["bytes_fetched"], res["cached"]
        data: dict = res
    else:
        report = fill_for_inventory(loaded, Path(dest), index_url)
        where, ok, missing = f"{dest}/simple", report.ok, report.missing
        fetched, size, cached = len(report.fetched), report.bytes_fetched, len(report.cached)
        data = report.as_dict()
    if as_json:
        emit_json(data)
    else:
        con = console()
        for line in missing:
            con.print(f"missing: {line}", markup=False)
        con.print(f"{where}: {fetched} wheel(s) fetched ({size} bytes), {cached} already there", markup=False)
    raise SystemExit(int(ExitCode.OK if ok else ExitCode.CHECKS_FAILED))


def register(main: click.Group) -> None:
    main.add_command(mirror)
