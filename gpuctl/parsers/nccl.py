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
a bare ``Test failure`` exit line unless the complete table shows wrong elements (then the
run is read and its data check fails in the verdict, naming the sizes),
a header without rows, or rows without the closing ``# Avg bus bandwidth`` line (a
truncated run). A ``NCCL WARN`` line alone does not fail a run whose table and average
are complete (NCCL warns about, e.g., a missing net plugin and carries on): it is kept in
`NcclResult.notes`, and named in the error when the run is unusable. NCCL INFO lines
printed inside the table are skipped; Open MPI ``--tag-output`` prefixes are removed.

Nodes are the distinct host names of the ``# Rank`` lines (a launcher may print only
some of them); the rank count is the largest ``nranks`` NCCL reports in its
``Init COMPLETE`` INFO lines when present, else the number of ``# Rank`` lines.

Line prefixes that launchers put before every line are removed before anything else:
a SkyPilot/Ray ``(head, rank=0, pid=3808) `` prefix, a ``srun -l`` task label
(``12: ``) and an Open MPI ``--tag-output`` tag (``[1,0]<stdout>:``), in that order,
each optional. The table itself never starts with any of them.

Several runs in one output (a script that calls nccl-tests more than once into one
log) are parsed apart: a run ends after its ``# Avg bus bandwidth`` line (and the
``#``/``# Collective test concluded`` lines that follow it), and a run header (``#
nccl-tests version``, ``# Collective test starting``, ``# nThread``) after a results
table also starts a new run. Each run must be complete on its own (a truncated or
failed run refuses the whole output: its figures are missing, so the log cannot pass).
The result of a multi-run output is the run with the lowest large-message bus bandwidth
(the judged figure), with every run in `NcclResult.runs` and a note listing each run's
average bus bandwidth; `gpuctl.verdicts.judge_nccl` judges every run on its own, so the
worst run decides and each verdict names its run. Figures are never mixed across runs.

The collective is identified from the best evidence, in this order: the ``# Collective
test starting: X_perf`` line nccl-tests prints; else one ``X_perf`` binary name on a
command line in the output (an ``mpirun ... all_gather_perf`` line, a shell prompt),
unless the table contradicts it; else the table itself: whether ``redop`` is a reduction
(``none``/``-``, or no ``redop`` column, is not), whether ``root`` is set, and whether
``size`` is ``count`` words (all_reduce, broadcast, reduce) or ``count`` words per rank
(reduce_scatter, all_gather). When the table leaves several collectives possible,
`NcclResult.collective` is None and `collective_candidates` lists them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text, strip_ansi, to_float, to_int

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
_FAILURE = re.compile(r"Test (?:NCCL|CUDA) failure")
# " .. gpu-1-1 pid 662195: Test failure common.cu:1189": nccl-tests exiting non-zero after any
# error, its own data check included (NVIDIA/nccl-tests#369: after '# Out of bounds values :
# 4 FAILED'). A run whose table is complete and shows wrong elements failed its data check,
# which the verdict says; with no wrong element the run failed for a reason not printed.
_EXIT_FAILURE = re.compile(r"\bTest failure\b")
_WARN = re.compile(r"NCCL WARN\s*(.*)$")
# "node-a:1234:1300 [0] NCCL INFO comm 0x55d0 rank 0 nranks 16 cudaDev 0 ... - Init COMPLETE"
_NRANKS = re.compile(r"\bnranks\s+(\d+)")
# Launcher prefixes, each optional, in this order (what follows is the tool's own line):
#   "(head, rank=0, pid=3808) "  "(worker1, rank=1, pid=2769, ip=10.100.10.12) "  (SkyPilot)
#   "(pid=4242) "  "(RayTrainWorker pid=4242, ip=10.0.0.5) "                     (Ray)
#   " 3: "  "12: "                                                               (srun -l / --label)
#   "[1,0]<stdout>:"  "[1,13]<stderr>:"                                          (mpirun --tag-output)
_PREFIX = re.compile(
    r"^(?:\((?:[\w.\-]+,?\s+)?(?:rank=\d+,\s*)?pid=\d+(?:,\s*ip=[0-9A-Fa-f.:]+)?\)\s?)?"
    r"(?:[ \t]*\d+:[ \t])?"
    r"(?:\[\d+,\d+\]<(?:stdout|stderr|stddiag)>:\s?)?"
)
# "(head, rank=0, pid=3808) [1,0]<stdout>:#       size         count      type   redop ..."
# (a results-table header anywhere in a line: found behind a prefix gpuctl does not know)
_HEADER_ANYWHERE = re.compile(r"#\s+size\s+count\s+type\b")
# A line that begins a run: "# nccl-tests version 2.18.3 ...", "# Collective test starting:
# all_reduce_perf", "# nThread 1 nGpus 1 minBytes 1024 maxBytes 8589934592 step: 2(factor) ..."
_RUN_START = re.compile(r"^#\s*(?:nccl-tests version\b|Collective test starting:|nThread\s+\d)")
# What may follow "# Avg bus bandwidth" and still belong to its run: "#", "",
# "# Collective test concluded: all_reduce_perf"
_RUN_TRAILER = re.compile(r"^\s*(?:#\s*(?:Collective test concluded:.*)?)?\s*$")
# A binary name on a command line: "mpirun ... /workspace/nccl-tests/build/all_reduce_perf -b 1K",
# "[root@test nccl-tests-master]# ./build/all_gather_perf -b 8 -e 128M", "all_reduce_perf_mpi"
_BINARY = re.compile(
    r"(?<![\w.\-])(?:\S*/)?(all_reduce|all_gather|alltoall|broadcast|reduce_scatter|reduce|sendrecv|hypercube"
    r"|gather|scatter)_perf(?:_mpi)?\b"
)

# Bytes per element of nccl-tests' type names (the "type" column: "float", "bfloat16", ...).
_WORD_BYTES = {"int8": 1, "uint8": 1, "char": 1, "int32": 4, "uint32": 4, "int": 4, "int64": 8, "uint64": 8,
               "half": 2, "float16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8, "bfloat16": 2,
               "f8e4m3": 1, "f8e5m2": 1}
# The reductions among the collectives (the others print redop "none").
_REDUCING = frozenset({"all_reduce", "reduce_scatter", "reduce"})
# redop cells of a collective without a reduction: "none" (nccl-tests 2.x), "-"
_NO_REDOP = frozenset({"none", "-", ""})


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

    `test` is the binary's name as the output gives it (``# Collective test starting``
    line, else a command line); `collective` is the collective without ``_perf``
    (``all_reduce``, ``all_gather``, ...) from the best evidence, None when it could not be
    told apart: `collective_candidates` are the collectives the evidence allows (empty when
    it contradicts itself) and `collective_evidence` says what it was.

    Of an output with several runs, the fields are those of one run, the one with the
    lowest large-message bus bandwidth; `runs` holds every run (each numbered in `run`).
    `runs` is empty for a single run.
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
    collective: str | None = None
    collective_candidates: tuple[str, ...] = ()
    collective_evidence: str = ""
    run: int | None = None
    runs: tuple[NcclResult, ...] = ()

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
    """A #wrong cell: an integer, or the %g form nccl-tests prints for large counts
    ("1.04858e+06"); None when validation was off ("N/A")."""
    if token == "N/A":
        return None
    if re.fullmatch(r"\d+(?:\.\d*)?[eE][+-]?\d+", token):
        return int(to_float(token, TOOL, line))
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


def _strip_prefix(line: str) -> str:
    return _PREFIX.sub("", line, count=1)


def _split_runs(lines: list[str]) -> list[list[str]]:
    """The lines of each run (see the module docstring); text after the last run that
    holds no run of its own stays with that run."""
    segments: list[list[str]] = [[]]
    closed = False  # the current segment has its "# Avg bus bandwidth" line
    tabled = False  # the current segment has a results-table header
    for line in lines:
        if (closed and not _RUN_TRAILER.match(line)) or (tabled and not closed and _RUN_START.match(line)):
            segments.append([])
            closed = tabled = False
        segments[-1].append(line)
        if _AVG.match(line):
            closed = True
        elif _HEADER.match(line):
            tabled = True
    runs: list[list[str]] = []
    for seg in segments:
        if runs and not any(_HEADER.match(x) or _RUN_START.match(x) for x in seg):
            runs[-1].extend(seg)
        else:
            runs.append(seg)
    return runs


def _name_to_collective(name: str) -> str:
    """'all_gather_perf' / 'all_reduce_perf_mpi' → 'all_gather'."""
    return name.removesuffix("_mpi").removesuffix("_perf")


def _table_collective(rows: list[NcclRow], columns: list[str]) -> tuple[tuple[str, ...], bool | None, str]:
    """The collectives the table's own columns allow: (candidates, whether it is a
    reduction or None when unknown, evidence)."""
    if "redop" in columns:
        ops = {(r.redop or "").lower() for r in rows}
        if ops <= _NO_REDOP:
            reducing, op_text = False, f"redop {'/'.join(sorted(ops)) or 'empty'} (no reduction)"
        elif not ops & _NO_REDOP:
            reducing, op_text = True, f"redop {'/'.join(sorted(ops))} (a reduction)"
        else:
            return (), None, f"the table mixes reductions and none in its redop column ({', '.join(sorted(ops))})"
    else:
        reducing, op_text = False, "no redop column (no reduction)"
    roots = sorted({-2 if r.root is None else r.root for r in rows})  # -2: no root column
    if roots == [-2]:
        rooted, root_text = False, "no root column"
    elif roots == [-1]:
        rooted, root_text = False, "root -1"
    elif roots[0] >= 0:
        rooted, root_text = True, "root " + "/".join(map(str, roots))
    else:
        return (), reducing, f"the table's root column mixes -1 and set roots ({', '.join(map(str, roots))})"
    # size = count x word bytes (whole buffer) or count x word bytes x ranks (per-rank count)
    ratios = {
        r.size_bytes / (r.count * _WORD_BYTES[r.dtype.lower()])
        for r in rows if r.count > 0 and r.dtype.lower() in _WORD_BYTES
    }
    per_rank: bool | None = None
    if len(ratios) == 1:
        ratio = ratios.pop()
        if ratio == 1:
            per_rank, size_text = False, "size = count x element size"
        elif ratio > 1 and ratio.is_integer():
            per_rank, size_text = True, f"size = count x element size x {int(ratio)} ranks"
        else:
            size_text = f"size / (count x element size) = {ratio:g}"
    else:
        size_text = "size and count do not show whether count is per rank"
    evidence = f"the table: {op_text}, {root_text}, {size_text}"
    if reducing:
        candidates = ("reduce",) if rooted else {False: ("all_reduce",), True: ("reduce_scatter",),
                                                 None: ("all_reduce", "reduce_scatter")}[per_rank]
    elif rooted:
        candidates = {False: ("broadcast",), True: ("gather", "scatter"),
                      None: ("broadcast", "gather", "scatter")}[per_rank]
    else:
        # alltoall prints a per-rank count in some nccl-tests versions and the whole one in others
        candidates = {False: ("sendrecv", "alltoall"), True: ("all_gather", "alltoall"),
                      None: ("all_gather", "alltoall", "sendrecv")}[per_rank]
    if len(candidates) == 1:
        return candidates, reducing, evidence
    return candidates, reducing, f"{evidence}: one of {', '.join(candidates)}"


def _identify(started: str | None, binaries: list[str], rows: list[NcclRow],
              columns: list[str]) -> tuple[str | None, tuple[str, ...], str]:
    """(test, the collectives it can be, evidence) from the starting line, a command line,
    the table."""
    if started:
        return started, (_name_to_collective(started),), f"'# Collective test starting: {started}'"
    table, reducing, table_evidence = _table_collective(rows, columns)
    names = list(dict.fromkeys(binaries))
    if len(names) == 1:
        name = names[0]
        coll = _name_to_collective(name)
        # only a redop column tells a reduction for sure (old outputs of some tests lack it)
        if "redop" in columns and reducing is not None and reducing != (coll in _REDUCING):
            kind = "a reduction" if reducing else "no reduction"
            return None, (), (f"the command line names {name} but {table_evidence} ({kind}, so not "
                              f"{coll}); the collective is not known")
        return name, (coll,), f"the binary name {name} on a command line in the output"
    extra = f"; command lines name {', '.join(names)}" if names else ""
    return None, table, table_evidence + extra


def _parse_run(lines: list[str]) -> NcclResult:
    """Parse the lines of one nccl-tests run."""
    columns: list[str] | None = None
    rows: list[NcclRow] = []
    ranks: list[NcclRank] = []
    avg: float | None = None
    oob: int | None = None
    tests_version: str | None = None
    library_version: str | None = None
    nccl_version: str | None = None
    test: str | None = None
    binaries: list[str] = []
    nranks: int | None = None
    warnings: list[str] = []
    hidden_header: str | None = None
    exit_failure: str | None = None
    for line in lines:
        if _FAILURE.search(line):
            raise ParseError(f"{TOOL}: the run failed: {quote(line)}")
        if _EXIT_FAILURE.search(line):
            exit_failure = exit_failure or line
            continue
        if m := _WARN.search(line):
            warnings.append("NCCL WARN " + m.group(1).strip())
            continue
        if m := _NCCL_VERSION.search(line):
            nccl_version = nccl_version or m.group(1)
        if " NCCL INFO " in line or line.startswith("NCCL INFO"):
            if m := _NRANKS.search(line):
                nranks = max(nranks or 0, int(m.group(1)))
            continue
        binaries.extend(m.group(1) + "_perf" for m in _BINARY.finditer(line))
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
        elif hidden_header is None and _HEADER_ANYWHERE.search(line):
            hidden_header = line
    warned = f"; it warned: {quote(warnings[0])}" if warnings else ""
    if columns is None:
        behind = ""
        if hidden_header is not None:
            behind = (f"; a table header was found behind a line prefix gpuctl does not know: "
                      f"{quote(hidden_header)} (remove the prefix, e.g. with sed)")
        raise ParseError(
            f"{TOOL}: no results table (no '#  size  count  type ...' header) in the output{behind}{warned}"
        )
    if not rows:
        raise ParseError(f"{TOOL}: the results table has a header but no rows (truncated run?){warned}")
    if avg is None:
        raise ParseError(
            f"{TOOL}: no '# Avg bus bandwidth' line after the last row "
            f"{quote(str(rows[-1].size_bytes) + ' bytes ...')} (truncated run?){warned}"
        )
    test, candidates, evidence = _identify(test, binaries, rows, columns)
    numeric_wrong = [w for r in rows for w in (r.oop_wrong, r.ip_wrong) if w is not None]
    if exit_failure is not None:
        if not sum(numeric_wrong) and not oob:
            raise ParseError(f"{TOOL}: the run failed: {quote(exit_failure)}{warned}")
        warnings.append(f"nccl-tests exited with {quote(exit_failure)} after its data check failed")
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
        collective=candidates[0] if len(candidates) == 1 else None,
        collective_candidates=candidates,
        collective_evidence=evidence,
    )


def _size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def parse_nccl_tests(text: str) -> NcclResult:
    """Parse the output of nccl-tests (any collective; one run or several, see the module
    docstring)."""
    # noise kept: a command line names the binary (the collective); other noise lines are ignored below
    lines = [_strip_prefix(line) for line in require_text(text, TOOL, keep_noise=True).splitlines()]
    chunks = _split_runs(lines)
    if len(chunks) == 1:
        return _parse_run(chunks[0])
    runs: list[NcclResult] = []
    for i, chunk in enumerate(chunks, 1):
        try:
            runs.append(replace(_parse_run(chunk), run=i))
        except ParseError as exc:
            raise ParseError(f"run {i} of {len(chunks)} in this output: {exc}") from None
    worst = min(runs, key=lambda r: r.large_msg_busbw_gb_s)  # the first of equals
    listing = "; ".join(
        f"run {r.run} {r.test or r.collective or 'collective not identified'}: avg busbw {r.avg_busbw_gb_s:g} GB/s, "
        f"{r.large_msg_busbw_gb_s:.2f} GB/s at {_size(r.largest_size_bytes)}, {r.gpus} ranks"
        for r in runs
    )
    summary = (f"{len(runs)} nccl-tests runs in this output ({listing}); each run is judged on its own; "
               f"the figures shown are run {worst.run}'s (the lowest large-message bus bandwidth)")
    notes = (summary, *dict.fromkeys(n for r in runs for n in r.notes))
    return replace(worst, notes=notes, runs=tuple(runs))


# NCCL failures as a framework reports them (PyTorch's ProcessGroupNCCL):
#   "torch.distributed.DistBackendError: NCCL error in: .../ProcessGroupNCCL.cpp:1333, unhandled system error ..."
#   "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error."
#   "socketStartConnect: Connect to 192.168.19.14<52822> failed : No route to host"   (after "Last error:")
_FRAMEWORK_ERROR = re.compile(r"(NCCL error\b.*|\bnccl[A-Z]\w*Error:.*)$")
# torchrun puts "[rank3]:" before each line a worker writes to stderr
_TORCH_RANK = re.compile(r"^\[rank\d+\]:\s?")


def nccl_problems(text: str) -> tuple[str, ...]:
    """The NCCL warnings and errors anywhere in a log that is not an nccl-tests table (a
    training job's output): each ``NCCL WARN`` line as "NCCL WARN <text>", each framework
    ``NCCL error ...`` / ``nccl…Error: ...`` line, and the line after a ``Last error:``; in
    order, without repeats. Launcher prefixes are removed as for nccl-tests output, and
    torchrun's ``[rankN]:``."""
    found: list[str] = []
    lines = [_TORCH_RANK.sub("", _strip_prefix(line)) for line in strip_ansi(text or "").splitlines()]
    for i, line in enumerate(lines):
        if m := _WARN.search(line):
            found.append("NCCL WARN " + m.group(1).strip())
        elif m := _FRAMEWORK_ERROR.search(line):
            found.append(m.group(1).strip())
        elif line.strip() == "Last error:" and i + 1 < len(lines) and lines[i + 1].strip():
            found.append("Last error: " + lines[i + 1].strip())
    return tuple(dict.fromkeys(found))
