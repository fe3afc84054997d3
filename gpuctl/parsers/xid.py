"""NVIDIA Xid (GPU) and SXid (NVSwitch) events in a kernel log (`dmesg`, `journalctl -k`).

A log without any event is the healthy case and parses to an empty result; an empty
text is not a log and raises `ParseError`. With ``strict=True`` (what ``gpuctl analyze
xid`` uses) a text with neither an Xid/SXid line nor one line in a kernel log's shape
(see `_KERNEL_LINE`) is refused too: a wrong file must not pass as a clean log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text

TOOL = "kernel log"

# "[12345.678901] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
# "NVRM: Xid (PCI:0000:01:00): 31, pid=1 CE0"
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+), ?(.*)$")
# "nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 11001, Fatal, ingress invalid command"
_SXID = re.compile(r"(nvidia-nvswitch\d+): SXid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+), ?(.*)$")
# "pid=1234, name=python3, " / "pid='<unknown>', name=<unknown>, "
# The line shapes of dmesg and journalctl -k:
#   "[    5.123456] ..."                       dmesg, journalctl -o short-monotonic
#   "<6>[    5.123456] ..."                    dmesg -r
#   "[Tue Dec  2 10:00:00 2026] ..."           dmesg -T
#   "kern  :info  : [    5.123456] ..."       dmesg -x
#   "Dec 02 10:00:00 host kernel: ..."        journalctl -k (short)
#   "2026-12-02T10:00:00+0000 host kernel: "  journalctl -o short-iso, dmesg --time-format iso
_KERNEL_LINE = re.compile(
    r"^(?:<\d+>)?\[\s*\d+\.\d+\]"
    r"|^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]"
    r"|^kern\s*:\s*\w+\s*:"
    r"|^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel:"
    r"|^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* (?:\S+ kernel:|\S)"
)
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


def parse_xid_log(text: str, *, strict: bool = False) -> XidResult:
    """Every Xid/SXid line of a kernel log, in order; with `strict`, ParseError when the
    text holds no kernel-log line at all."""
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
    if strict and not events and not sxids and not any(_KERNEL_LINE.match(x.lstrip()) for x in lines):
        raise ParseError(f"{TOOL}: not a kernel log (no dmesg or journalctl -k line in it); "
                         f"first line: {quote(lines[0] if lines else '')}")
    return XidResult(tuple(events), tuple(sxids), len(lines))
