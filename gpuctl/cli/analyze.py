"""`gpuctl analyze [KIND] FILE`: parse and judge one tool output from anywhere (the kind
detected when not given)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import click
from rich.table import Table

import gpuctl.analyze
from gpuctl.analyze import KINDS, Analysis, analyze_text, detect_kind
from gpuctl.catalog import load_sku
from gpuctl.cli.common import console, emit_json, handle_errors, json_option, styled
from gpuctl.cli.tables import Row, print_verdicts
from gpuctl.errors import ExitCode, ParseError
from gpuctl.fileio import read_text

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "error": "red", "no-threshold": "cyan",
          "not-applicable": "dim"}


def _too_large(file: str, size: int, bound: int) -> ParseError:
    return ParseError(f"{file}: input too large ({size} bytes or more; the bound is "
                      f"{bound // (1024 * 1024)} MiB, gpuctl.analyze.MAX_INPUT_BYTES)")


def _read(file: str) -> str:
    bound = gpuctl.analyze.MAX_INPUT_BYTES
    try:
        if file == "-":
            text = sys.stdin.read(bound + 1)
            if len(text) > bound:
                raise _too_large(file, len(text), bound)
            return text
        size = os.stat(file).st_size
        if size > bound:
            raise _too_large(file, size, bound)
        # the bounded reader: regular files only (a FIFO is refused, not waited on), strict UTF-8
        return read_text(file, limit=bound, what="tool output")
    except FileNotFoundError:
        raise ParseError(f"{file}: no such file") from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as exc:
        raise ParseError(f"{file}: cannot read it as text ({exc})") from None


def _render(analysis: Analysis, file: str) -> None:
    out = console()
    figures = Table(title=f"{analysis.kind}: {file}", show_header=True)
    figures.add_column("figure")
    figures.add_column("value", overflow="fold")
    figures.add_column("unit")
    for f in analysis.figures:
        if isinstance(f.value, list | dict) and len(str(f.value)) > 80:
            value = f"{len(f.value)} entries (see --json)"
        else:
            value = "—" if f.value is None else str(f.value)
        figures.add_row(f.name, value, f.unit)
    out.print(figures)
    emulated = analysis.emulated or ""
    print_verdicts(out, [
        Row(x.subject.label(), x.check, x.status.value, "" if x.value is None else f"{x.value} {x.unit}".strip(),
            "" if x.threshold is None else str(x.threshold),
            x.message if x.remediation.value == "none" else f"{x.message} → {x.remediation.value}", emulated)
        for x in analysis.verdicts])
    st = analysis.status.value
    out.print(styled("status: ", (st, _STYLE.get(st, ""))))


HELP = (
    "Parse a tool output FILE ('-' for stdin) of KIND and judge it. Without KIND the kind is detected "
    "from the output and named; a file whose kind cannot be told, or that holds several tools' outputs, "
    "is refused (exit 2).\n\n"
    "\b\nKIND: " + ", ".join(sorted(KINDS)) + ".\n\n"
    "Without --sku only checks that need no SKU are made (nccl #wrong = 0, ECC health, Xid, ...). "
    "Exit 0 when nothing failed (warnings count as a pass), 1 when a check failed or could not be "
    "judged, 2 when FILE cannot be read or parsed."
)


def _kind_and_file(first: str, second: str | None) -> tuple[str | None, str]:
    """`analyze KIND FILE` or `analyze FILE` (the kind detected): (kind or None, file)."""
    if second is not None:
        if first not in KINDS:
            raise click.BadParameter(f"{first!r} is not one of {', '.join(sorted(KINDS))}", param_hint="KIND")
        return first, second
    if first in KINDS and not os.path.exists(first):
        raise click.UsageError(f"missing FILE after KIND {first!r}")
    return None, first


@click.command("analyze", help=HELP)
@click.argument("kind_or_file", metavar="[KIND]")
@click.argument("file", metavar="FILE", required=False)
@click.option("--sku", "sku_name", default=None, metavar="SKU",
              help="Judge against this SKU's thresholds (e.g. hgx-h100-80gb).")
@click.option("--baseline", "baseline_file", default=None, metavar="FILE",
              help="An earlier output of the same counter tool (nvlink-errors, ib-counters): the counters "
                   "are judged by their change from it.")
@json_option
@handle_errors
def analyze(kind_or_file: str, file: str | None, sku_name: str | None, baseline_file: str | None,
            as_json: bool) -> None:
    kind, file = _kind_and_file(kind_or_file, file)
    sku = load_sku(sku_name) if sku_name else None
    text = _read(file)
    baseline = _read(baseline_file) if baseline_file else None
    detected = None
    if kind is None:
        try:
            kind, detected = detect_kind(text)
        except ParseError as exc:
            raise ParseError(f"{file}: {exc}") from None
        if not as_json:
            click.echo(f"{file}: {detected}", err=True)
    analysis = analyze_text(kind, text, sku, source=file, baseline=baseline)
    if detected:
        analysis = replace(analysis, detected=detected)
    if as_json:
        emit_json(analysis.as_dict())
    else:
        _render(analysis, file)
    if analysis.failed:
        sys.exit(int(ExitCode.CHECKS_FAILED))


def register(main: click.Group) -> None:
    main.add_command(analyze)
