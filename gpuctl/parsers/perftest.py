"""perftest: `ib_write_bw` (and the other `*_bw`) and `ib_write_lat` (and `*_lat`).

Units. perftest's ``BW average[MB/sec]`` divides bytes by 0x100000 (2^20: perftest's
"MB" is a MiB), and ``--report_gbits`` (``[Gb/sec]``) divides bits by 10^9
(``format_factor = (report_fmt == MBS) ? 0x100000 : 125000000`` in perftest's
``perftest_parameters.c``; its usage text: "MB=2^20 byte, while Gb=10^9 bits"; since
linux-rdma/perftest#257 (2024) the header says ``MiB/sec``). Both are converted to Gb/s (10^9 bits per second), the unit
link rates and the `ib_write_bw_gbit_s` thresholds use: Gb/s = MB/sec × 2^20 × 8 / 10^9.

Output from the server and the client concatenated, or interleaved line by line, repeats
rows; duplicates are dropped. The headline figures are taken at the largest message size:
`bw_avg_gbit_s` is the lowest average reported for that size (server and client may
differ), `bw_peak_gbit_s` the highest peak of any row.

Rails. Two runs of the same test on different rails (``-d mlx5_0`` and ``-d mlx5_1``, or
one device with two GID indexes) pasted one after the other are told apart by the
``Device`` and ``GID index`` lines after each banner: the first is the result, the others
are in `BwResult.rails`, each judged on its own (a server's and a client's report of one
run share the rail and are merged). Runs printed into one stream at the same time
(banner, banner, then rows of both) cannot be told apart row by row: the result names
the rails its rows mix (`mixed_with`) and its figures are the lowest of them.

Bidirectional runs (``-b``; banner ``RDMA_Write Bidirectional BW Test``). Each side
sends, and the row perftest prints is the SUM of both directions: ``print_full_bw_report``
adds the peer's report to its own (``bw_avg += rem_bw_rep->bw_avg``). `BwResult.bidirectional`
says so and `bw_avg_gbit_s` stays the figure as printed; `bw_avg_per_direction_gbit_s`
is what a per-port (one-direction) threshold can be compared with: each direction's own
figure when ``--report_both`` printed them ("Local results" / "Remote results"), else
the mean of the two (half the sum; how the sum splits between the directions is not in
the output). Not covered: ``ib_send_bw -b -D`` and ``--run_infinitely`` print only this
side's direction (``print_report_bw`` passes no peer report there), which the output does
not mark; a bidirectional send section is read as a sum like the others.

Peak not measured. In duration mode (``-D``), with ``--run_infinitely`` or ``-N`` perftest
does not measure the peak and prints ``BW peak`` as 0.00 (``peak_up = !(noPeak) * ...``),
announcing ``WARNING: BW peak won't be measured in this run.``; such a peak is None, not 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text, to_float

TOOL_BW = "ib_write_bw"
TOOL_LAT = "ib_write_lat"

MIB = 1 << 20
_MBS_TO_GBITS = MIB * 8 / 1e9

# " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
# " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
_BW_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(MB|Gb|MiB)/sec\]\s+BW average\[(MB|Gb|MiB)/sec\]")
# " 8388608    20000            24056.74            24056.72\t\t   0.003007"
_BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
# " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec] ..."
_LAT_HEADER = re.compile(r"#bytes\s+#iterations\s+t_min\[usec\]")
# " 2       1000          1.57           9.65         1.84     \t       2.04  ..."
_LAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)((?:\s+[\d.]+)+)\s*$")
# " Couldn't connect to 10.0.0.2:18515"  /  "Unable to open file descriptor for socket connection"
_ERROR = re.compile(r"Couldn't|Unable to|Failed to|failed to|\bERROR\b|Error:|No IB devices found")
# " WARNING: BW peak won't be measured in this run." (-D, --run_infinitely, -N)
_NO_PEAK = re.compile(r"BW peak won't be measured")
# "[vultr@Aliyun3 ~]$ sudo ib_write_bw -b  -d ionic_1 --gid-index 1 -F --report_gbits -a -n 5000 -q 4"
_CMD_BIDIRECTIONAL = re.compile(r"\bib_\w+_bw\b.*\s(?:-b|--bidirectional)(?:\s|$)")
# " Local results: " / " Remote results: " (-b --report_both: each side's own direction)
_REPORT_BOTH = re.compile(r"^\s*(Local|Remote) results:\s*$")


@dataclass(frozen=True)
class BwRow:
    size_bytes: int
    iterations: int
    peak_gbit_s: float | None  # None: perftest did not measure the peak (printed 0.00)
    avg_gbit_s: float
    msg_rate_mpps: float


def _avg_at_largest(rows: tuple[BwRow, ...]) -> float:
    size = max(r.size_bytes for r in rows)
    return min(r.avg_gbit_s for r in rows if r.size_bytes == size)


@dataclass(frozen=True)
class BwResult:
    reported_unit: str  # "MB/sec" (2^20 bytes) or "Gb/sec" as the tool printed
    rows: tuple[BwRow, ...]
    device: str | None
    link_type: str | None
    test: str | None = None  # "ib_write_bw", "ib_read_bw", ... from the section banner
    others: tuple[BwResult, ...] = ()  # the other tests of the same session, each named
    bidirectional: bool = False  # -b: every row is the sum of both directions
    local_rows: tuple[BwRow, ...] = ()  # -b --report_both: this side sending, alone
    remote_rows: tuple[BwRow, ...] = ()  # -b --report_both: the peer sending, alone
    gid_index: str | None = None  # " GID index : 5" of RoCE runs
    rails: tuple[BwResult, ...] = ()  # the same test on other rails (device / GID) in this output
    # rails whose header was printed but whose rows are mixed into this result's (two runs
    # printing into one terminal at once): its figures are then the lowest of those rails
    mixed_with: tuple[str, ...] = ()

    @property
    def rail(self) -> str | None:
        """The rail this result ran on: "mlx5_1", "mlx5_1 GID 5" (None when not printed)."""
        if self.device is None:
            return None
        return self.device + (f" GID {self.gid_index}" if self.gid_index is not None else "")

    @property
    def label(self) -> str:
        """The test's name, marked when bidirectional ("ib_write_bw_bidirectional")."""
        return f"{self.test or 'bw'}{'_bidirectional' if self.bidirectional else ''}"

    @property
    def msg_size_bytes(self) -> int:
        return max(r.size_bytes for r in self.rows)

    @property
    def bw_avg_gbit_s(self) -> float:
        """As printed, at the largest size: for a bidirectional run the SUM of both directions."""
        return _avg_at_largest(self.rows)

    @property
    def bw_peak_gbit_s(self) -> float | None:
        """The highest peak of any row; None when perftest measured none (duration mode)."""
        peaks = [r.peak_gbit_s for r in self.rows if r.peak_gbit_s is not None]
        return max(peaks) if peaks else None

    @property
    def direction_avgs_gbit_s(self) -> tuple[float, float] | None:
        """(local, remote) averages at the largest size when ``--report_both`` printed them."""
        if not (self.local_rows and self.remote_rows):
            return None
        return _avg_at_largest(self.local_rows), _avg_at_largest(self.remote_rows)

    @property
    def bw_avg_per_direction_gbit_s(self) -> float:
        """One direction's bandwidth: the figure itself for a unidirectional run; for a
        bidirectional one the weaker direction when ``--report_both`` gave both, else the
        mean of the two (half the printed sum)."""
        if not self.bidirectional:
            return self.bw_avg_gbit_s
        both = self.direction_avgs_gbit_s
        return min(both) if both else self.bw_avg_gbit_s / 2


# " Dual-port       : OFF\t\tDevice         : ib0"
_DEVICE = re.compile(r"Device\s*:\s*(\S+)")
# " Link type       : IB"
_LINK_TYPE = re.compile(r"Link type\s*:\s*(\S+)")


def _first_error(lines: list[str]) -> str | None:
    return next((ln for ln in lines if _ERROR.search(ln)), None)


# The banner that opens each test's section (perftest's ctx_print_test_info: verb, atomic
# type, "Bidirectional" with -b, "Post List" with -l, "BW"):
# "                    RDMA_Write BW Test"
# "                    RDMA_Write Bidirectional BW Test"
# "                    Atomic FETCH_AND_ADD BW Test"
_BW_BANNER = re.compile(
    r"^\s*(RDMA_Write_imm|RDMA_Write|RDMA_Read|Send|Atomic)(?:\s+(?:CMP_AND_SWAP|FETCH_AND_ADD))?"
    r"(\s+Bidirectional)?(?:\s+Post List)?\s+BW(?:\s+forwarding)?(?:\s+Multicast)?\s+Test\s*$")
_BANNER_TEST = {"RDMA_Write_imm": "ib_write_bw", "RDMA_Write": "ib_write_bw", "RDMA_Read": "ib_read_bw",
                "Send": "ib_send_bw", "Atomic": "ib_atomic_bw"}


# " GID index       : 3"
_GID_INDEX = re.compile(r"GID index\s*:\s*(\d+)", re.I)


@dataclass
class _Section:
    test: str | None = None
    bidirectional: bool = False
    gid: str | None = None
    no_peak: bool = False
    unit: str | None = None
    rows: list[BwRow] = field(default_factory=list)
    local: list[BwRow] = field(default_factory=list)
    remote: list[BwRow] = field(default_factory=list)
    device: str | None = None
    link_type: str | None = None
    # other rails whose Device/GID lines came into this section before its table: runs
    # printing into one stream at once
    mixed: list[str] = field(default_factory=list)

    def key(self) -> tuple[str | None, bool, str | None, str | None]:
        """What makes a run its own: the test, its direction and its rail (device, GID)."""
        return self.test, self.bidirectional, self.device, self.gid


def parse_ib_write_bw(text: str) -> BwResult:
    """Parse `ib_write_bw` (or `ib_read_bw`, `ib_send_bw`) output, server and/or client.

    A session that ran several tests (``ib_read_bw`` then ``ib_write_bw``) is split at each
    test's banner (``RDMA_Read BW Test``, ...): the result is the unidirectional
    ``ib_write_bw`` section when there is one, else the bidirectional one, else the first;
    the other sections are in `BwResult.others`. A bidirectional section is told by its
    banner; output without a banner is bidirectional when the ``ib_*_bw`` command line in
    it has ``-b``/``--bidirectional``."""
    text = require_text(text, TOOL_BW, keep_noise=True)  # "-b" on the command line says bidirectional
    lines = text.splitlines()
    sections: list[_Section] = [_Section()]
    cur = sections[0]
    part = cur.rows  # where rows go: the section's own, or its --report_both local/remote
    no_peak = False  # the peak warning is printed before the banner of its run
    bidir_cmd = False

    def settle() -> None:
        """Fold `cur` into an earlier section of the same test and rail (the server's and
        the client's report of one run): a new rail starts only for another device/GID."""
        nonlocal cur, part
        twin = next((o for o in sections if o is not cur and o.key() == cur.key()), None)
        if twin is not None and not cur.rows and cur.unit is None:
            del sections[next(i for i, o in enumerate(sections) if o is cur)]  # by identity: sections compare equal
            twin.no_peak = twin.no_peak or cur.no_peak
            cur, part = twin, twin.rows

    for line in lines:
        if m := _BW_BANNER.match(line):
            if not sections[0].rows and sections[0].unit is None and sections[0].test is None \
                    and sections[0].device is None:
                del sections[0]  # the empty preamble before the first banner
            cur = _Section(_BANNER_TEST[m.group(1)], bool(m.group(2)))
            sections.append(cur)
            cur.no_peak, no_peak, part = no_peak, False, cur.rows
        elif _NO_PEAK.search(line):
            no_peak = True
        elif _CMD_BIDIRECTIONAL.search(line):
            bidir_cmd = True  # the banner, where there is one, decides
        elif m := _REPORT_BOTH.match(line):
            part = cur.local if m.group(1) == "Local" else cur.remote
        elif m := _BW_HEADER.search(line):
            if cur.unit is not None and m.group(2) != cur.unit:
                raise ParseError(f"{TOOL_BW}: mixed units in one output: {quote(line)}")
            cur.unit = m.group(2)
        elif cur.unit is not None and (m := _BW_ROW.match(line)):
            factor = 1.0 if cur.unit == "Gb" else _MBS_TO_GBITS
            cur.no_peak, no_peak = cur.no_peak or no_peak, False
            peak = to_float(m.group(3), TOOL_BW, line) * factor
            avg = to_float(m.group(4), TOOL_BW, line) * factor
            row = BwRow(
                size_bytes=int(m.group(1)),
                iterations=int(m.group(2)),
                # a peak of 0.00 under a non-zero average is one perftest did not measure
                peak_gbit_s=None if cur.no_peak or (peak == 0 and avg > 0) else peak,
                avg_gbit_s=avg,
                msg_rate_mpps=to_float(m.group(5), TOOL_BW, line),
            )
            if row not in part:
                part.append(row)
        elif m := _DEVICE.search(line):
            if cur.device is None:
                cur.device = m.group(1)
                if cur.test is not None:
                    settle()
            elif m.group(1) != cur.device and cur.unit is None:
                cur.mixed.append(m.group(1))
        elif cur.unit is None and (m := _GID_INDEX.search(line)):
            if cur.gid is None:
                cur.gid = m.group(1)
                settle()
            elif m.group(1) != cur.gid:
                cur.mixed.append(f"{cur.device or '?'} GID {m.group(1)}")
        elif cur.link_type is None and (m := _LINK_TYPE.search(line)):
            cur.link_type = m.group(1)
    if bidir_cmd:
        for sec in sections:
            if sec.test is None:
                sec.bidirectional = True
    done = [BwResult(f"{sec.unit}/sec", tuple(sec.rows), sec.device, sec.link_type, sec.test,
                     bidirectional=sec.bidirectional, local_rows=tuple(sec.local), remote_rows=tuple(sec.remote),
                     gid_index=sec.gid)
            for sec in sections if sec.unit is not None and sec.rows]
    if not done:
        err = _first_error(lines)
        if err:
            raise ParseError(f"{TOOL_BW}: the test did not run: {quote(err)}")
        unit_seen = any(sec.unit is not None for sec in sections)
        what = "a header but no rows" if unit_seen else "no '#bytes #iterations BW peak[...] BW average[...]' header"
        raise ParseError(f"{TOOL_BW}: {what} in the output (truncated run?)")
    main = next((r for r in done if r.test == TOOL_BW and not r.bidirectional),
                next((r for r in done if r.test == TOOL_BW), done[0]))
    # the same test on another rail (device/GID) is judged on its own; other tests are kept
    rails = tuple(r for r in done if r is not main and (r.test, r.bidirectional) == (main.test, main.bidirectional))
    # a rail whose banner and device were printed but whose rows went to another rail's
    # section: the runs printed into one stream at once, rows cannot be told apart
    mixed = tuple(dict.fromkeys([
        *((sec.device or "?") + (f" GID {sec.gid}" if sec.gid is not None else "") for sec in sections
          if sec.test == main.test and sec.device is not None and not sec.rows and sec.unit is None),
        *(x for sec in sections if sec.test == main.test and sec.rows for x in sec.mixed)]))
    if mixed:
        main = replace(main, mixed_with=mixed)
    return replace(main, rails=rails,
                   others=tuple(r for r in done if r is not main and all(r is not x for x in rails)))


@dataclass(frozen=True)
class LatRow:
    """One message size, all in microseconds; columns absent in older perftest are None."""

    size_bytes: int
    iterations: int
    t_min_us: float
    t_max_us: float
    t_typical_us: float
    t_avg_us: float | None
    t_stdev_us: float | None
    t_p99_us: float | None
    t_p999_us: float | None


@dataclass(frozen=True)
class LatResult:
    rows: tuple[LatRow, ...]

    @property
    def headline(self) -> LatRow:
        """The smallest message size (2 bytes by default): the latency a threshold means."""
        return min(self.rows, key=lambda r: r.size_bytes)


# Column names in the header, in the order perftest prints them.
_LAT_COLUMNS = re.compile(r"(t_min|t_max|t_typical|t_avg|t_stdev|99% percentile|99\.9% percentile)\[usec\]")
_LAT_FIELD = {
    "t_min": "t_min_us", "t_max": "t_max_us", "t_typical": "t_typical_us", "t_avg": "t_avg_us",
    "t_stdev": "t_stdev_us", "99% percentile": "t_p99_us", "99.9% percentile": "t_p999_us",
}


def parse_ib_write_lat(text: str) -> LatResult:
    """Parse `ib_write_lat` (or `ib_read_lat`, `ib_send_lat`) output."""
    text = require_text(text, TOOL_LAT)
    lines = text.splitlines()
    columns: list[str] | None = None
    rows: list[LatRow] = []
    for line in lines:
        if _LAT_HEADER.search(line):
            columns = _LAT_COLUMNS.findall(line)
            for needed in ("t_min", "t_max", "t_typical"):
                if needed not in columns:
                    raise ParseError(f"{TOOL_LAT}: header without {needed}: {quote(line)}")
        elif columns is not None and (m := _LAT_ROW.match(line)):
            values = m.group(3).split()
            if len(values) != len(columns):
                raise ParseError(f"{TOOL_LAT}: {len(values)} values for {len(columns)} columns: {quote(line)}")
            kw: dict[str, float | None] = dict.fromkeys(_LAT_FIELD.values())
            for col, val in zip(columns, values, strict=True):
                kw[_LAT_FIELD[col]] = to_float(val, TOOL_LAT, line)
            row = LatRow(size_bytes=int(m.group(1)), iterations=int(m.group(2)), **kw)  # type: ignore[arg-type]
            if row not in rows:
                rows.append(row)
    if columns is None or not rows:
        err = _first_error(lines)
        if err:
            raise ParseError(f"{TOOL_LAT}: the test did not run: {quote(err)}")
        what = "no '#bytes #iterations t_min[usec] ...' header" if columns is None else "a header but no rows"
        raise ParseError(f"{TOOL_LAT}: {what} in the output (truncated run?)")
    return LatResult(tuple(rows))
