"""NVIDIA Xid (GPU) and SXid (NVSwitch) events in a kernel log (`dmesg`, `journalctl -k`).

A log without any event is the healthy case and parses to an empty result; an empty
text is not a log and raises `ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.parsers._common import require_text

TOOL = "kernel log"

# "[12345.678901] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
# "NVRM: Xid (PCI:0000:01:00): 31, pid=1 CE0"
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+), ?(.*)$")
# "nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 11001, Fatal, ingress invalid command"
_SXID = re.compile(r"(nvidia-nvswitch\d+): SXid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+), ?(.*)$")
# "pid=1234, name=python3, " / "pid='<unknown>', name=<unknown>, "
_PID = re.compile(r"^pid=([^,\s]+),?\s*(?:name=([^,]+),\s*)?")


@dataclass(frozen=True)
class XidEvent:
    bus_id: str
    xid: int
    pid: str | None
    process: str | None
    message: str
    line: str


@dataclass(frozen=True)
class SxidEvent:
    switch: str
    bus_id: str
    sxid: int
    fatal: bool
    message: str
    line: str


@dataclass(frozen=True)
class XidResult:
    events: tuple[XidEvent, ...]
    sxid_events: tuple[SxidEvent, ...]
    lines_read: int

    @property
    def codes(self) -> tuple[int, ...]:
        return tuple(sorted({e.xid for e in self.events}))


def parse_xid_log(text: str) -> XidResult:
    """Every Xid/SXid line of a kernel log, in order."""
    text = require_text(text, TOOL)
    events, sxids = [], []
    lines = text.splitlines()
    for line in lines:
        if m := _XID.search(line):
            rest = m.group(3).strip()
            pid = process = None
            if p := _PID.match(rest):
                pid, process = p.group(1).strip("'"), (p.group(2) or "").strip("'") or None
                rest = rest[p.end():]
            events.append(XidEvent(m.group(1).lower(), int(m.group(2)), pid, process, rest.strip(), line.strip()))
        elif m := _SXID.search(line):
            msg = m.group(4).strip()
            sxids.append(SxidEvent(m.group(1), m.group(2).lower(), int(m.group(3)),
                                   msg.lower().startswith("fatal"), msg, line.strip()))
    return XidResult(tuple(events), tuple(sxids), len(lines))
