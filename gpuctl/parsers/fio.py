"""fio: `--output-format=json` (preferred) and the normal text report.

Bandwidth is kept in bytes per second and offered in two clearly named units:
`*_gb_s` (10^9 bytes/s, the unit of the `fio_seqwrite_gb_s` threshold) and `*_mib_s`
(2^20 bytes/s, the unit fio prints). Latency is in microseconds. With several jobs
(no `group_reporting`) IOPS and bandwidth are summed over jobs.

The workload (`FioJob.rw`) and where it was read (`FioJob.rw_source`): in JSON the job's
or the global options, else fio's default ``read``; in text the job definition line
(``name: (g=0): rw=randread, bs=...``). A text report published without those lines
still names the workload in one of two ways, tried in this order and kept only when it
agrees with the directions the job measured (its ``read:``/``write:`` lines): a single
``rw=`` value elsewhere in the text (the command line, a job file), or the job's name
(``randread``, ``rand-read-4k``, ``seqwrite``). Otherwise `rw` is None: the figures
cannot be told apart as random or sequential, and the judge says it cannot judge them.

Whether the figure measures the disk: `FioJob.ioengine` and `FioJob.direct`. JSON lists
the options a run was given; without ``direct=1`` (or ``buffered=0``) fio ran buffered,
its default, so `direct` is False. The text report prints the engine on the job
definition line but never ``direct=``, so there `direct` is None (unknown).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text, to_float

TOOL = "fio"

GB = 1e9
MIB = float(1 << 20)


@dataclass(frozen=True)
class FioDirection:
    """One direction (read or write) of one job."""

    iops: float
    bw_bytes_s: float
    io_bytes: int | None
    lat_mean_us: float | None
    p99_us: float | None

    @property
    def bw_gb_s(self) -> float:
        return self.bw_bytes_s / GB


# Where `FioJob.rw` was read (see the module docstring).
RW_JOB_DEFINITION = "job definition"
RW_JOB_OPTIONS = "job options"
RW_GLOBAL_OPTIONS = "global options"
RW_FIO_DEFAULT = "fio default"
RW_IN_TEXT = "rw= in the output"
RW_JOB_NAME = "job name"
RW_INFERRED = (RW_IN_TEXT, RW_JOB_NAME)

# fio's rw= values and the directions each one measures
RW_DIRECTIONS: dict[str, frozenset[str]] = {
    "read": frozenset({"read"}), "randread": frozenset({"read"}),
    "write": frozenset({"write"}), "randwrite": frozenset({"write"}),
    "rw": frozenset({"read", "write"}), "readwrite": frozenset({"read", "write"}),
    "randrw": frozenset({"read", "write"}),
    "trim": frozenset({"trim"}), "randtrim": frozenset({"trim"}),
    "trimwrite": frozenset({"trim", "write"}), "randtrimwrite": frozenset({"trim", "write"}),
}


@dataclass(frozen=True)
class FioJob:
    name: str
    rw: str | None  # randread, write, randrw, ...; None: the output does not say
    block_size: str | None
    read: FioDirection | None
    write: FioDirection | None
    ioengine: str | None = None  # None: not printed (fio's default engine is psync)
    direct: bool | None = None  # O_DIRECT; None: not printed (text output)
    rw_source: str | None = None  # RW_JOB_DEFINITION, RW_JOB_OPTIONS, ... (None with rw None)

    @property
    def directions(self) -> frozenset[str]:
        """The directions this job measured ("read", "write")."""
        return frozenset(d for d in ("read", "write") if getattr(self, d) is not None)


@dataclass(frozen=True)
class FioResult:
    fio_version: str | None
    jobs: tuple[FioJob, ...]

    def _sum(self, direction: str, attr: str) -> float:
        total = 0.0
        for job in self.jobs:
            d = getattr(job, direction)
            if d is not None:
                total += getattr(d, attr)
        return total

    @property
    def read_iops(self) -> float:
        return self._sum("read", "iops")

    @property
    def write_iops(self) -> float:
        return self._sum("write", "iops")

    @property
    def read_bw_bytes_s(self) -> float:
        return self._sum("read", "bw_bytes_s")

    @property
    def write_bw_bytes_s(self) -> float:
        return self._sum("write", "bw_bytes_s")

    @property
    def read_bw_gb_s(self) -> float:
        return self.read_bw_bytes_s / GB

    @property
    def write_bw_gb_s(self) -> float:
        return self.write_bw_bytes_s / GB

    @property
    def read_bw_mib_s(self) -> float:
        return self.read_bw_bytes_s / MIB

    @property
    def write_bw_mib_s(self) -> float:
        return self.write_bw_bytes_s / MIB

    @property
    def rw_modes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(j.rw for j in self.jobs if j.rw))


def parse_fio(text: str) -> FioResult:
    """Parse fio output, JSON or text (decided by the first non-blank character)."""
    text = require_text(text, TOOL, keep_noise=True)  # a "$ fio --rw=randread" command line says the workload
    start = re.search(r"^\{", text, re.M)
    if start:
        return parse_fio_json(text[start.start():])
    return parse_fio_text(text)


# ---------------------------------------------------------------- JSON


def _json_direction(d: Any, job: str, which: str) -> FioDirection | None:
    if not isinstance(d, dict):
        return None
    if not d.get("total_ios") and not d.get("io_bytes"):
        return None  # this direction did no I/O (e.g. the write side of randread)
    try:
        lat = d.get("lat_ns") or {}
        clat = d.get("clat_ns") or {}
        pct = clat.get("percentile") or lat.get("percentile") or {}
        p99 = pct.get("99.000000")
        return FioDirection(
            iops=float(d["iops"]),
            bw_bytes_s=float(d["bw_bytes"]) if "bw_bytes" in d else float(d["bw"]) * 1024,
            io_bytes=int(d["io_bytes"]) if "io_bytes" in d else None,
            lat_mean_us=float(lat["mean"]) / 1000 if "mean" in lat else None,
            p99_us=float(p99) / 1000 if p99 is not None else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ParseError(f"{TOOL}: job {job!r} {which}: missing or bad field {exc}") from None


def parse_fio_json(text: str) -> FioResult:
    """Parse `fio --output-format=json` (also ``json,normal``: text after the JSON is ignored)."""
    text = require_text(text, TOOL, keep_noise=True)  # a "$ fio --rw=randread" command line says the workload
    start = re.search(r"^\{", text, re.M)
    try:
        # raw_decode: the document ends where its closing brace does, so the normal report
        # that `--output-format=json,normal` prints after it is left alone
        doc, _ = json.JSONDecoder().raw_decode(text, start.start() if start else text.index("{"))
    except ValueError as exc:
        raise ParseError(f"{TOOL}: JSON output is not valid ({exc}; truncated?)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise ParseError(f"{TOOL}: JSON output without a 'jobs' list")
    glob = doc.get("global options") or {}
    jobs = []
    for raw in doc["jobs"]:
        name = str(raw.get("jobname", "?"))
        if raw.get("error"):
            raise ParseError(f"{TOOL}: job {name!r} failed with error {raw['error']}")
        opts = raw.get("job options") or {}
        read = _json_direction(raw.get("read"), name, "read")
        write = _json_direction(raw.get("write"), name, "write")
        if read is None and write is None:
            raise ParseError(f"{TOOL}: job {name!r} did no I/O")
        rw, rw_source = _json_rw(opts, glob)
        jobs.append(FioJob(name, rw, opts.get("bs") or glob.get("bs"), read, write,
                           ioengine=opts.get("ioengine") or glob.get("ioengine"),
                           direct=_json_direct(opts, glob), rw_source=rw_source))
    return FioResult(doc.get("fio version"), tuple(jobs))


def _json_rw(opts: dict[str, Any], glob: dict[str, Any]) -> tuple[str, str]:
    """The job's rw= and where it came from; fio's default is ``read``. A ``:<nr>``
    suffix (``rw=randread:8``, a sequence offset) is dropped."""
    for where, source in ((opts, RW_JOB_OPTIONS), (glob, RW_GLOBAL_OPTIONS)):
        value = where.get("rw") or where.get("readwrite")
        if value:
            return str(value).split(":")[0], source
    return "read", RW_FIO_DEFAULT


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _flag(value: Any) -> bool | None:
    text = str(value).strip().lower() if value is not None else ""
    return True if text in _TRUE else False if text in _FALSE else None


def _json_direct(opts: dict[str, Any], glob: dict[str, Any]) -> bool:
    """O_DIRECT from ``direct=`` or its inverse ``buffered=``, the job's own before the
    global ones; neither given is fio's default, ``direct=0``."""
    for where in (opts, glob):
        direct, buffered = _flag(where.get("direct")), _flag(where.get("buffered"))
        if direct is not None:
            return direct
        if buffered is not None:
            return not buffered
    return False


# ---------------------------------------------------------------- text

# "TEST: (g=0): rw=randread, bs=(R) 4096B-4096B, (W) 4096B-4096B, (T) 4096B-4096B, ioengine=io_uring, iodepth=1"
_JOB_DEF = re.compile(r"^(\S+): \(g=\d+\): rw=(\w+), bs=\(R\) (\S+?)-")
# the same line: ", ioengine=io_uring,"
_JOB_ENGINE = re.compile(r", ioengine=([\w-]+)")
# "$ fio --name=job1 --rw=randread --bs=4k --direct=1"  /  "rw=randread" (a job file)
_RW_ANYWHERE = re.compile(r"(?:^|[\s,;'\"])-{0,2}(?:rw|readwrite)=(\w+)")
# "TEST: (groupid=0, jobs=1): err= 0: pid=2715: Mon Jan 23 21:03:25 2023"
_JOB_RESULT = re.compile(r"^(\S+): \(groupid=\d+, jobs=\d+\): err=\s*(\d+)")
# "  read: IOPS=14.0k, BW=54.6MiB/s (57.2MB/s)(3274MiB/60001msec)"
_DIRECTION = re.compile(r"^\s+(read|write|trim)\s*: IOPS=([\d.]+)([kMG]?), BW=([\d.]+)([KMGT]?i?B)/s")
# "     lat (usec): min=62, max=2041, avg=71.14, stdev= 9.22"
_LAT = re.compile(r"^\s+lat \((nsec|usec|msec)\): min=\S+, max=\S+, avg=\s*([\d.]+)")
# "     | 99.00th=[   82], 99.50th=[   90], 99.90th=[  119], 99.95th=[  221],"
_P99 = re.compile(r"99\.00th=\[\s*(\d+)\]")
# "    clat percentiles (usec):"
_PCT_UNIT = re.compile(r"clat percentiles \((nsec|usec|msec)\)")
# "fio-3.28"
_VERSION = re.compile(r"^(fio-\d+\.\d+\S*)\s*$")
# "fio: pid=1234, err=5/file:io_u.c:1889, func=io_u error, error=Input/output error"
_ERROR = re.compile(r"^fio: .*(err=|error|failed)", re.I)

_SCALE = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}
_BYTES = {
    "B": 1.0, "KiB": 1024.0, "MiB": MIB, "GiB": float(1 << 30), "TiB": float(1 << 40),
    "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}
_TO_US = {"nsec": 1e-3, "usec": 1.0, "msec": 1e3}


def parse_fio_text(text: str) -> FioResult:
    """Parse fio's normal (human) report."""
    text = require_text(text, TOOL, keep_noise=True)  # a "$ fio --rw=randread" command line says the workload
    version = None
    defs: dict[str, tuple[str, str, str | None]] = {}
    rw_elsewhere: set[str] = set()
    jobs: list[FioJob] = []
    current: dict[str, Any] | None = None
    direction: str | None = None
    pct_unit = "usec"

    def close() -> None:
        if current is not None:
            jobs.append(
                FioJob(current["name"], current["rw"], current["bs"], current.get("read"), current.get("write"))
            )

    for line in text.splitlines():
        if _ERROR.match(line):
            raise ParseError(f"{TOOL}: {quote(line)}")
        if m := _VERSION.match(line):
            version = m.group(1)
        elif m := _JOB_DEF.match(line):
            engine = _JOB_ENGINE.search(line)
            defs.setdefault(m.group(1), (m.group(2), m.group(3), engine.group(1) if engine else None))
        elif m := _JOB_RESULT.match(line):
            close()
            if m.group(2) != "0":
                raise ParseError(f"{TOOL}: job failed: {quote(line)}")
            rw, bs, _ = defs.get(m.group(1), (None, None, None))
            current, direction = {"name": m.group(1), "rw": rw, "bs": bs}, None
        elif current is not None and (m := _DIRECTION.match(line)):
            direction = m.group(1)
            unit = m.group(5)
            if unit not in _BYTES:
                raise ParseError(f"{TOOL}: unknown bandwidth unit {unit!r}/s in {quote(line)}")
            current[direction] = {
                "iops": to_float(m.group(2), TOOL, line) * _SCALE[m.group(3)],
                "bw": to_float(m.group(4), TOOL, line) * _BYTES[unit],
            }
        elif current is not None and direction and (m := _LAT.match(line)):
            current[direction]["lat"] = float(m.group(2)) * _TO_US[m.group(1)]
        elif m := _PCT_UNIT.search(line):
            pct_unit = m.group(1)
        elif current is not None and direction and (m := _P99.search(line)):
            current[direction].setdefault("p99", float(m.group(1)) * _TO_US[pct_unit])
        elif line.startswith("Run status group"):
            close()
            current, direction = None, None
        else:
            rw_elsewhere.update(v for v in _RW_ANYWHERE.findall(line) if v in RW_DIRECTIONS)
    close()
    built = []
    for job in jobs:
        sides = {}
        for side in ("read", "write"):
            raw = getattr(job, side)
            sides[side] = FioDirection(raw["iops"], raw["bw"], None, raw.get("lat"), raw.get("p99")) if raw else None
        if sides["read"] is None and sides["write"] is None:
            raise ParseError(f"{TOOL}: job {job.name!r} has no 'read:'/'write:' IOPS line (truncated output?)")
        one = FioJob(job.name, job.rw, job.block_size, sides["read"], sides["write"],
                     ioengine=defs.get(job.name, (None, None, None))[2],
                     rw_source=RW_JOB_DEFINITION if job.rw else None)
        built.append(one if one.rw else _infer_rw(one, rw_elsewhere))
    if not built:
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        raise ParseError(f"{TOOL}: no job results ('name: (groupid=...)') in the output; first line {quote(first)}")
    return FioResult(version, tuple(built))


def _infer_rw(job: FioJob, rw_elsewhere: set[str]) -> FioJob:
    """`job` with the rw= the text names for it (see the module docstring), if any."""
    candidates = [(next(iter(rw_elsewhere)) if len(rw_elsewhere) == 1 else None, RW_IN_TEXT),
                  (_rw_from_name(job.name), RW_JOB_NAME)]
    for rw, source in candidates:
        if rw is not None and job.directions <= RW_DIRECTIONS[rw]:
            return replace(job, rw=rw, rw_source=source)
    return job


_RANDOM = {"rand", "random"}
_SEQUENTIAL = {"seq", "sequential"}


def _rw_from_name(name: str) -> str | None:
    """The rw= a job's name spells: "randread", "fio_randread_4k", "rand-read", "seqwrite",
    "seq_write", "read"; None when it names none or more than one."""
    tokens = set(re.split(r"[^a-z0-9]+", name.lower()))
    found = {t for t in tokens if t in RW_DIRECTIONS}
    found |= {t[3:] for t in tokens if t in ("seqread", "seqwrite")}
    rand, seq = bool(tokens & _RANDOM), bool(tokens & _SEQUENTIAL)
    if rand and seq:
        return None
    if rand:
        found = {f"rand{f}" if f in ("read", "write", "trim") else f for f in found}
    return found.pop() if len(found) == 1 else None

