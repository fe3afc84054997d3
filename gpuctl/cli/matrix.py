"""`gpuctl matrix list|show|check`: the pinned version matrices and their rules."""

from __future__ import annotations

import sys

import click
from rich.table import Table

from gpuctl.catalog import load_sku, sku_names
from gpuctl.cli.common import EXIT_CODES_HELP, console, emit_json, handle_errors, json_option, styled
from gpuctl.errors import ExitCode
from gpuctl.matrix import COMPONENTS, OS_FAMILIES, load_matrix, matrix_names
from gpuctl.rules import check_matrix

_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "n/a": "dim"}


@click.group(epilog=EXIT_CODES_HELP)
def matrix() -> None:
    """Pinned version matrices: list, show, check."""


@matrix.command("list")
@json_option
@handle_errors
def list_(as_json: bool) -> None:
    """List the shipped matrices."""
    rows = []
    for name in matrix_names():
        m = load_matrix(name).matrix
        rows.append({"name": name, "driver": m.driver.version, "cuda": m.cuda.full_version,
                     "nccl": m.nccl.version, "description": m.description})
    if as_json:
        emit_json(rows)
        return
    table = Table("matrix", "driver", "CUDA", "NCCL", "description")
    for r in rows:
        table.add_row(r["name"], r["driver"], r["cuda"], r["nccl"], r["description"])
    console().print(table)


@matrix.command("show")
@click.argument("name")
@click.option("--os", "os_family", type=click.Choice(OS_FAMILIES), help="Only this OS family's packages.")
@json_option
@handle_errors
def show(name: str, os_family: str | None, as_json: bool) -> None:
    """Show every pinned component and package of NAME (a shipped name or a file path)."""
    loaded = load_matrix(name)
    m = loaded.matrix
    if as_json:
        emit_json(m.model_dump(mode="json"))
        return
    out = console()
    out.print(styled((m.name, "bold"), f" — {m.description}  ({loaded.path})"))
    comp = Table("component", "version", "source")
    comp.add_row("driver", f"{m.driver.version} (R{m.driver.branch}, {m.driver.flavour})", m.driver.source)
    comp.add_row("fabricmanager", m.fabricmanager.version, m.fabricmanager.source)
    comp.add_row("cuda", m.cuda.full_version, m.cuda.source)
    comp.add_row("cudnn", f"{m.cudnn.version} (CUDA {m.cudnn.cuda_major})", m.cudnn.source)
    comp.add_row("nccl", f"{m.nccl.version}+cuda{m.nccl.cuda}", m.nccl.source)
    comp.add_row("dcgm", f"{m.dcgm.version} (cuda{m.dcgm.cuda_major})", m.dcgm.source)
    if m.ofed:
        comp.add_row("ofed", f"{m.ofed.kind}-ofed {m.ofed.version}", m.ofed.source)
    if m.gds:
        comp.add_row("gds", m.gds.version, m.gds.source)
    if m.lustre:
        comp.add_row("lustre", m.lustre.version, m.lustre.source)
    if m.train_env:
        te = m.train_env
        comp.add_row("torch", f"{te.torch.runtime_version} (CUDA {te.torch.cuda})", te.torch.source)
        comp.add_row("torch CUDA runtime", te.cuda_runtime.requirement, te.cuda_runtime.source)
        comp.add_row("torch NCCL", te.nccl.requirement, te.nccl.source)
        comp.add_row("python", ", ".join(f"{f} {v}" for f, v in te.python.items()), te.python_source)
        for extra in te.extra_packages:
            comp.add_row("train extra", extra.requirement, "train_env.extra_packages")
    out.print(comp)
    families = [os_family] if os_family else list(m.packages)
    pkgs = Table("os", "component", "package", "version")
    for fam in families:
        for c in COMPONENTS:
            for p in m.packages_for(fam, c):
                pkgs.add_row(fam, c, p.name, p.version)
    out.print(pkgs)


@matrix.command("check", epilog=EXIT_CODES_HELP)
@click.argument("matrices", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Check every shipped matrix.")
@click.option("--sku", type=click.Choice(sku_names()), help="Also check GPU rules for this SKU.")
@click.option("--os", "os_family", type=click.Choice(OS_FAMILIES), help="Only this OS family.")
@json_option
@handle_errors
def check(matrices: tuple[str, ...], all_: bool, sku: str | None, os_family: str | None, as_json: bool) -> None:
    """Run every compatibility rule on MATRICES (names or paths) and print each result.
    Exit 1 if any rule fails."""
    names = list(matrices) + (matrix_names() if all_ else [])
    if not names:
        raise click.UsageError("name at least one matrix, or --all")
    sku_obj = load_sku(sku) if sku else None
    report = []
    failed = False
    for name in names:
        loaded = load_matrix(name)
        results = check_matrix(loaded.matrix, sku_obj, (os_family,) if os_family else None)
        failed = failed or any(r.status == "fail" for r in results)
        report.append({"matrix": loaded.matrix.name, "path": str(loaded.path),
                       "results": [r.__dict__ for r in results]})
    if as_json:
        emit_json({"status": "fail" if failed else "pass", "matrices": report})
    else:
        out = console()
        for entry in report:
            table = Table("rule", "status", "reason", title=f"{entry['matrix']} ({entry['path']})")
            for r in entry["results"]:
                table.add_row(r["rule"], styled((r["status"], _STYLE[r["status"]])), r["reason"])
            out.print(table)
        out.print(styled(("FAIL", "bold red")) if failed else styled(("all rules pass", "green")))
    if failed:
        sys.exit(int(ExitCode.CHECKS_FAILED))


def register(main: click.Group) -> None:
    main.add_command(matrix)
