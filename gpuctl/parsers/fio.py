"""fio: `--output-format=json` (preferred) and the normal text report.

Bandwidth is kept in bytes per second and offered in two clearly named units:
`*_gb_s` (10^9 bytes/s, the unit of the `fio_seqwrite_gb_s` threshold) and `*_mib_s`
(2^20 bytes/s, the unit fio prints). Latency is in microseconds. With several jobs
(no `group_reporting`) IOPS and bandwidth are summed over jobs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
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

    @property
    def bw_mib_s(self) -> float:
        return self.bw_bytes_s / MIB


@dataclass(frozen=True)
class FioJob:
    name: str
    rw: str | None  # randread, write, randrw, ...
    block_size: str | None
    read: FioDirection | None
    write: FioDirection | None


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
    text = require_text(text, TOOL)
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
    text = require_text(text, TOOL)
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
        jobs.append(FioJob(name, opts.get("rw") or glob.get("rw"), opts.get("bs") or glob.get("bs"), read, write))
    return FioResult(doc.get("fio version"), tuple(jobs))


# ---------------------------------------------------------------- text

# "TEST: (g=0): rw=randread, bs=(R) 4096B-4096B, (W) 4096B-4096B, (T) 4096B-4096B, ioengine=io_uring, iodepth=1"
_JOB_DEF = re.compile(r"^(\S+): \(g=\d+\): rw=(\w+), bs=\(R\) (\S+?)-")
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
    text = require_text(text, TOOL)
    version = None
    defs: dict[str, tuple[str, str]] = {}
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
            defs.setdefault(m.group(1), (m.group(2), m.group(3)))
        elif m := _JOB_RESULT.match(line):
            close()
            if m.group(2) != "0":
                raise ParseError(f"{TOOL}: job failed: {quote(line)}")
            rw, bs = defs.get(m.group(1), (None, None))
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
    close()
    built = []
    for job in jobs:
        sides = {}
        for side in ("read", "write"):
            raw = getattr(job, side)
            sides[side] = FioDirection(raw["iops"], raw["bw"], None, raw.get("lat"), raw.get("p99")) if raw else None
        if sides["read"] is None and sides["write"] is None:
            raise ParseError(f"{TOOL}: job {job.name!r} has no 'read:'/'write:' IOPS line (truncated output?)")
        built.append(FioJob(job.name, job.rw, job.block_size, sides["read"], sides["write"]))
    if not built:
        first = next((ln for ln in text.splitlines() if ln.strip()), "")
        raise ParseError(f"{TOOL}: no job results ('name: (groupid=...)') in the output; first line {quote(first)}")
    return FioResult(version, tuple(built))
