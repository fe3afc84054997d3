"""What a kernel log's GPU events mean for the node: one policy for `gpuctl analyze xid`
(`gpuctl.verdicts.judge_xid`) and verify's `nvidia_driver.no_fatal_xid` check.

Input: a parsed log (`gpuctl.parsers.xid.XidResult`) and the fatal Xid list of
catalog/health.yaml. Output: one `XidFinding` per Xid, per GPU the driver lost without an
Xid, and per SXid — each with its status (pass / warn / fail), remediation, evidence and
source. Kept free of the benchmark parsers so verify's check session stays light.

Rules:
- the YAML list decides which Xid codes can fail; within it, a line that carries the
  driver's own judgement follows it: Xid 154 its recovery action, NVLink5 Xids their
  Fatal/Nonfatal word;
- "RST: Yes" / "D-RST: Yes" (Xid 94/95) fails whatever the code: the driver has marked the
  GPU for reset;
- a GPU that fell off the bus, failed its probe or RmInitAdapter with no Xid line fails
  (one finding per GPU; a GPU whose Xid 79 is in the same log is already failed by it);
- a fatal SXid (NVSwitch) fails, any other warns;
- an Xid 45 the driver says was "caused by previous Xid N" follows its cause: where the log
  holds no Xid N line of that GPU (it scrolled out, or a grep kept only the 45s), the cause
  is judged from the 45 line as if its own line were there (one finding per GPU and cause),
  so an NVLink fault named only in the fallout is not lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuctl.catalog import Health
from gpuctl.parsers.xid import FALLEN_OFF_BUS, INIT_FAILED, PROBE_FAILED, GpuLostEvent, XidEvent, XidResult
from gpuctl.remediation import Remediation

PASS, WARN, FAIL = "pass", "warn", "fail"

_XID_REMEDIATION = {79: Remediation.RESEAT_OR_REPLACE, 74: Remediation.RESEAT_OR_REPLACE}

# Xid 154 names the recovery action the driver now requires. The labels the driver prints
# ("None", "Drain P2P", "Drain and Reset", "GPU Reset Required", "Node Reboot Required", per
# NVIDIA's Xid catalog; "PF FLR" and "OS Reboot" seen in real logs) are matched by their words,
# and an unknown label by its number (NVML nvmlDeviceGpuRecoveryAction_t). gpuctl has no
# "GPU reset" remediation class: a reset is asked for as REBOOT, which also resets the GPU.
# None: no action needed (the finding passes).
RECOVERY_ACTION_SOURCE = ("NVIDIA Xid Catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html): "
                          "Xid 154 summarises the recovery action required; NVIDIA GPU Memory Error Management, "
                          "Error Recovery and Response Flags: None / Reset / Reboot / Drain P2P / Drain and Reset")
_RECOVERY_WORDS: tuple[tuple[str, Remediation | None], ...] = (
    ("none", None),
    ("reboot", Remediation.REBOOT),  # "Node Reboot Required", "OS Reboot", "System Reboot"
    ("drain p2p", Remediation.RERUN),  # quiesce peer-to-peer work, then read the action again
    ("reset", Remediation.REBOOT),  # "GPU Reset Required", "Drain and Reset", "Bus Reset"
    ("flr", Remediation.REBOOT),  # "PF FLR": a function-level reset of the GPU
    ("imex", Remediation.RECONFIGURE),  # "Recover IMEX Domain"
)
_RECOVERY_CODES: dict[int, Remediation | None] = {
    0: None, 1: Remediation.REBOOT, 2: Remediation.REBOOT, 3: Remediation.RERUN, 4: Remediation.REBOOT,
    5: Remediation.RECONFIGURE, 6: Remediation.REBOOT, 7: Remediation.REBOOT,
}
LOST_SOURCE = ("NVIDIA driver (nv.c): 'has fallen off the bus and is not responding to commands' when the GPU's "
               "registers read 0xFFFFFFFF at probe, then 'probe of <bdf> failed'; NVIDIA Xid Catalog: Xid 79 "
               "(GPU has fallen off the bus) is RESTART_BM")
SXID_SOURCE = "NVSwitch SXid: 'Fatal' marks a fatal error"
_LOST_WORDS = {FALLEN_OFF_BUS: "fell off the bus", PROBE_FAILED: "driver probe failed",
               INIT_FAILED: "RmInitAdapter failed"}


@dataclass(frozen=True)
class XidFinding:
    """One event's meaning. `text` is the evidence without the node/GPU label."""

    check: str  # "xid", "gpu_lost" or "sxid"
    status: str  # PASS, WARN or FAIL
    remediation: Remediation
    bus_id: str | None
    port: str | None  # the NVSwitch of an SXid
    value: int | str | None  # the Xid/SXid code, or the kind of a lost GPU
    text: str
    source: str


def recovery_remediation(label: str | None, code: int | None) -> tuple[bool, Remediation | None]:
    """(recognised, remediation) for Xid 154's new action; remediation None: nothing to do."""
    text = (label or "").lower()
    for word, remediation in _RECOVERY_WORDS:
        if (text == word) if word == "none" else (word in text):
            return True, remediation
    if code in _RECOVERY_CODES:
        return True, _RECOVERY_CODES[code]
    return False, Remediation.REBOOT


def _xid(e: XidEvent, fatal: set[int], source: str) -> XidFinding:
    what = f"Xid {e.xid}" + (f" (GPU instance {e.gpu_instance})" if e.gpu_instance else "")
    msg = e.message or "no message"

    def finding(status: str, remediation: Remediation, text: str, src: str = source) -> XidFinding:
        return XidFinding("xid", status, remediation, e.bus_id, None, e.xid, text, src)

    if e.xid == 154 and e.xid in fatal:
        known, action = recovery_remediation(e.recovery_action, e.recovery_action_code)
        if not known:
            return finding(FAIL, Remediation.REBOOT, f"{what} ({msg}): recovery action not recognised, treated as "
                           "a reset", RECOVERY_ACTION_SOURCE)
        if action is None:
            return finding(PASS, Remediation.NONE,
                           f"{what} ({msg}): recovery action now '{e.recovery_action}', nothing to do",
                           RECOVERY_ACTION_SOURCE)
        return finding(FAIL, action, f"{what} ({msg}): the driver requires '{e.recovery_action}'",
                       RECOVERY_ACTION_SOURCE)
    if e.reset_required or e.drain_and_reset_required:
        flag = "RST: Yes" if e.reset_required else "D-RST: Yes"
        return finding(FAIL, Remediation.REBOOT, f"{what} ({msg}): the driver marks the GPU for reset ({flag})",
                       source + "; driver kern_gpu_ga100.c: RST = GPU reset required, D-RST = drain and reset "
                       "required")
    if e.xid in fatal and e.severity == "Nonfatal":
        return finding(WARN, Remediation.NONE, f"{what} ({msg}): the driver marks it Nonfatal")
    if e.xid in fatal:
        return finding(FAIL, _XID_REMEDIATION.get(e.xid, Remediation.REBOOT), f"{what} ({msg}) is fatal")
    if e.caused_by is not None:
        return finding(WARN, Remediation.NONE, f"{what} ({msg}): fallout of Xid {e.caused_by}, which is judged itself")
    return finding(WARN, Remediation.NONE, f"{what} ({msg}), not in the fatal list")


def _details(events: Sequence[GpuLostEvent], kind: str) -> list[str]:
    return list(dict.fromkeys(e.detail for e in events if e.kind == kind and e.detail))


def _lost(lost: Sequence[GpuLostEvent], xid79: set[str]) -> list[XidFinding]:
    by_gpu: dict[str | None, list[GpuLostEvent]] = {}
    for e in lost:
        by_gpu.setdefault(e.gpu, []).append(e)
    out = []
    for gpu, evs in by_gpu.items():
        if gpu is not None and gpu in xid79:
            continue
        kinds = [k for k in (FALLEN_OFF_BUS, PROBE_FAILED, INIT_FAILED) if any(e.kind == k for e in evs)]
        bus_id = next((e.bus_id for e in evs if e.bus_id), None)
        found = "; ".join(_LOST_WORDS[k] + "".join(f" ({d})" for d in _details(evs, k)) for k in kinds)
        fallen = FALLEN_OFF_BUS in kinds
        out.append(XidFinding(
            "gpu_lost", FAIL, Remediation.RESEAT_OR_REPLACE if fallen else Remediation.REBOOT, bus_id, None,
            kinds[0],
            ("" if bus_id else "a GPU (the log names no PCI address): ") + f"{found}, with no Xid line"
            + ("" if fallen else "; read the driver lines before it (firmware, BAR, driver/GPU mismatch)"),
            LOST_SOURCE))
    return out


CAUSE_SOURCE = ("NVIDIA driver kernel_rc.c: an Xid 45 (ROBUST_CHANNEL_PREEMPTIVE_REMOVAL) line ends with "
                "'caused by previous Xid N' when the channels were torn down because of Xid N")


def _named_causes(events: Sequence[XidEvent], fatal: set[int], source: str) -> list[XidFinding]:
    """One finding per (GPU, cause) an Xid 45 names whose own line is not in the log."""
    seen = {(e.bus_id, e.xid) for e in events}
    out: list[XidFinding] = []
    counts: dict[tuple[str, int], list[XidEvent]] = {}
    for e in events:
        if e.caused_by is not None and (e.bus_id, e.caused_by) not in seen:
            counts.setdefault((e.bus_id, e.caused_by), []).append(e)
    for (_bus, cause), evs in counts.items():
        stand_in = replace(evs[0], xid=cause, message=f"named as the cause of {len(evs)} Xid {evs[0].xid} line"
                           f"{'s' if len(evs) > 1 else ''}; its own line is not in this log",
                           severity=None, caused_by=None)
        f = _xid(stand_in, fatal, source)
        out.append(replace(f, source=f"{f.source}; {CAUSE_SOURCE}"))
    return out


def xid_findings(result: XidResult, health: Health) -> list[XidFinding]:
    """Every finding of a kernel log, in log order: Xids, lost GPUs, SXids; then the causes
    Xid 45 lines name that the log does not hold."""
    fatal = set(health.xid_fatal.codes)
    out = [_xid(e, fatal, health.xid_fatal.source) for e in result.events]
    out += _named_causes(result.events, fatal, health.xid_fatal.source)
    out += _lost(result.lost, {e.bus_id for e in result.events if e.xid == 79})
    out += [XidFinding("sxid", FAIL if e.fatal else WARN, Remediation.REBOOT if e.fatal else Remediation.NONE,
                       e.bus_id, e.switch, e.sxid, f"SXid {e.sxid}: {e.message}", SXID_SOURCE)
            for e in result.sxid_events]
    return out
