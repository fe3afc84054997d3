"""NVIDIA Xid (GPU) and SXid (NVSwitch) events in a kernel log (`dmesg`, `journalctl -k`),
and the driver's lost-GPU messages that carry no Xid at all.

A log without any event is the healthy case and parses to an empty result; an empty
text is not a log and raises `ParseError`. With ``strict=True`` (what ``gpuctl analyze
xid`` uses) a text with neither an event line nor one line in a kernel log's shape
(see `KERNEL_LINE`) is refused too: a wrong file must not pass as a clean log.

What is recorded, and how it is counted:

- `XidEvent`: one per ``NVRM: Xid (...)`` line, MIG lines (``GPU-I:05``, ``GPU-CI:01``
  after the PCI address) included. What the driver says about the event in its own
  words is kept as fields: the NVLink5 severity word (Xid 144-150 ``Fatal``/``Nonfatal``),
  the error-containment flags of Xid 94/95 (``RST: Yes`` = GPU reset required,
  ``D-RST: Yes`` = drain and reset required), the recovery action Xid 154 names, and the
  earlier Xid an Xid 45 names as its cause (``caused by previous Xid 149``).
- `GpuLostEvent`: one per driver *message* that says a GPU is gone without an Xid:
  the probe-time "fallen off the bus and is not responding to commands" message (printed
  over up to three ``NVRM:`` lines, counted once), the runtime ``NVRM: GPU <bdf>: GPU has
  fallen off the bus.`` line, ``nvidia: probe of <bdf> failed with error -1`` and
  ``RmInitAdapter failed!``. They are kept apart from `events`, so the Xid count stays
  the count of Xid lines: the runtime line that follows an Xid 79 on the same GPU is a
  `GpuLostEvent` as well, and it is the verdict (`gpuctl.verdicts.judge_xid`) that folds
  it into the Xid 79 of that GPU rather than failing the GPU twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text

TOOL = "kernel log"

# "[12345.678901] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
# "NVRM: Xid (PCI:0000:01:00): 31, pid=1 CE0"
# "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No"
# "NVRM: Xid (PCI:0000:01:00 GPU-I:01 GPU-CI:00): 13, pid=..., ..."   (driver kernel_rc.c, MIG attribution)
# "NVRM: Xid (0000:01:00): 13, 0005 00000000 ..."                      (older drivers, no "PCI:")
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)(?: GPU-I:(\w+))?(?: GPU-CI:(\w+))?\): (\d+), ?(.*)$")
# "nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 11001, Fatal, ingress invalid command"
_SXID = re.compile(r"(nvidia-nvswitch\d+): SXid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+), ?(.*)$")
# "pid=1234, name=python3, " / "pid='<unknown>', name=<unknown>, "
_PID = re.compile(r"^pid=([^,\s]+),?\s*(?:name=([^,]+),\s*)?")
# Xid 144-150 (NVLink5, Blackwell) name the unit, then the driver's severity word:
# "NETIR_INT  Fatal   XC0 i0 Link -1"
# "NETIR/NETIR_INT Fatal XC0 i0 Link 00 (0x00000018 0x00000000 0x00000000 0x00000000)"
# "NETIR_BER_EVENT Nonfatal XC0 i0 Link 00 (0x00000013 0x00000000 0x00000000 0x00000000)"
_NVLINK5_SEVERITY = re.compile(r"^\S+\s+(Fatal|Nonfatal)\s+XC\d")
# Xid 94/95 (error containment, driver kern_gpu_ga100.c): "... LTC TAG (0x2,0x1). RST: Yes, D-RST: No"
_CONTAINMENT_FLAGS = re.compile(r"\bRST: (Yes|No), D-RST: (Yes|No)\b")
# Xid 45 (channels torn down) naming the Xid that caused it, at the end of the line (driver
# kernel_rc.c, " caused by previous Xid %d" after the message):
# "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"
_CAUSED_BY = re.compile(r"\bcaused by previous Xid (\d+)\s*$")
# Xid 154: "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"
_RECOVERY_ACTION = re.compile(
    r"recovery action changed from (0x[0-9A-Fa-f]+) \(([^)]*)\) to (0x[0-9A-Fa-f]+) \(([^)]*)\)")

# A PCI address with its function, as the lost-GPU messages print it: "0000:5d:00.0"
_BDF = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
# The probe-time message (driver nv.c when the GPU's registers read 0xFFFFFFFF), first line:
# "NVRM: The NVIDIA GPU 0000:5d:00.0"                                       (driver 525: 3 lines)
# "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1e07) installed in this" (older: 2 lines)
# "NVRM: The NVIDIA GPU 0000:05:00.0 installed in this system has fallen off the bus and is not
#  responding to commands."                                                 (one line)
_GPU_MESSAGE_START = re.compile(rf"NVRM: The NVIDIA GPU ({_BDF})(.*)$")
# Its continuation lines, the text after "NVRM: ":
# "               NVRM: (PCI ID: 10de:2330) installed in this system has"             (dmesg)
# "Jan  3 07:39:45 ubuntu kernel: [17257.355375] NVRM: fallen off the bus and is ..." (syslog)
_NVRM_TEXT = re.compile(r"NVRM: (.*)$")
_FALLEN_WORDS = "fallen off the bus"
_MESSAGE_END = "responding to commands"
# "(PCI ID: 10de:2330)"
_PCI_ID = re.compile(r"PCI ID: ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{4})")
# "NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus."  (runtime; follows an Xid 79, or stands alone)
_GPU_FALLEN = re.compile(rf"NVRM: GPU ({_BDF}): GPU has fallen off the bus\b")
# "nvidia: probe of 0000:5d:00.0 failed with error -1"
_PROBE_OF = re.compile(rf"\bnvidia: probe of ({_BDF}) failed with error (-?\d+)")
# "nvidia 0000:02:00.0: probe with driver nvidia failed with error -1"  (newer kernels' wording)
_PROBE_WITH = re.compile(rf"\bnvidia ({_BDF}): probe with driver nvidia failed with error (-?\d+)")
# "NVRM: GPU 0000:0b:00.0: RmInitAdapter failed! (0x62:0x65:2522)"
# "NVRM: RmInitAdapter failed! (0x30:0xffff:660)"   (older drivers: no address on the line)
_RM_INIT = re.compile(rf"NVRM: (?:GPU ({_BDF}): )?RmInitAdapter failed! (\([^)]*\))")

# The line shapes of dmesg and journalctl -k:
#   "[    5.123456] ..."                       dmesg, journalctl -o short-monotonic
#   "<6>[    5.123456] ..."                    dmesg -r
#   "[Tue Dec  2 10:00:00 2026] ..."           dmesg -T
#   "kern  :info  : [    5.123456] ..."       dmesg -x
#   "Dec 02 10:00:00 host kernel: ..."        journalctl -k (short)
#   "2026-12-02T10:00:00+0000 host kernel: "  journalctl -o short-iso, dmesg --time-format iso
KERNEL_LINE = re.compile(
    r"^(?:<\d+>)?\[\s*\d+\.\d+\]"
    r"|^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]"
    r"|^kern\s*:\s*\w+\s*:"
    r"|^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel:"
    r"|^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* (?:\S+ kernel:|\S)"
)

# GpuLostEvent.kind
FALLEN_OFF_BUS = "fallen-off-bus"
PROBE_FAILED = "probe-failed"
INIT_FAILED = "init-failed"


@dataclass(frozen=True)
class XidEvent:
    bus_id: str
    xid: int
    pid: str | None
    process: str | None
    message: str
    line: str
    gpu_instance: str | None = None  # MIG: "05" of "GPU-I:05"
    compute_instance: str | None = None  # MIG: "01" of "GPU-CI:01"
    severity: str | None = None  # NVLink5 Xids: "Fatal" / "Nonfatal", as the driver marks the line
    reset_required: bool | None = None  # Xid 94/95 "RST: Yes"
    drain_and_reset_required: bool | None = None  # Xid 94/95 "D-RST: Yes"
    recovery_action: str | None = None  # Xid 154: the action it changed to, "Drain and Reset"
    recovery_action_code: int | None = None  # Xid 154: its number, 4 for "0x4"
    caused_by: int | None = None  # Xid 45: the earlier Xid the driver names as its cause ("149")


@dataclass(frozen=True)
class SxidEvent:
    switch: str
    bus_id: str
    sxid: int
    fatal: bool
    message: str
    line: str


@dataclass(frozen=True)
class GpuLostEvent:
    """A driver message that a GPU is gone or could not be brought up, with no Xid."""

    bus_id: str | None  # "0000:5d:00.0" as printed; None when the message names no address
    kind: str  # FALLEN_OFF_BUS, PROBE_FAILED or INIT_FAILED
    detail: str  # "PCI ID: 10de:2330", "error -1", "(0x62:0x65:2522)"
    line: str  # the message's log line(s), joined by "\n"

    @property
    def gpu(self) -> str | None:
        """The address as Xid lines print it (no function): "0000:5d:00"."""
        return self.bus_id.rsplit(".", 1)[0] if self.bus_id else None


@dataclass(frozen=True)
class XidResult:
    events: tuple[XidEvent, ...]
    sxid_events: tuple[SxidEvent, ...]
    lines_read: int
    lost: tuple[GpuLostEvent, ...] = ()

    @property
    def codes(self) -> tuple[int, ...]:
        return tuple(sorted({e.xid for e in self.events}))


def _xid_event(m: re.Match[str], line: str) -> XidEvent:
    rest = m.group(5).strip()
    pid = process = None
    if p := _PID.match(rest):
        pid, process = p.group(1).strip("'"), (p.group(2) or "").strip("'") or None
        rest = rest[p.end():]
    rest = rest.strip()
    severity = reset = drain = action = action_code = None
    if s := _NVLINK5_SEVERITY.match(rest):
        severity = s.group(1)
    if f := _CONTAINMENT_FLAGS.search(rest):
        reset, drain = f.group(1) == "Yes", f.group(2) == "Yes"
    if a := _RECOVERY_ACTION.search(rest):
        action, action_code = a.group(4).strip(), int(a.group(3), 16)
    cause = _CAUSED_BY.search(rest)
    return XidEvent(m.group(1).lower(), int(m.group(4)), pid, process, rest, line.strip(),
                    m.group(2), m.group(3), severity, reset, drain, action, action_code,
                    int(cause.group(1)) if cause else None)


def _lost_message(lines: list[str], i: int, m: re.Match[str]) -> tuple[GpuLostEvent | None, int]:
    """The probe-time "NVRM: The NVIDIA GPU <bdf> ..." message that starts at line `i`, joined
    with its ``NVRM:`` continuation lines; (event or None, lines used). Only a message that
    says "fallen off the bus" is an event (the same opening also starts "... is not supported
    by the NVIDIA <n> driver release")."""
    text, used = m.group(2).strip(), 1
    while _MESSAGE_END not in text and used < 4 and i + used < len(lines):
        nxt = lines[i + used]
        c = _NVRM_TEXT.search(nxt)
        if c is None or _XID.search(nxt) or _GPU_MESSAGE_START.search(nxt):
            break
        text, used = f"{text} {c.group(1).strip()}".strip(), used + 1
    if _FALLEN_WORDS not in text:
        return None, 1
    pci_id = _PCI_ID.search(text)
    detail = f"PCI ID: {pci_id.group(1).lower()}" if pci_id else ""
    joined = "\n".join(x.strip() for x in lines[i:i + used])
    return GpuLostEvent(m.group(1).lower(), FALLEN_OFF_BUS, detail, joined), used


def _lost_line(line: str) -> GpuLostEvent | None:
    if m := _GPU_FALLEN.search(line):
        return GpuLostEvent(m.group(1).lower(), FALLEN_OFF_BUS, "", line.strip())
    if m := (_PROBE_OF.search(line) or _PROBE_WITH.search(line)):
        return GpuLostEvent(m.group(1).lower(), PROBE_FAILED, f"error {m.group(2)}", line.strip())
    if m := _RM_INIT.search(line):
        return GpuLostEvent(m.group(1).lower() if m.group(1) else None, INIT_FAILED, m.group(2), line.strip())
    return None


def parse_xid_log(text: str, *, strict: bool = False) -> XidResult:
    """Every Xid/SXid line and lost-GPU message of a kernel log, in order; with `strict`,
    ParseError when the text holds no event and no kernel-log line at all."""
    text = require_text(text, TOOL)
    events, sxids, lost = [], [], []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line, used = lines[i], 1
        if m := _XID.search(line):
            events.append(_xid_event(m, line))
        elif m := _SXID.search(line):
            msg = m.group(4).strip()
            sxids.append(SxidEvent(m.group(1), m.group(2).lower(), int(m.group(3)),
                                   msg.lower().startswith("fatal"), msg, line.strip()))
        elif m := _GPU_MESSAGE_START.search(line):
            event, used = _lost_message(lines, i, m)
            if event:
                lost.append(event)
        elif event := _lost_line(line):
            lost.append(event)
        i += used
    if (strict and not events and not sxids and not lost
            and not any(KERNEL_LINE.match(x.lstrip()) for x in lines)):
        raise ParseError(f"{TOOL}: not a kernel log (no dmesg or journalctl -k line in it); "
                         f"first line: {quote(lines[0] if lines else '')}")
    return XidResult(tuple(events), tuple(sxids), len(lines), tuple(lost))
