"""gdsio (GPUDirect Storage benchmark): its one-line summary per run.

Throughput is printed in GiB/s (2^30 bytes); `throughput_gb_s` gives 10^9 bytes/s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text

TOOL = "gdsio"

# "IoType: WRITE XferType: GPUD Threads: 8 DataSetSize: 54675456/8388608(KiB) IOSize: 1024(KiB)
#  Throughput: 5.655563 GiB/sec, Avg_Latency: 1381.371828 usecs ops: 53394 total_time 9.219697 secs"
_SUMMARY = re.compile(
    r"IoType:\s*(\S+)\s+XferType:\s*(\S+)\s+Threads:\s*(\d+)\s+DataSetSize:\s*(\d+)/(\d+)\(KiB\)\s+"
    r"IOSize:\s*(\d+)\(KiB\)\s+Throughput:\s*([\d.]+)\s*GiB/sec,\s*Avg_Latency:\s*([\d.]+)\s*usecs"
    r"(?:\s+ops:\s*(\d+))?(?:\s+total_time\s+([\d.]+)\s*secs)?"
)
# "Error: IO failed stopping traffic, fd :27 ret:-5 errno:1"  /  "file register error: ..."
_ERROR = re.compile(r"\berror\b|failed", re.I)

GIB = float(1 << 30)


@dataclass(frozen=True)
class GdsioRun:
    io_type: str  # READ, WRITE, RANDREAD, RANDWRITE
    xfer_type: str  # GPUD (GPUDirect), CPUONLY, CPU_GPU, ...
    threads: int
    data_kib: int
    io_size_kib: int
    throughput_gib_s: float
    avg_latency_us: float
    ops: int | None
    total_time_s: float | None

    @property
    def throughput_gb_s(self) -> float:
        return self.throughput_gib_s * GIB / 1e9


@dataclass(frozen=True)
class GdsioResult:
    runs: tuple[GdsioRun, ...]


def parse_gdsio(text: str) -> GdsioResult:
    """Parse one or more gdsio summary lines (other lines are ignored)."""
    text = require_text(text, TOOL)
    lines = text.splitlines()
    joined = " ".join(ln.strip() for ln in lines)  # some copies wrap the summary over two lines
    runs = [
        GdsioRun(
            io_type=m.group(1), xfer_type=m.group(2), threads=int(m.group(3)), data_kib=int(m.group(4)),
            io_size_kib=int(m.group(6)), throughput_gib_s=float(m.group(7)), avg_latency_us=float(m.group(8)),
            ops=int(m.group(9)) if m.group(9) else None,
            total_time_s=float(m.group(10)) if m.group(10) else None,
        )
        for m in _SUMMARY.finditer(joined)
    ]
    if not runs:
        err = next((ln for ln in lines if _ERROR.search(ln)), None)
        if err:
            raise ParseError(f"{TOOL}: the run failed: {quote(err)}")
        raise ParseError(f"{TOOL}: no 'IoType: ... Throughput: ... GiB/sec' summary line in the output")
    return GdsioResult(tuple(runs))
