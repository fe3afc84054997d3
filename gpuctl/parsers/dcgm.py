"""DCGM diagnostics: `dcgmi diag -r N` (table) and `dcgmi diag -r N -j` (JSON).

Each test gives one or more results: a status (pass, fail, warn, skip) for all GPUs or
for a list of GPUs, plus warning text. In the table, ``Warning`` and ``Error`` rows (and
unnamed ``Error: ...`` rows) attach to the result of the GPU they name, else to the last
result; unnamed rows after them continue the same message (the table wraps long text).
DCGM 4.x per-GPU rows (``GPU0: Pass`` under the test's row) are results for that GPU.
The table form prints ``Pass - All`` or ``Fail - GPU: 0`` with further GPUs on continuation rows; the JSON form is
``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
"results": [{"gpu_ids" | "gpu_id", "status", "warnings"?, "info"?}]}]}], "version"}}``
(DCGM 2.x/3.x; null entries between tests are skipped).

A diagnostic that did not run (``Error: ...``) or a table without any result raises
`ParseError`. A paste cut short (no closing border, no header, an elision line, a message
row whose test row was cut off) is read for what it holds and marked `partial`: a
``Fail - GPU: 0`` in a fragment is still a failure of GPU 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.parsers._common import noise_lines, quote, require_text

TOOL = "dcgmi diag"

_STATUS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip", "skipped": "skip",
           "not run": "skip"}


@dataclass(frozen=True)
class DcgmResult:
    status: str  # pass, fail, warn, skip
    gpus: tuple[int, ...] | None  # None: all GPUs
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcgmTest:
    category: str
    name: str
    results: tuple[DcgmResult, ...]

    @property
    def status(self) -> str:
        """The worst status of the test's results."""
        order = ("fail", "warn", "pass", "skip")
        return min((r.status for r in self.results), key=order.index)


@dataclass(frozen=True)
class DcgmResultSet:
    dcgm_version: str | None
    driver_version: str | None
    device_ids: tuple[str, ...]
    tests: tuple[DcgmTest, ...]
    # why the paste holds only part of the table (None: whole); what it holds is still judged
    partial: str | None = None

    @property
    def failed(self) -> tuple[DcgmTest, ...]:
        return tuple(t for t in self.tests if t.status == "fail")


def _status(raw: str, where: str) -> str:
    key = raw.strip().lower()
    if key not in _STATUS:
        raise ParseError(f"{TOOL}: unknown result {raw!r} in {where}")
    return _STATUS[key]


def _gpu_list(raw: str) -> tuple[int, ...] | None:
    raw = raw.strip()
    if not raw or raw.lower() == "all":
        return None
    ids = re.findall(r"\d+", raw)
    return tuple(int(i) for i in ids) if ids else None


def parse_dcgmi_diag(text: str) -> DcgmResultSet:
    """Parse `dcgmi diag` output; JSON if it contains a JSON object, else the table."""
    text = require_text(text, TOOL)
    if "{" in text and "DCGM GPU Diagnostic" in text:
        return parse_dcgmi_diag_json(text)
    return parse_dcgmi_diag_table(text)


# ---------------------------------------------------------------- table

# "|-----  Metadata  ----------+------------------------------------------------|"
# "+-----  Integration  -------+------------------------------------------------+"
_SECTION = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
# "| PCIe                      | Pass - All                                     |"
_ROW = re.compile(r"^\|\s*(.*?)\s*\|\s*(.*?)\s*\|\s*$")
# "Pass - All"  /  "Fail - GPU: 0, 1"  /  "Pass - GPUs: 1, 2, 3"  /  "Pass"  /  "Skip"
_RESULT = re.compile(r"^(Pass|Fail|Warn|Skip|Warning)(?:\s*-\s*(.*))?$", re.I)
# DCGM 4.x, a per-GPU row under the test's own: "|                           | GPU0: Pass      |"
_GPU_RESULT = re.compile(r"^(GPU\s*(\d+))\s*:\s*(Pass|Fail|Warn|Skip|Warning)\s*$", re.I)
# "+---------------------------+------------------------------------------------+"
_BORDER = re.compile(r"^\+[-=]+\+[-=]+\+\s*$")
# "Error: Unable to complete diagnostic for group 2. Return: (-21) Host engine connection invalid/disconnected."
_ERROR = re.compile(r"^\s*Error\b|Unable to|failed to|Host engine", re.I)
# "|                           | Error: GPU 1 has pending page retirements      |": a new
# message on a row without a name; any other unnamed text row continues the previous one
_NEW_MESSAGE = re.compile(r"^(?:Error|Warning|Info)\s*:", re.I)
# "GPU 1 Found 2 uncorrectable memory errors": the GPU a message is about
_MESSAGE_GPU = re.compile(r"\bGPU\s*:?\s*(\d+)\b")
# the test of a message row whose own row the paste does not hold
UNNAMED_TEST = "(test row not in the paste)"
_META = {"DCGM Version": "dcgm_version", "Driver Version Detected": "driver_version",
         "GPU Device IDs Detected": "device_ids"}


def _target(results: list[DcgmResult], message: str) -> int:
    """The index of the result `message` belongs to: the one covering the GPU it names,
    else the last one."""
    if m := _MESSAGE_GPU.search(message):
        gpu = int(m.group(1))
        for i, r in enumerate(results):
            if r.gpus is not None and gpu in r.gpus:
                return i
    return len(results) - 1


def _wrap_width(border: str) -> int | None:
    """The width at which dcgmi wraps the Result column: its border segment less three
    ("+---…---+<48 dashes>+" wraps at 45 characters: one space each side and one spare)."""
    parts = border.strip()[1:-1].split("+")
    return len(parts[-1]) - 3 if len(parts) >= 2 else None


def _cell(line: str) -> str:
    """The Result cell of a table row as printed, less the one space of padding after '|'."""
    inner = line.strip()
    cell = inner[1:-1].split("|", 1)[1] if inner.count("|") >= 3 else ""
    return cell[1:] if cell.startswith(" ") else cell


def parse_dcgmi_diag_table(text: str) -> DcgmResultSet:
    """Parse the table printed by `dcgmi diag -r N`; a cut paste is read and marked `partial`."""
    raw = text
    text = require_text(text, TOOL)
    meta: dict[str, str] = {}
    category = ""
    tests: list[tuple[str, str, list[DcgmResult]]] = []
    note = ""  # the kind of the last Warning/Error/Info row: its continuations follow it
    target: int | None = None  # the result the last message went to
    last_border_after_rows = False
    seen_table = False
    wrap_at: int | None = None  # the table's wrap width, from its border
    prev_full = False  # the last message row filled the column: its last word goes on
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if m := _SECTION.match(stripped):
            category = m.group(1).strip()
            seen_table = True
            wrap_at = _wrap_width(stripped)
            continue
        if _BORDER.match(stripped):
            seen_table = True
            last_border_after_rows = bool(tests)
            wrap_at = _wrap_width(stripped)
            continue
        if m := _ROW.match(stripped):
            seen_table = True
            last_border_after_rows = False
            if wrap_at is None and stripped.count("|") == 3:  # a fragment without a border: the cell's width
                wrap_at = len(stripped[1:-1].split("|")[1]) - 3
            name, value = m.group(1), m.group(2)
            if name == "Diagnostic" and value == "Result":  # the header row, not the level-3 test
                continue
            if category == "Metadata" or name in _META:
                if name in _META:
                    meta[_META[name]] = value
                continue
            if (r := _RESULT.match(value)) or (not name and (r := _GPU_RESULT.match(value))):
                gpus = (int(r.group(2)),) if r.re is _GPU_RESULT else _gpu_list(r.group(2) or "")
                result = DcgmResult(_status(r.group(1) if r.re is _RESULT else r.group(3), quote(line)), gpus)
                target, note = None, ""
                if name:
                    tests.append((category, name, [result]))
                elif tests:
                    tests[-1][2].append(result)
                else:
                    raise ParseError(f"{TOOL}: result row before any test: {quote(line)}")
            elif name.lower() in ("warning", "error") and value and not tests:
                # a paste that starts at a message row (its test row cut off): the message is a
                # result of a test the paste does not name, for the GPU it names
                gpu = _MESSAGE_GPU.search(value)
                status = "fail" if name.lower() == "error" else "warn"
                tests.append((category, UNNAMED_TEST, [DcgmResult(status, (int(gpu.group(1)),) if gpu else None,
                                                                  (value,))]))
                target, note = 0, name.lower()
            elif name.lower() in ("warning", "error", "info", "") and tests:
                results = tests[-1][2]
                if name or _NEW_MESSAGE.match(value):
                    note = name.lower() or "warning"
                    if note != "info" and value:
                        target = _target(results, value)
                        res = results[target]
                        results[target] = DcgmResult(res.status, res.gpus, (*res.warnings, value))
                elif value and note != "info" and target is not None and results[target].warnings:
                    # a continuation row: the rest of the previous message, wrapped by the table
                    # at a fixed width, mid-word ("… currently disab" + "led."): no space then
                    res = results[target]
                    glue = "" if prev_full and not _cell(line).startswith(" ") else " "
                    joined = f"{res.warnings[-1]}{glue}{value}"
                    results[target] = DcgmResult(res.status, res.gpus, (*res.warnings[:-1], joined))
                prev_full = wrap_at is not None and len(_cell(line).rstrip()) >= wrap_at
            elif name and tests and not value:
                continue
            else:
                raise ParseError(f"{TOOL}: cannot read the result {value!r} of {name!r}: {quote(line)}")
            continue
        if _ERROR.search(stripped):
            raise ParseError(f"{TOOL}: the diagnostic did not run: {quote(line)}")
    if not tests:
        raise ParseError(f"{TOOL}: no test results in the output" + ("" if seen_table else " (no table)"))
    partial = []
    if not last_border_after_rows:
        partial.append("the table has no closing border after its last row")
    if not meta and not any(_SECTION.match(x.strip()) for x in text.splitlines()):
        partial.append("no table header or section line")
    elided = [n for n, kind, _ in noise_lines(raw) if kind == "elision"]
    if elided:
        partial.append(f"elided at line {', '.join(map(str, elided))}")
    return DcgmResultSet(
        dcgm_version=meta.get("dcgm_version"),
        driver_version=meta.get("driver_version"),
        device_ids=tuple(d.strip() for d in meta.get("device_ids", "").split(",") if d.strip()),
        tests=tuple(DcgmTest(c, n, tuple(rs)) for c, n, rs in tests),
        partial="; ".join(partial) or None,
    )


# ---------------------------------------------------------------- JSON


def _texts(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        if isinstance(item, dict):
            out.append(str(item.get("warning") or item.get("message") or item))
        elif item is not None:
            out.append(str(item))
    return tuple(out)


def parse_dcgmi_diag_json(text: str) -> DcgmResultSet:
    """Parse `dcgmi diag -r N -j`."""
    text = require_text(text, TOOL)
    start = text.find("{")
    if start < 0:
        raise ParseError(f"{TOOL}: no JSON object in the output")
    try:
        doc = json.loads(text[start:])
    except ValueError as exc:
        raise ParseError(f"{TOOL}: JSON output is not valid ({exc}; truncated?)") from None
    body = doc.get("DCGM GPU Diagnostic") if isinstance(doc, dict) else None
    if not isinstance(body, dict):
        raise ParseError(f"{TOOL}: JSON without a 'DCGM GPU Diagnostic' object")
    if body.get("runtime_error"):
        raise ParseError(f"{TOOL}: the diagnostic did not run: {quote(str(body['runtime_error']))}")
    tests = []
    for cat in body.get("test_categories") or []:
        if not isinstance(cat, dict):
            continue
        for test in cat.get("tests") or []:
            if not isinstance(test, dict):
                continue
            results = []
            for r in test.get("results") or []:
                if not isinstance(r, dict):
                    continue
                ids = r.get("gpu_ids", r.get("gpu_id", ""))
                results.append(DcgmResult(
                    _status(str(r.get("status", "")), f"test {test.get('name')!r}"),
                    _gpu_list(str(ids)),
                    _texts(r.get("warnings")),
                ))
            if results:
                tests.append(DcgmTest(str(cat.get("category", "")), str(test.get("name", "?")), tuple(results)))
    if not tests:
        raise ParseError(f"{TOOL}: the JSON lists no test results")
    driver = body.get("Driver Version Detected") or body.get("driver_version")
    dev_ids = body.get("GPU Device IDs") or ""
    return DcgmResultSet(
        dcgm_version=str(body["version"]) if body.get("version") else None,
        driver_version=str(driver) if driver else None,
        device_ids=tuple(d.strip() for d in str(dev_ids).split(",") if d.strip()),
        tests=tuple(tests),
    )
