"""The one way a command prints a verdict table on the terminal (bench, analyze, preflight,
drift): rows of subject, check, status, value, threshold and a message.

Wide enough (every cell on one line): one table with the message column. Otherwise (a
pipe or a log at 80 columns, where a message column wraps one word per line): a compact
table of subject, check, status, value and threshold, and below it one line per row that
did not pass with its message, which the terminal or the log viewer wraps as prose.

Every cell is a `rich.text.Text`, never markup: text from the nodes or from a file cannot
style or break the output. A row whose figure came from a lab stand-in tool or an
emulated device (`emulated`, see `gpuctl.provenance`) says so in its value cell, and the
table is preceded by a banner saying how many figures were emulated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "error": "red", "unreachable": "red",
         "no-threshold": "cyan", "not-applicable": "dim", "skipped": "dim", "skip": "dim", "drift": "yellow",
         "running": "cyan"}
EMULATED_MARK = "emulated"
EMULATED_SHORT = "emu"  # the compact table's marker (the banner says what it means)
# statuses whose message is not repeated below a compact table
QUIET = frozenset({"pass"})


@dataclass(frozen=True)
class Row:
    """One verdict as printed. `emulated` is why the figure is not a measurement of real
    hardware ('' when it is)."""

    subject: str
    check: str
    status: str
    value: str = ""
    threshold: str = ""
    message: str = ""
    emulated: str = ""
    unit: str = ""  # the value's unit, left out of the compact table's limit


@dataclass(frozen=True)
class Headers:
    """Column names; a column whose name is None is left out (turnkey's stages have no check
    and no threshold)."""

    subject: str = "subject"
    check: str | None = "check"
    status: str = "status"
    value: str | None = "value"
    threshold: str | None = "threshold"
    message: str = "message"


def _status(st: str) -> Text:
    return Text(st, style=STYLE.get(st.split(" ", 1)[0], ""))


def _value(row: Row, mark: str = EMULATED_MARK) -> Text:
    text = Text(row.value)
    if row.emulated:
        text.append((" " if row.value else "") + mark, style="bold magenta")
    return text


# "gpu-01 GPU 3 (00000000:3B:00.0)" → "gpu-01 GPU 3", "gpu-01 GPU 0 ↔ GPU 1" → "gpu-01 GPU 0↔1":
# the compact table names GPUs by index; the bus id stays in the message of a row that did
# not pass (messages start with the full label)
_BUS_ID = re.compile(r"(GPU \d+) \([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\)")
_PAIR = re.compile(r"GPU (\d+) ↔ GPU (\d+)")


def _short_subject(subject: str) -> str:
    return _PAIR.sub(r"GPU \1↔\2", _BUS_ID.sub(r"\1", subject))


def _limit(threshold: str, unit: str = "") -> str:
    """The limit without its warn band or the value's unit: '≥ 460 GB/s (warn below 480)' →
    '≥ 460' (the band is in the message of a row that warns, the unit in the value)."""
    limit = threshold.split(" (", 1)[0]
    return limit.removesuffix(" " + unit) if unit else limit


def _message(row: Row, quiet: frozenset[str] = QUIET) -> str:
    return "" if row.status in quiet else row.message


def wide_table(rows: Sequence[Row], headers: Headers, title: str | None = None,
               quiet: frozenset[str] = QUIET) -> Table:
    table = Table(title=title, title_justify="left")
    cols = _columns(headers)
    for _, name in cols:
        table.add_column(name)
    table.add_column(headers.message, overflow="fold")
    for r in rows:
        cells = {"subject": Text(r.subject), "check": Text(r.check), "status": _status(r.status),
                 "value": _value(r), "threshold": Text(r.threshold)}
        table.add_row(*(cells[key] for key, _ in cols), Text(_message(r, quiet)))
    return table


def _columns(headers: Headers) -> list[tuple[str, str]]:
    """(row field, column name) of the columns shown, message excluded."""
    return [(key, name) for key in ("subject", "check", "status", "value", "threshold")
            if (name := getattr(headers, key)) is not None]


def compact_table(rows: Sequence[Row], headers: Headers, title: str | None = None,
                  subject_width: int | None = None, check_width: int | None = None) -> Table:
    """No message column, a GPU named by its index (no bus id) and the limit without its warn
    band or unit; subject, check and limit may fold, status and value stay on one line.
    `subject_width` is the subject column's minimum, `check_width` the check's maximum (see
    `_compact`)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  padding=(0, 1, 0, 0))
    options = {"subject": {"overflow": "fold", "min_width": subject_width},
               "check": {"overflow": "fold", "max_width": check_width}, "status": {"no_wrap": True},
               "value": {"no_wrap": True}, "threshold": {"overflow": "fold"}}
    cols = _columns(headers)
    for key, name in cols:
        table.add_column(name, **options[key])
    for r in rows:
        cells = {"subject": Text(_short_subject(r.subject)), "check": Text(r.check), "status": _status(r.status),
                 "value": _value(r, EMULATED_SHORT), "threshold": Text(_limit(r.threshold, r.unit))}
        table.add_row(*(cells[key] for key, _ in cols))
    return table


def _width(out: Console, table: Table) -> int:
    """The widest line of `table` laid out for the console (uncropped: a table whose column
    minimums exceed the width comes out wider than the console)."""
    lines = Segment.split_lines(out.render(table, out.options))
    return max((Segment.get_line_length(line) for line in lines), default=0)


def _compact(out: Console, rows: Sequence[Row], headers: Headers, title: str | None) -> Table:
    """The compact table whose subject column is as wide as still fits the console (up to 24:
    'gpu-01 GPU 0 ↔ GPU 1' on one line, 56 such rows a node), so check names and limits (a
    few rows) fold before the subjects do."""
    longest = max((len(_short_subject(r.subject)) for r in rows), default=0)
    for width in range(min(24, longest), 5, -2):
        for check in (None, 14, 12, 10):
            table = compact_table(rows, headers, title, width, check)
            if _width(out, table) <= out.width:
                return table
    return compact_table(rows, headers, title)


def fits(out: Console, table: Table) -> bool:
    """True when every cell of `table` fits on one line at the console's width (measured
    without a width bound: measuring at the console's width would squeeze the columns)."""
    unbounded = out.options.update_width(1 << 20)
    return Measurement.get(out, unbounded, table).maximum <= out.width


def emulated_banner(rows: Sequence[Row]) -> Text | None:
    """'EMULATED: n of m figures …' when any row's figure is emulated, else None."""
    emulated = [r for r in rows if r.emulated]
    if not emulated:
        return None
    reasons = sorted({r.emulated for r in emulated})
    shown = "; ".join(reasons[:3]) + (f"; … ({len(reasons) - 3} more)" if len(reasons) > 3 else "")
    return Text.assemble(("EMULATED", "bold reverse magenta"),
                         f": {len(emulated)} of {len(rows)} figures (marked '{EMULATED_MARK}' or "
                         f"'{EMULATED_SHORT}') did not come from real hardware ({shown}). "
                         "Not a measurement of a customer's cluster; never an acceptance.")


def print_verdicts(out: Console, rows: Sequence[Row], headers: Headers | None = None,
                   title: str | None = None, quiet: frozenset[str] = QUIET) -> None:
    """Print `rows` as a wide table when it fits, else compact with the messages below. The
    message of a row whose status is in `quiet` is not shown (default: pass)."""
    headers = headers or Headers()
    banner = emulated_banner(rows)
    if banner is not None:
        out.print(banner)
    table = wide_table(rows, headers, title, quiet)
    if fits(out, table):
        out.print(table)
    else:
        out.print(_compact(out, rows, headers, title))
        loud = [r for r in rows if _message(r, quiet)]
        if loud:
            out.print(Text(f"{len(loud)} not passed:", style="bold"))
        for r in loud:
            status = Text(r.status.upper(), style=STYLE.get(r.status, ""))
            out.print(Text.assemble(status, " ", r.message, (" (emulated)" if r.emulated else "")))
    if banner is not None:
        out.print(banner)
