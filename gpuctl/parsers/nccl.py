"""nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, ...).

Both table layouts are read, driven by the column header rather than by position:

- current nccl-tests (2.13+): ``size count type redop root time algbw busbw #wrong``
  (out-of-place, then the same four for in-place);
- older nccl-tests: ``size count type redop time algbw busbw error`` (no root column;
  ``error`` holds a maximum error or ``N/A`` when validation is off).

Only a ``#wrong`` column counts wrong elements; an old-style ``error`` column is kept as
`NcclRow.oop_error` / `ip_error` and never counted as wrong.

Unusable output raises `ParseError`: empty text, a ``Test NCCL failure`` /
``Test CUDA failure`` line (a failed run: gpuctl does not return a half result for it),
a header without rows, or rows without the closing ``# Avg bus bandwidth`` line (a
truncated run). A ``NCCL WARN`` line alone does not fail a run whose table and average
are complete (NCCL warns about, e.g., a missing net plugin and carries on): it is kept in
`NcclResult.notes`, and named in the error when the run is unusable. NCCL INFO lines
printed inside the table are skipped; Open MPI ``--tag-output`` prefixes are removed.

Nodes are the distinct host names of the ``# Rank`` lines (a launcher may print only
some of them); the rank count is the largest ``nranks`` NCCL reports in its
``Init COMPLETE`` INFO lines when present, else the number of ``# Rank`` lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text, strip_mpi_tags, to_float, to_int

TOOL = "nccl-tests"

# "# nccl-tests version 2.17.6 nccl-headers=22501 nccl-library=22501"
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")
# "gpu-01:1946:1946 [0] NCCL INFO NCCL version 2.18.5+cuda12.2"  or  "NCCL version 2.21.5+cuda12.4"
_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+(?:\+cuda\d+\.\d+)?)")
# "# Collective test starting: all_reduce_perf"
_TEST_NAME = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
# "#  Rank  0 Group  0 Pid   1946 on inst-gpu-master device  0 [0000:0f:00] NVIDIA A100-SXM4-40GB"
# "#   Rank  0 Pid 112424 on localhost device  0 [0x00] A100-SXM4-40GB"
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s.*?\bon\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$")
# "#       size         count      type   redop    root     time   algbw   busbw  #wrong ..."
_HEADER = re.compile(r"^#\s+size\s+count\s+type\b")
# "# Avg bus bandwidth    : 233.168 "
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
# "# Out of bounds values : 0 OK"
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
# " 10737418240    2684354560     float     sum      -1  80646.8  133.14  233.00       0 ..."
_ROW = re.compile(r"^\s*\d+\s+\d+\s+\S+")
# "gpu-01:123:456 [0] NCCL WARN ..."  /  "Test NCCL failure common.cu:1234 'unhandled cuda error'"
_FAILURE = re.compile(r"Test (?:NCCL|CUDA) failure|Test failure")
_WARN = re.compile(r"NCCL WARN\s*(.*)$")
# "node-a:1234:1300 [0] NCCL INFO comm 0x55d0 rank 0 nranks 16 cudaDev 0 ... - Init COMPLETE"
_NRANKS = re.compile(r"\bnranks\s+(\d+)")


@dataclass(frozen=True)
class NcclRow:
    """One message size of the table (GB/s are 10^9 bytes per second, as nccl-tests prints)."""

    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    oop_time_us: float
    oop_algbw_gb_s: float
    oop_busbw_gb_s: float
    oop_wrong: int | None
    ip_time_us: float
    ip_algbw_gb_s: float
    ip_busbw_gb_s: float
    ip_wrong: int | None
    oop_error: float | None = None
    ip_error: float | None = None

    @property
    def busbw_gb_s(self) -> float:
        """Mean of the out-of-place and in-place bus bandwidth."""
        return (self.oop_busbw_gb_s + self.ip_busbw_gb_s) / 2


@dataclass(frozen=True)
class NcclRank:
    rank: int
    host: str
    device: int
    bus: str
    name: str


@dataclass(frozen=True)
class NcclResult:
    """A whole nccl-tests run.

    `avg_busbw_gb_s` is the tool's own ``# Avg bus bandwidth`` (over every size and both
    placements); `large_msg_busbw_gb_s` is the bus bandwidth at the largest size, which
    is what acceptance thresholds mean ("large messages"); with a single-size run the
    two agree. `wrong` sums every numeric ``#wrong`` value; `validated` is False when
    every wrong cell was ``N/A`` (validation off), so a zero proves nothing.
    """

    test: str | None
    rows: tuple[NcclRow, ...]
    avg_busbw_gb_s: float
    max_busbw_gb_s: float
    max_algbw_gb_s: float
    wrong: int
    validated: bool
    nccl_version: str | None
    nccl_tests_version: str | None
    ranks: tuple[NcclRank, ...]
    out_of_bounds: int | None
    nranks: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        """Number of ranks (one GPU each): NCCL's own ``nranks`` when it printed one, else
        the ``# Rank`` lines under ``# Using devices``."""
        return max(self.nranks or 0, len(self.ranks))

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.host for r in self.ranks))

    @property
    def nodes(self) -> int:
        """Distinct hosts in the ``# Rank`` lines (0 when none were printed)."""
        return len(self.hosts)

    @property
    def large_msg_busbw_gb_s(self) -> float:
        largest = max(self.rows, key=lambda r: r.size_bytes)
        return largest.busbw_gb_s

    @property
    def largest_size_bytes(self) -> int:
        return max(r.size_bytes for r in self.rows)


def _library_code_to_version(code: str) -> str:
    """nccl-library=22501 → '2.25.1' (NCCL_VERSION_CODE = major*10000 + minor*100 + patch)."""
    n = int(code)
    if n >= 10000:
        return f"{n // 10000}.{(n % 10000) // 100}.{n % 100}"
    return f"{n // 1000}.{(n % 1000) // 100}.{n % 100}"  # pre-2.9 codes: major*1000 + minor*100 + patch


def _wrong(token: str, line: str) -> int | None:
    if token == "N/A":
        return None
    return to_int(token, TOOL, line)


def _error(token: str, line: str) -> float | None:
    if token == "N/A":
        return None
    return to_float(token, TOOL, line)


def _header_columns(line: str) -> list[str]:
    return line.lstrip("#").split()


def _parse_row(columns: list[str], line: str) -> NcclRow:
    tokens = line.split()
    if len(tokens) != len(columns):
        raise ParseError(
            f"{TOOL}: row has {len(tokens)} fields, the header has {len(columns)}: {quote(line)}"
        )
    # Columns repeat (time/algbw/busbw twice); split them at the second "time".
    try:
        second = columns.index("time", columns.index("time") + 1)
    except ValueError:
        raise ParseError(f"{TOOL}: header without in-place columns: {quote(' '.join(columns))}") from None
    head = dict(zip(columns[:second], tokens[:second], strict=True))
    tail = dict(zip(columns[second:], tokens[second:], strict=True))
    oop_wrong = _wrong(head["#wrong"], line) if "#wrong" in head else None
    ip_wrong = _wrong(tail["#wrong"], line) if "#wrong" in tail else None
    return NcclRow(
        size_bytes=to_int(head["size"], TOOL, line),
        count=to_int(head["count"], TOOL, line),
        dtype=head["type"],
        redop=head.get("redop"),
        root=to_int(head["root"], TOOL, line) if "root" in head else None,
        oop_time_us=to_float(head["time"], TOOL, line),
        oop_algbw_gb_s=to_float(head["algbw"], TOOL, line),
        oop_busbw_gb_s=to_float(head["busbw"], TOOL, line),
        oop_wrong=oop_wrong,
        ip_time_us=to_float(tail["time"], TOOL, line),
        ip_algbw_gb_s=to_float(tail["algbw"], TOOL, line),
        ip_busbw_gb_s=to_float(tail["busbw"], TOOL, line),
        ip_wrong=ip_wrong,
        oop_error=_error(head["error"], line) if "error" in head else None,
        ip_error=_error(tail["error"], line) if "error" in tail else None,
    )


def parse_nccl_tests(text: str) -> NcclResult:
    """Parse the output of one nccl-tests binary (any collective)."""
    text = strip_mpi_tags(require_text(text, TOOL))
    columns: list[str] | None = None
    rows: list[NcclRow] = []
    ranks: list[NcclRank] = []
    avg: float | None = None
    oob: int | None = None
    tests_version: str | None = None
    library_version: str | None = None
    nccl_version: str | None = None
    test: str | None = None
    nranks: int | None = None
    warnings: list[str] = []
    for line in text.splitlines():
        if _FAILURE.search(line):
            raise ParseError(f"{TOOL}: the run failed: {quote(line)}")
        if m := _WARN.search(line):
            warnings.append("NCCL WARN " + m.group(1).strip())
            continue
        if m := _NCCL_VERSION.search(line):
            nccl_version = nccl_version or m.group(1)
        if " NCCL INFO " in line or line.startswith("NCCL INFO"):
            if m := _NRANKS.search(line):
                nranks = max(nranks or 0, int(m.group(1)))
            continue
        if m := _TESTS_VERSION.match(line):
            tests_version = m.group(1)
            if m.group(2):
                library_version = _library_code_to_version(m.group(2))
        elif m := _TEST_NAME.match(line):
            test = m.group(1)
        elif m := _RANK.match(line):
            ranks.append(NcclRank(int(m.group(1)), m.group(2), int(m.group(3)), m.group(4), m.group(5).strip()))
        elif _HEADER.match(line):
            columns = _header_columns(line)
        elif m := _AVG.match(line):
            avg = to_float(m.group(1), TOOL, line)
        elif m := _OOB.match(line):
            oob = int(m.group(1))
        elif columns is not None and avg is None and _ROW.match(line):
            rows.append(_parse_row(columns, line))
    warned = f"; it warned: {quote(warnings[0])}" if warnings else ""
    if columns is None:
        raise ParseError(f"{TOOL}: no results table (no '#  size  count  type ...' header) in the output{warned}")
    if not rows:
        raise ParseError(f"{TOOL}: the results table has a header but no rows (truncated run?){warned}")
    if avg is None:
        raise ParseError(
            f"{TOOL}: no '# Avg bus bandwidth' line after the last row "
            f"{quote(str(rows[-1].size_bytes) + ' bytes ...')} (truncated run?){warned}"
        )
    numeric_wrong = [w for r in rows for w in (r.oop_wrong, r.ip_wrong) if w is not None]
    return NcclResult(
        test=test,
        rows=tuple(rows),
        avg_busbw_gb_s=avg,
        max_busbw_gb_s=max(max(r.oop_busbw_gb_s, r.ip_busbw_gb_s) for r in rows),
        max_algbw_gb_s=max(max(r.oop_algbw_gb_s, r.ip_algbw_gb_s) for r in rows),
        wrong=sum(numeric_wrong),
        validated=bool(numeric_wrong),
        nccl_version=nccl_version or library_version,
        nccl_tests_version=tests_version,
        ranks=tuple(ranks),
        out_of_bounds=oob,
        nranks=nranks,
        notes=tuple(warnings),
    )
