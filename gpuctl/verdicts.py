"""Verdicts: a parsed measurement judged against a threshold from the SKU catalog.

`judge()` is the one pure rule for numbers: a missing threshold is never a pass
(``no-threshold``), a SKU that marks a measurement as not applicable gives
``not-applicable`` with the catalog's reason, a measurement that could not be taken
gives ``error`` ("could not run", distinct from ``fail``). `judge_fact()` records a
yes/no finding (GPU model, link state) with the same fields.

The `judge_<tool>(result, sku)` helpers turn a parsed result into verdicts, one per GPU,
pair or port, so each failure names its subject. With `sku=None` they give only the
verdicts that need no SKU (nccl wrong = 0, topo symmetric, ECC health, Xid, ...).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from gpuctl.catalog import EccLimits, Health, Measured, Sku, Threshold, load_health, outside_workload
from gpuctl.parsers.bandwidth import BandwidthResult
from gpuctl.parsers.dcgm import DcgmResultSet, DcgmTest
from gpuctl.parsers.fio import RW_INFERRED, FioJob, FioResult
from gpuctl.parsers.gdsio import GdsioResult
from gpuctl.parsers.ib_counters import IbCountersResult
from gpuctl.parsers.ibstat import IbPort, IbstatResult
from gpuctl.parsers.lspci import LspciResult, PciDevice
from gpuctl.parsers.nccl import NcclResult
from gpuctl.parsers.nccl_log import WC_STATUS_SOURCE, IbCompletion, NcclLogResult
from gpuctl.parsers.nvidia_smi import GpuInfo, NvidiaSmiResult
from gpuctl.parsers.nvlink import TOOL as NVLINK_TOOL
from gpuctl.parsers.nvlink import NvlinkResult
from gpuctl.parsers.nvlink_errors import NvlinkErrorsResult
from gpuctl.parsers.perftest import BwResult, LatResult
from gpuctl.parsers.topo import PCIE_PATHS, TopoLink, TopoResult, path_rank
from gpuctl.parsers.training import LauncherLog, TrainingFinal, TrainingResult
from gpuctl.parsers.xid import XidResult
from gpuctl.remediation import Remediation
from gpuctl.xidpolicy import FAIL, PASS, WARN, xid_findings


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    NO_THRESHOLD = "no-threshold"
    NOT_APPLICABLE = "not-applicable"
    ERROR = "error"  # the measurement could not be taken ("could not run")


@dataclass(frozen=True)
class Subject:
    """What a verdict is about: a node, a GPU (index + bus id), a GPU pair, a port."""

    node: str | None = None
    gpu: int | None = None
    bus_id: str | None = None
    peer: int | None = None
    port: str | None = None

    def label(self) -> str:
        parts = []
        if self.node:
            parts.append(self.node)
        if self.gpu is not None:
            gpu = f"GPU {self.gpu}" + (f" ({self.bus_id})" if self.bus_id else "")
            parts.append(gpu if self.peer is None else f"GPU {self.gpu} ↔ GPU {self.peer}")
        elif self.bus_id:
            parts.append(self.bus_id)
        if self.port:
            parts.append(self.port)
        return " ".join(parts) if parts else "node"

    def with_node(self, node: str | None) -> Subject:
        return Subject(node, self.gpu, self.bus_id, self.peer, self.port) if node else self


NODE = Subject()

Value = float | int | str | bool | None


@dataclass(frozen=True)
class Verdict:
    check: str
    status: Status
    subject: Subject
    value: Value
    threshold: Value
    unit: str
    source: str
    remediation: Remediation
    message: str

    def as_dict(self) -> dict[str, object]:
        return {
            "check": self.check,
            "status": self.status.value,
            "subject": self.subject.label(),
            "value": self.value,
            "threshold": self.threshold,
            "unit": self.unit,
            "source": self.source,
            "remediation": self.remediation.value,
            "message": self.message,
        }


def _fmt(value: Value, unit: str) -> str:
    if not isinstance(value, float):
        return f"{value} {unit}".strip()
    text = f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def _non_finite(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _invalid(name: str, value: float, expected: Value, unit: str, subject: Subject, source: str) -> Verdict:
    """A figure that is not a finite number (inf, nan in the tool's output) is no measurement:
    never a pass, and no non-finite value is kept (JSON has none)."""
    return Verdict(name, Status.ERROR, subject, None, expected, unit, source, Remediation.RERUN,
                   f"{subject.label()}: {name} = {value} is not a finite number: not a valid measurement")


def judge(
    name: str,
    value: float | None,
    threshold: Threshold | None,
    unit: str,
    subject: Subject = NODE,
    *,
    remediation: Remediation = Remediation.RERUN,
    measured: Measured | None = None,
) -> Verdict:
    """Judge one number against one threshold (see the module docstring). `measured` is
    what the output says of its workload: outside the threshold's `applies_to`
    (`gpuctl.catalog.outside_workload`) the figure is reported, not judged
    (not-applicable, with the reason and the threshold it was not held to)."""
    where = subject.label()
    if threshold is None:
        return Verdict(name, Status.NO_THRESHOLD, subject, value, None, unit, "", Remediation.NONE,
                       f"{where}: {name} = {_fmt(value, unit)}; no threshold defined, not judged")
    if threshold.not_applicable:
        return Verdict(name, Status.NOT_APPLICABLE, subject, value, None, unit, threshold.source, Remediation.NONE,
                       f"{where}: {name} not applicable: {threshold.source}")
    if (why := outside_workload(threshold.applies_to, measured)) is not None:
        assert threshold.applies_to is not None
        limit = threshold.min if threshold.min is not None else threshold.max
        return Verdict(name, Status.NOT_APPLICABLE, subject, value, limit, unit,
                       f"{threshold.source}; workload: {threshold.applies_to.source}", Remediation.NONE,
                       f"{where}: {name} = {_fmt(value, unit)}, not judged: {why} (the {_fmt(limit, unit)} "
                       f"threshold is for {threshold.applies_to.describe()})")
    limit = threshold.min if threshold.min is not None else threshold.max
    if value is None:
        return Verdict(name, Status.ERROR, subject, None, limit, unit, threshold.source, Remediation.RERUN,
                       f"{where}: {name} was not measured")
    if _non_finite(value):
        return _invalid(name, value, limit, unit, subject, threshold.source)
    if threshold.min is not None:
        if value < threshold.min:
            status, rel = Status.FAIL, f"below the minimum {_fmt(threshold.min, unit)}"
        elif threshold.warn_below is not None and value < threshold.warn_below:
            status, rel = Status.WARN, f"above the minimum {_fmt(threshold.min, unit)} but below " \
                                       f"{_fmt(threshold.warn_below, unit)}"
        else:
            status, rel = Status.PASS, f">= {_fmt(threshold.min, unit)}"
    else:
        assert threshold.max is not None
        if value > threshold.max:
            status, rel = Status.FAIL, f"above the maximum {_fmt(threshold.max, unit)}"
        elif threshold.warn_above is not None and value > threshold.warn_above:
            status, rel = Status.WARN, f"within the maximum {_fmt(threshold.max, unit)} but above " \
                                       f"{_fmt(threshold.warn_above, unit)}"
        else:
            status, rel = Status.PASS, f"<= {_fmt(threshold.max, unit)}"
    return Verdict(name, status, subject, value, limit, unit, threshold.source,
                   Remediation.NONE if status is Status.PASS else remediation,
                   f"{where}: {name} = {_fmt(value, unit)}, {rel}")


def judge_fact(
    check: str,
    ok: bool,
    *,
    value: Value,
    expected: Value,
    subject: Subject = NODE,
    unit: str = "",
    source: str,
    remediation: Remediation,
    message: str,
    warn_only: bool = False,
) -> Verdict:
    """A yes/no finding ('model is X', 'port is Active'); `message` explains a failure.
    A non-finite measured value is an invalid measurement whatever `ok` says."""
    if _non_finite(value):
        return _invalid(check, value, expected, unit, subject, source)  # type: ignore[arg-type]
    if ok:
        status, rem, text = Status.PASS, Remediation.NONE, f"{subject.label()}: {check} = {_fmt(value, unit)}"
    else:
        status = Status.WARN if warn_only else Status.FAIL
        rem, text = remediation, f"{subject.label()}: {message}"
    return Verdict(check, status, subject, value, expected, unit, source, rem, text)


def could_not_run(check: str, reason: str, subject: Subject = NODE,
                  remediation: Remediation = Remediation.RERUN, source: str = "") -> Verdict:
    """The tool did not produce a measurement (distinct from a failed measurement)."""
    return Verdict(check, Status.ERROR, subject, None, None, "", source, remediation,
                   f"{subject.label()}: {check} could not run: {reason}")


def overall(verdicts: Iterable[Verdict]) -> Status:
    """fail > error > warn > pass; only no-threshold/not-applicable verdicts → no-threshold."""
    statuses = {v.status for v in verdicts}
    for s in (Status.FAIL, Status.ERROR, Status.WARN, Status.PASS):
        if s in statuses:
            return s
    return Status.NOT_APPLICABLE if statuses == {Status.NOT_APPLICABLE} else Status.NO_THRESHOLD


PARTIAL_SOURCE = ("gpuctl rule: a paste cut short (an elision line, a table without its end, fewer GPU sections "
                  "than the tool says it has) is judged for what it shows, so a fault in it is still reported; "
                  "what it does not show was not validated, so the paste is at best a warning, never a pass")


def partial_paste(tool: str, reason: str, subject: Subject = NODE) -> Verdict:
    """The warning every judge adds for a partial paste (see `PARTIAL_SOURCE`)."""
    return Verdict("partial_paste", Status.WARN, subject, reason, "the whole output", "", PARTIAL_SOURCE,
                   Remediation.RERUN, f"{subject.label()}: partial {tool} output ({reason}): what it shows is judged, "
                   "the rest is not validated; give the whole output")


def _threshold(sku: Sku | None, name: str) -> Threshold | None:
    return sku.thresholds.get(name) if sku is not None else None


# ---------------------------------------------------------------- nccl-tests

NCCL_WRONG_SOURCE = "nccl-tests: #wrong counts elements that differ from the expected result; any is a failure"

# The SKU bus-bandwidth thresholds of each collective: (one node, more than one node).
# The catalog's figures (catalog/skus/*.yaml) are all_reduce ones (the public health
# checks they come from run all_reduce_perf); another collective has none, so its bus
# bandwidth is reported and never judged (an all_gather's busbw is not an all_reduce's).
NCCL_THRESHOLDS: dict[str, tuple[str, str]] = {
    "all_reduce": ("all_reduce_busbw_gb_s", "multi_node_busbw_gb_s"),
}


def judge_nccl(result: NcclResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """#wrong = 0 always; with a SKU, the large-message bus bandwidth against the
    thresholds of the run's collective (`NCCL_THRESHOLDS`): for all_reduce,
    `all_reduce_busbw_gb_s` (one node) or `multi_node_busbw_gb_s` (ranks on more than one
    host, or more ranks than the SKU has GPUs). Another collective, or one the output does
    not identify, gives a no-threshold verdict naming it (never a pass).

    An output with several runs (`result.runs`) is judged run by run; each verdict names
    its run and that run's average bus bandwidth, so the worst run decides the status."""
    if not result.runs:
        return _judge_nccl_run(result, sku, subject)
    out = []
    prefix = f"{subject.label()}: "
    for run in result.runs:
        name = run.test or run.collective or "collective not identified"
        tag = f"run {run.run} of {len(result.runs)} ({name}, avg busbw {run.avg_busbw_gb_s:g} GB/s): "
        for v in _judge_nccl_run(run, sku, subject):
            text = v.message.removeprefix(prefix)
            out.append(replace(v, message=prefix + tag + text))
    return out


def _wrong_sizes(result: NcclResult) -> str:
    """'96 out-of-place + 32 in-place at 1048576 B' for the (first three) sizes with wrong elements."""
    parts = []
    for r in result.rows:
        cells = [f"{n} {where}" for n, where in ((r.oop_wrong, "out-of-place"), (r.ip_wrong, "in-place")) if n]
        if cells:
            parts.append(f"{' + '.join(cells)} at {r.size_bytes} B")
    more = f"; and {len(parts) - 3} more sizes" if len(parts) > 3 else ""
    return "; ".join(parts[:3]) + more


def _judge_nccl_run(result: NcclResult, sku: Sku | None, subject: Subject) -> list[Verdict]:
    out = []
    if result.validated or result.out_of_bounds:
        where = _wrong_sizes(result)
        oob = f"; nccl-tests: 'Out of bounds values : {result.out_of_bounds} FAILED'" if result.out_of_bounds else ""
        out.append(judge_fact(
            "nccl_wrong", result.wrong == 0 and not result.out_of_bounds, value=result.wrong, expected=0,
            subject=subject, source=NCCL_WRONG_SOURCE, remediation=Remediation.VENDOR_RMA,
            message=f"data check failed: {result.wrong} wrong elements"
                    + (f" ({where})" if where else "") + oob
                    + ": data corrupted in a collective (GPU, NVLink, NIC or network-stack fault)",
        ))
    else:
        out.append(Verdict("nccl_wrong", Status.NO_THRESHOLD, subject, None, 0, "", NCCL_WRONG_SOURCE,
                           Remediation.NONE, f"{subject.label()}: the run had validation off (#wrong N/A); "
                                             "correctness not checked"))
    if sku is None:
        return out
    value = result.large_msg_busbw_gb_s
    names = NCCL_THRESHOLDS.get(result.collective or "")
    if names is None:
        what = " or ".join(result.collective_candidates) or "a collective the output does not identify"
        check = f"{result.collective}_busbw_gb_s" if result.collective else "nccl_busbw_gb_s"
        judged = ", ".join(NCCL_THRESHOLDS)
        out.append(Verdict(
            check, Status.NO_THRESHOLD, subject, value, None, "GB/s", "", Remediation.NONE,
            f"{subject.label()}: {check} = {_fmt(value, 'GB/s')} at {result.largest_size_bytes:,} B; no threshold "
            f"for {what} (the SKU {sku.name} has bus-bandwidth thresholds for {judged} only), not judged; "
            f"collective from {result.collective_evidence or 'no evidence'}; run {judged}_perf for a judged figure",
        ))
        return out
    # more than one host in the Rank lines (a launcher may print only some of them), or
    # more ranks than one node of the SKU has GPUs
    multi = result.nodes > 1 or result.gpus > sku.gpu.count
    name = names[1] if multi else names[0]
    out.append(judge(name, value, _threshold(sku, name), "GB/s", subject,
                     remediation=Remediation.RECONFIGURE, measured=Measured(gpus_per_node=_gpus_per_node(result))))
    return out


def _gpus_per_node(result: NcclResult) -> int | None:
    """Ranks per node of an nccl-tests run: the ranks over the hosts of its Rank lines when
    they divide evenly (one host: all ranks); None when the output does not say."""
    if result.nodes == 0:
        return None
    per, rest = divmod(result.gpus, result.nodes)
    return per if rest == 0 and per > 0 else None


# ---------------------------------------------------------------- error counters: the change between two samples

# a counter sample: (subject, counter name) → value; the subject is a Subject (GPU and link, HCA port)
CounterSample = Mapping[tuple[Subject, str], int]


@dataclass(frozen=True)
class CounterDelta:
    subject: Subject
    counter: str
    before: int
    after: int

    @property
    def rise(self) -> int:
        return self.after - self.before


def counter_deltas(before: CounterSample, after: CounterSample) -> list[CounterDelta]:
    """The change of each counter present in both samples, in `after`'s order."""
    return [CounterDelta(subj, name, before[(subj, name)], value) for (subj, name), value in after.items()
            if (subj, name) in before]


def judge_counter_deltas(check: str, deltas: Sequence[CounterDelta], family: str,
                         subject: Subject = NODE) -> list[Verdict]:
    """The one rule for error counters (health.yaml `counter_rises[family]`): a counter that
    rose between two samples gets its status (warn or fail) per subject and counter; one
    that fell was reset between the samples (reboot, driver reload, counter clear) and is
    not judged (warn); with no rise, one pass naming how many counters were compared.
    Usable by any caller that has two samples (`counter_deltas`)."""
    rules = (load_health().counter_rises or {}).get(family)  # type: ignore[call-overload]
    if rules is None:
        return [Verdict(check, Status.NO_THRESHOLD, subject, None, None, "", "", Remediation.NONE,
                        f"{subject.label()}: {check}: no counter rule for {family} in health.yaml")]
    out = []
    for d in deltas:
        status = rules.counters.get(d.counter)
        if d.rise < 0:
            out.append(Verdict(check, Status.WARN, d.subject, d.rise, 0, "", rules.source, Remediation.RERUN,
                               f"{d.subject.label()}: {d.counter} fell from {d.before} to {d.after}: reset between "
                               "the samples (reboot, driver reload or a counter clear); not judged, sample again"))
        elif d.rise > 0 and status is not None:
            out.append(Verdict(check, Status(status), d.subject, d.rise, 0, "", rules.source,
                               Remediation.RESEAT_OR_REPLACE,
                               f"{d.subject.label()}: {d.counter} rose by {d.rise} ({d.before} → {d.after}) between "
                               "the samples: a marginal or flapping link (cable, transceiver, connector, port)"))
    if not out:
        rose = sorted({f"{d.counter} +{d.rise}" for d in deltas if d.rise > 0})
        out.append(Verdict(check, Status.PASS, subject, 0, 0, "", rules.source, Remediation.NONE,
                           f"{subject.label()}: {check}: none of the {len(deltas)} judged counters rose between "
                           "the samples" + (f" (rose, not judged: {', '.join(rose)})" if rose else "")))
    return out


def judge_counter_samples(check: str, samples: Sequence[CounterSample], family: str,
                          subject: Subject = NODE) -> list[Verdict]:
    """Counters given as samples: one sample is reported, not judged (absolute counts since
    the last reset say nothing of now); two or more are judged first → last
    (`judge_counter_deltas`)."""
    if len(samples) < 2:
        nonzero = sorted(f"{s.label()} {n} = {v}" for (s, n), v in (samples[0] if samples else {}).items() if v)
        return [Verdict(check, Status.NO_THRESHOLD, subject, len(nonzero), None, "counters", "", Remediation.NONE,
                        f"{subject.label()}: {check}: one sample: counts since the last reset are reported, not "
                        "judged; give two samples (the outputs concatenated, or --baseline FILE) to judge the "
                        "change" + (f"; non-zero: {'; '.join(nonzero[:8])}" if nonzero else "; all zero"))]
    return judge_counter_deltas(check, counter_deltas(samples[0], samples[-1]), family, subject)


def judge_nvlink_errors(result: NvlinkErrorsResult, sku: Sku | None = None,
                        subject: Subject = NODE) -> list[Verdict]:
    """NVLink error counters per GPU and link, judged as their change between the first and
    last sample (`judge_counter_samples`, health.yaml counter_rises.nvlink)."""
    samples = [{(Subject(subject.node, gpu=g, port=f"link {link}"), name): v for (g, link, name), v in s.items()}
               for s in result.samples]
    out = [partial_paste(TOOL_NVLINK_ERRORS, result.partial, subject)] if result.partial else []
    return out + judge_counter_samples("nvlink_error_counters", samples, "nvlink", subject)


TOOL_NVLINK_ERRORS = "nvidia-smi nvlink -e"


def judge_ib_counters(result: IbCountersResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """InfiniBand port error counters (perfquery or sysfs), judged as their change between
    the first and last sample (`judge_counter_samples`, health.yaml counter_rises.infiniband)."""
    samples = [{(Subject(subject.node, port=port), name): v for (port, name), v in s.items()}
               for s in result.samples]
    return judge_counter_samples("ib_port_counters", samples, "infiniband", subject)


# ---------------------------------------------------------------- lspci -vvv: ACS and AER

ACS_SOURCE = ("NCCL User Guide, Troubleshooting, PCI Access Control Services (ACS) (docs.nvidia.com/deeplearning/nccl/"
              "user-guide/docs/troubleshooting.html#pci-access-control-services-acs): ACS redirects peer-to-peer PCI "
              "traffic through the CPU root complex, which breaks or slows GPUDirect P2P and RDMA; NVIDIA/nccl#304")
_PCIEPORT = "PCIe port"  # lspci's `Kernel driver in use: pcieport` without the Express capability line
AER_SOURCE = ("PCI Express Base Specification, Advanced Error Reporting: Uncorrectable and Correctable Error Status "
              "registers (lspci -vvv UESta/CESta; a '+' is a status bit set since it was last cleared)")


def judge_acs(devices: Sequence[PciDevice], subject: Subject = NODE) -> list[Verdict]:
    """ACS request/completion redirect (ACSCtl ReqRedir+/CmpltRedir+): on a PCIe switch port
    or bridge it fails (peer traffic of the GPUs and NICs below it goes through the root
    complex); on a root port, or a device whose header the paste does not show, it warns.
    With no redirect anywhere, one pass naming how many devices have ACS."""
    out = []
    with_acs = [d for d in devices if d.acs_ctl is not None]
    for d in with_acs:
        flags = d.acs_redirect
        if not flags:
            continue
        s = Subject(subject.node, bus_id=d.bus_id)
        fix = (f"disable ACS in the BIOS, or until reboot: setpci -s {d.bus_id or 'BUS'} ECAP_ACS+0x6.w=0000 "
               "(PLX switches: f2a.w=0000)")
        what = f"ACS {'+ '.join(flags)}+ on "
        if d.is_bridge and d.port_type not in ("Root Port", _PCIEPORT):
            desc = f" ({d.description})" if d.description else ""
            out.append(judge_fact("acs_redirect", False, value=" ".join(f + "+" for f in flags), expected="off",
                                  subject=s, source=ACS_SOURCE, remediation=Remediation.RECONFIGURE,
                                  message=f"{what}PCIe bridge {d.bus_id}{desc}: GPUDirect P2P/RDMA traffic between "
                                          f"the devices below it is redirected through the root complex; {fix}"))
        else:
            if d.port_type == "Root Port":
                kind = "root port"
            elif d.is_bridge is False:
                kind = "an endpoint"
            elif d.port_type == _PCIEPORT:
                kind = "a PCIe port (pcieport driver) whose type, root or switch port, the paste does not show"
            else:
                kind = "a device whose bus id and type the paste does not show"
            out.append(judge_fact("acs_redirect", False, value=" ".join(f + "+" for f in flags), expected="off",
                                  subject=s, source=ACS_SOURCE, remediation=Remediation.RECONFIGURE, warn_only=True,
                                  message=f"{what}{kind} ({d.label}): it redirects peer traffic only if GPUs or NICs "
                                          "sit below it; give the whole lspci -vvv (or lspci -s BUS -vvv) to tell; "
                                          f"{fix}"))
    if with_acs and not out:
        out.append(Verdict("acs_redirect", Status.PASS, subject, 0, 0, "devices", ACS_SOURCE, Remediation.NONE,
                           f"{subject.label()}: acs_redirect: no request/completion redirect on the {len(with_acs)} "
                           "devices with an ACSCtl line"))
    return out


def judge_aer(devices: Sequence[PciDevice], subject: Subject = NODE) -> list[Verdict]:
    """AER status bits set: an uncorrectable error (UESta) fails the device, correctable
    errors (CESta) warn; a device with AER and nothing set passes (one summary)."""
    out = []
    with_aer = [d for d in devices if d.ue_status is not None or d.ce_status is not None]
    for d in with_aer:
        ue = [k for k, on in (d.ue_status or {}).items() if on]
        ce = [k for k, on in (d.ce_status or {}).items() if on]
        if not ue and not ce:
            continue
        s = Subject(subject.node, bus_id=d.bus_id)
        value = "; ".join(x for x in (f"UESta {' '.join(u + '+' for u in ue)}" if ue else "",
                                      f"CESta {' '.join(c + '+' for c in ce)}" if ce else "") if x)
        out.append(judge_fact("pcie_aer", False, value=value, expected="no status bit set", subject=s,
                              source=AER_SOURCE, remediation=Remediation.RESEAT_OR_REPLACE, warn_only=not ue,
                              message=f"PCIe AER on {d.label}: {value}: "
                                      + ("uncorrectable errors on the link or device (reseat, then replace)" if ue else
                                         "corrected errors: the link retried (a marginal link, riser or slot if they "
                                         "keep rising)")))
    if with_aer and not out:
        out.append(Verdict("pcie_aer", Status.PASS, subject, 0, 0, "devices", AER_SOURCE, Remediation.NONE,
                           f"{subject.label()}: pcie_aer: no AER status bit set on {len(with_aer)} devices"))
    return out


def judge_lspci(result: LspciResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """ACS redirect (`judge_acs`) and AER status (`judge_aer`) of an `lspci -vvv`."""
    return [*judge_acs(result.devices, subject), *judge_aer(result.devices, subject)]


# ---------------------------------------------------------------- NCCL debug log: NET/IB completion errors

# what an ibv_wc_status in an NCCL NET/IB completion error says, and what to do
_WC_CAUSE: dict[int, tuple[Remediation, str]] = {
    12: (Remediation.RESEAT_OR_REPLACE, "no ACK from the peer within the retries: the link between the two hosts "
         "(cable, transceiver, switch port, RoCE routing/GID) or the peer process died; check ibstat and the port "
         "counters on both HCAs, then ib_write_bw between them"),
    13: (Remediation.RESEAT_OR_REPLACE, "the peer was not ready to receive within the RNR retries"),
    20: (Remediation.RESEAT_OR_REPLACE, "no response from the peer (response timeout)"),
    5: (Remediation.RESEAT_OR_REPLACE, "flushed: a consequence of an earlier error on this connection (look for the "
        "first error between the same hosts)"),
    4: (Remediation.RECONFIGURE, "the local HCA could not access the registered memory: GPUDirect RDMA "
        "(nvidia-peermem), ACS or the IOMMU on this host, not the network"),
    8: (Remediation.RECONFIGURE, "local access error: memory registration on this host, not the network"),
    10: (Remediation.RECONFIGURE, "the peer's HCA refused the access: memory registration or GPUDirect RDMA "
         "on the peer"),
}
NCCL_IB_SOURCE = (f"NCCL net_ib WARN 'Got completion from peer'; {WC_STATUS_SOURCE}; NCCL troubleshooting guide "
                  "(docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#networking-issues)")


def judge_ib_completions(completions: Sequence[IbCompletion], subject: Subject = NODE) -> list[Verdict]:
    """Each NET/IB work completion error, grouped by (logging host, peer, status): a fault
    between the two named hosts, the status decoded (rdma-core ibv_wc_status), with the
    likely cause. Pure: the completions come from `gpuctl.parsers.nccl_log`."""
    groups: dict[tuple[str | None, str | None, int], list[IbCompletion]] = {}
    for c in completions:
        groups.setdefault((c.host, c.peer_address, c.status), []).append(c)
    out = []
    for (host, peer, status), items in groups.items():
        first = items[0]
        rem, cause = _WC_CAUSE.get(status, (Remediation.RERUN, "see the ibv_wc_status meaning"))
        hcas = sorted({c.hca for c in items if c.hca})
        dirs = sorted({c.direction for c in items if c.direction})
        vendor = sorted({c.vendor_err for c in items if c.vendor_err is not None})
        where = f"{host or 'the logging host'}" + (f" GPU [{first.device}]" if first.device is not None else "")
        between = f"between {where} and peer {peer}" if peer else f"on {where} (the line names no peer)"
        detail = ", ".join(x for x in (
            f"hca {', '.join(hcas)}" if hcas else "", f"{'/'.join(dirs)}" if dirs else "",
            f"vendor err {', '.join(f'{x} (0x{x:x})' for x in vendor)}" if vendor else "") if x)
        s = Subject(host or subject.node, port=", ".join(hcas) or None)
        out.append(Verdict(
            "nccl_ib_completion", Status.FAIL, s, f"{first.status_name}({status})", "no completion error", "",
            NCCL_IB_SOURCE, rem,
            f"{s.label()}: NET/IB completion error {between}: status {status} {first.status_name} "
            f"({first.status_text}){f', {detail}' if detail else ''}; {len(items)} line(s) from line {first.line}: "
            f"{cause}"))
    return out


def judge_nccl_log(result: NcclLogResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """The NET/IB completion errors of an NCCL debug log (`judge_ib_completions`); a log
    without any says so (a pass of this one fact, not of the run)."""
    if result.completions:
        return judge_ib_completions(result.completions, subject)
    return [Verdict("nccl_ib_completion", Status.PASS, subject, 0, 0, "errors", NCCL_IB_SOURCE, Remediation.NONE,
                    f"{subject.label()}: no NET/IB completion error in {result.nccl_lines} NCCL lines"
                    + (f" from {', '.join(result.hosts)}" if result.hosts else ""))]


# ---------------------------------------------------------------- topo -m

TOPO_SOURCE = "nvidia-smi topo -m: a connection matrix is symmetric"


def judge_nvlink_pair(link: TopoLink, sku: Sku, subject: Subject = NODE) -> Verdict:
    """One GPU pair of `topo -m` against the SKU's NVLink bond (code, e.g. NV18): the one rule,
    shared by `gpuctl analyze topo` and verify (nvidia_driver.nvlink_pair). No NVLink at all is
    an RMA; fewer links a reseat. The SKU must have a topo code."""
    code = sku.nvlink.topo_code
    pair = Subject(subject.node, int(link.a[3:]), None, int(link.b[3:]))
    rem = Remediation.VENDOR_RMA if link.nvlinks == 0 else Remediation.RESEAT_OR_REPLACE
    why = "no NVLink at all (PCIe/SMP path)" if link.nvlinks == 0 else f"only {link.nvlinks} NVLinks"
    return judge_fact("nvlink_pair", link.code == code, value=link.code, expected=code, subject=pair,
                      source=sku.nvlink.source, remediation=rem,
                      message=f"{link.a}↔{link.b} is {link.code}, expected {code}: {why}")


def judge_topo(result: TopoResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    out = []
    asym = result.asymmetric_pairs()
    out.append(judge_fact(
        "topo_symmetric", not asym, value=not asym, expected=True, subject=subject, source=TOPO_SOURCE,
        remediation=Remediation.RERUN,
        message="matrix not symmetric: " + ", ".join(f"{a}→{b} {x} but {b}→{a} {y}" for a, b, x, y in asym),
    ))
    for note in result.notes:
        out.append(Verdict("topo_nic_columns", Status.WARN, subject, None, None, "", TOPO_SOURCE, Remediation.RERUN,
                           f"{subject.label()}: {note}; NIC affinity not judged (rerun `nvidia-smi topo -m | cat` "
                           "or widen the terminal)"))
    if sku is None:
        return out
    out.append(judge_gpu_count(len(result.gpus), sku, subject, "in topo -m"))
    code = sku.nvlink.topo_code
    if code is None:
        out.append(Verdict("nvlink_topology", Status.NOT_APPLICABLE, subject, None, None, "", sku.nvlink.source,
                           Remediation.NONE, f"{subject.label()}: {sku.name} has no NVLink peers to check"))
        return out
    bad = result.unconnected_pairs(code)
    out.extend(judge_nvlink_pair(link, sku, subject) for link in bad)
    if not bad:
        mesh = result.nvlink_full_mesh(code)
        out.append(judge_fact(
            "nvlink_full_mesh", mesh, value=code if mesh else None, expected=code, subject=subject,
            source=sku.nvlink.source, remediation=Remediation.VENDOR_RMA,
            message=f"no GPU pairs to check (expected {code} between all {sku.gpu.count} GPUs)",
        ))
    return out + _gpu_nic_paths(result, sku, subject)


def _gpu_nic_paths(result: TopoResult, sku: Sku, subject: Subject) -> list[Verdict]:
    """One `gpu_nic_path` verdict per GPU: its nearest NIC must be no farther than the
    SKU's `fabric.gpu_nic_max_path` (PIX < PXB < PHB < NODE < SYS). Not judged when the
    SKU names no limit, or the NIC part of the matrix was not read (already a warning)."""
    limit = sku.fabric.gpu_nic_max_path
    if limit is None or result.notes:
        return []
    if not result.nics:
        return [Verdict("gpu_nic_path", Status.NOT_APPLICABLE, subject, None, limit.code, "", limit.source,
                        Remediation.NONE, f"{subject.label()}: no NIC in this topo -m (RDMA devices not visible "
                        "here?); GPU–NIC paths not judged")]
    # NIC sites, not NIC names: the ports and virtual functions of one adapter are one place
    why = outside_workload(limit.applies_to, Measured(nics=len(result.nic_sites()), gpus=len(result.gpus)))
    if why is not None:
        assert limit.applies_to is not None
        out = []
        for gpu in result.gpus:
            near = result.nearest_nic(gpu)
            out.append(Verdict(
                "gpu_nic_path", Status.NOT_APPLICABLE, Subject(subject.node, int(gpu[3:])), near[1] if near else None,
                limit.code, "", f"{limit.source}; workload: {limit.applies_to.source}", Remediation.NONE,
                f"{subject.label()}: {gpu}: nearest NIC "
                + (f"{result.nic_label(near[0])} is {near[1]}" if near else "none over PCIe")
                + f", not judged: {why} (the {limit.code}-or-nearer rule is for {limit.applies_to.describe()})"))
        return out
    out = []
    for gpu in result.gpus:
        s = Subject(subject.node, int(gpu[3:]))
        near = result.nearest_nic(gpu)
        nic, code = near if near else (None, None)
        rank = path_rank(code) if code else None
        out.append(judge_fact(
            "gpu_nic_path", rank is not None and rank <= PCIE_PATHS.index(limit.code), value=code,
            expected=limit.code, subject=s, source=limit.source, remediation=Remediation.RESEAT_OR_REPLACE,
            message=(f"nearest NIC {result.nic_label(nic)} is {code}, expected {limit.code} or nearer: "
                     "GPUDirect RDMA crosses the host bridge (compute NIC missing, dead or in another slot)"
                     if nic else "no NIC reachable over PCIe"),
        ))
    return out


# ---------------------------------------------------------------- nvidia-smi


def _gpu_subject(gpu: GpuInfo, node: Subject) -> Subject:
    return Subject(node.node, gpu.index, gpu.bus_id)


def _health_verdicts(gpu: GpuInfo, health: Health, subject: Subject) -> list[Verdict]:
    ecc = health.ecc
    out = []
    if gpu.ecc_mode is not None:
        out.append(judge_fact("ecc_mode", gpu.ecc_mode, value="Enabled" if gpu.ecc_mode else "Disabled",
                              expected="Enabled", subject=subject, source=ecc.max_uncorrectable.source,
                              remediation=Remediation.RECONFIGURE,
                              message="ECC is disabled (nvidia-smi -e 1, then reboot)"))
    if gpu.persistence_mode is not None:
        out.append(judge_fact("persistence_mode", gpu.persistence_mode,
                              value="Enabled" if gpu.persistence_mode else "Disabled", expected="Enabled",
                              subject=subject, source="gpuctl base role: nvidia-persistenced keeps the driver loaded",
                              remediation=Remediation.RECONFIGURE,
                              message="persistence mode is off (enable nvidia-persistenced)"))
    out.extend(judge_ecc_counts(gpu, ecc, subject))
    if gpu.sram_threshold_exceeded is not None and ecc.sram_threshold is not None:
        out.append(judge_fact("sram_threshold_exceeded", not gpu.sram_threshold_exceeded,
                              value=gpu.sram_threshold_exceeded, expected=False, subject=subject,
                              source=ecc.sram_threshold.source, remediation=Remediation.VENDOR_RMA,
                              message="SRAM uncorrectable-error threshold exceeded: RMA"))
    if gpu.retired_pending is not None:
        out.append(judge_fact("retired_pages_pending", not gpu.retired_pending, value=gpu.retired_pending,
                              expected=False, subject=subject, source=ecc.max_uncorrectable.source,
                              remediation=Remediation.REBOOT,
                              message="page retirement pending: reboot to retire the pages"))
    if gpu.remap_pending is not None:
        out.append(judge_fact("remapped_rows_pending", not gpu.remap_pending, value=gpu.remap_pending,
                              expected=False, subject=subject, source=ecc.max_uncorrectable.source,
                              remediation=Remediation.REBOOT,
                              message="row remapping pending: reset the GPU or reboot"))
    if gpu.remap_failure is not None:
        out.append(judge_fact("remapped_rows_failure", not gpu.remap_failure, value=gpu.remap_failure,
                              expected=False, subject=subject, source=ecc.max_uncorrectable.source,
                              remediation=Remediation.VENDOR_RMA,
                              message="row remapping failed: the GPU has run out of spare rows"))
    return out


def judge_ecc_counts(gpu: GpuInfo, ecc: EccLimits, subject: Subject) -> list[Verdict]:
    """The one rule for a GPU's ECC error counts, shared by `gpuctl analyze` and verify
    (nvidia_driver.gpu_ecc_errors): uncorrectable volatile → reboot; uncorrectable aggregate →
    RMA unless its rows were remapped (`_remapped_verdict`); corrected DRAM/SRAM within limits."""
    out = []
    for field_, label in (("ecc_volatile_uncorrectable", "volatile"), ("ecc_aggregate_uncorrectable", "aggregate")):
        val = getattr(gpu, field_)
        if val is not None:
            lim = ecc.max_uncorrectable.value
            if label == "aggregate" and val > lim and (remapped := _remapped_verdict(gpu, val, ecc, subject)):
                out.append(remapped)
                continue
            out.append(judge_fact(field_, val <= lim, value=val, expected=lim, subject=subject,
                                  source=ecc.max_uncorrectable.source,
                                  remediation=Remediation.REBOOT if label == "volatile" else Remediation.VENDOR_RMA,
                                  message=f"{val} uncorrectable ECC errors ({label}), limit {lim:g}"))
    corrected = (("ecc_dram_correctable", ecc.max_dram_corrected), ("ecc_sram_correctable", ecc.max_sram_corrected))
    for field_, fig in corrected:
        val = getattr(gpu, field_)
        if val is not None:
            out.append(judge_fact(field_, val <= fig.value, value=val, expected=fig.value, subject=subject,
                                  source=fig.source, remediation=Remediation.VENDOR_RMA,
                                  message=f"{val} corrected ECC errors, limit {fig.value:g}"))
    return out


def _remapped_verdict(gpu: GpuInfo, count: int, ecc: EccLimits, subject: Subject) -> Verdict | None:
    """The aggregate uncorrectable count of a GPU with row remapping (A100 and later): rows
    remapped with nothing pending and no failure is healthy (a note); pending is a reset;
    a remapping failure is the RMA case. None: no row-remapping data, judge as before."""
    fig = ecc.remapped_uncorrectable_ok
    if fig is None or not fig.value or gpu.remap_failure is None or gpu.remap_pending is None:
        return None
    if gpu.ecc_sram_uncorrectable:  # SRAM errors are not remapped: judged as before
        return None
    check = "ecc_aggregate_uncorrectable"
    if gpu.remap_failure:
        return judge_fact(check, False, value=count, expected=0, subject=subject, source=fig.source,
                          remediation=Remediation.VENDOR_RMA,
                          message=f"{count} uncorrectable ECC errors (aggregate) and row remapping failed: RMA")
    if gpu.remap_pending:
        return judge_fact(check, False, value=count, expected=0, subject=subject, source=fig.source,
                          remediation=Remediation.REBOOT,
                          message=f"{count} uncorrectable ECC errors (aggregate), row remapping pending: "
                                  "reset the GPU or reboot")
    rows = f"{gpu.remapped_uncorrectable} row(s) remapped" if gpu.remapped_uncorrectable else "rows remapped"
    return Verdict(check, Status.PASS, subject, count, 0, "", fig.source, Remediation.NONE,
                   f"{subject.label()}: {check} = {count}; {rows}, none pending, no remapping failure "
                   "(handled by row remapping, not an RMA)")


def _link_verdicts(gpu: GpuInfo, health: Health, subject: Subject) -> list[Verdict]:
    """Current PCIe link against the GPU's own maximum (used when no SKU is given)."""
    link = health.pcie_link
    out: list[Verdict] = []
    if link is None:
        return out
    if gpu.pcie_width_current is not None and gpu.pcie_width_max:
        fig = link.min_width_fraction_of_max
        want = gpu.pcie_width_max * fig.value
        out.append(judge_fact("pcie_width", gpu.pcie_width_current >= want, value=gpu.pcie_width_current,
                              expected=gpu.pcie_width_max, unit="lanes", subject=subject, source=fig.source,
                              remediation=Remediation.RESEAT_OR_REPLACE,
                              message=f"PCIe link trained at x{gpu.pcie_width_current} of its maximum "
                                      f"x{gpu.pcie_width_max} (lost lanes: seating, riser or slot)"))
    if gpu.pcie_gen_current is not None and gpu.pcie_gen_max and link.gen_below_max_warns.value:
        out.append(judge_fact("pcie_gen_current", gpu.pcie_gen_current >= gpu.pcie_gen_max,
                              value=gpu.pcie_gen_current, expected=gpu.pcie_gen_max, subject=subject,
                              source=link.gen_below_max_warns.source, remediation=Remediation.RERUN, warn_only=True,
                              message=f"running at PCIe Gen{gpu.pcie_gen_current} of its maximum "
                                      f"Gen{gpu.pcie_gen_max} (idle power saving? rerun under load)"))
    return out


CLOCK_EVENTS_SOURCE = ("NVML API reference, nvmlClocksEventReasons (docs.nvidia.com/deploy/nvml-api/"
                       "group__nvmlClocksEventReasons.html): HW Slowdown halves the clocks or more (temperature, "
                       "external power brake, power draw above Fast Trigger); HW Thermal / HW Power Brake / SW Thermal "
                       "Slowdown name the cause; Idle, SW Power Cap, Applications Clocks Setting, Sync Boost and "
                       "Display Clock Setting are settings or idle, not faults")
# clock event reasons that are faults, with what to do; the others are settings or idle
_CLOCK_FAULTS: dict[str, tuple[Remediation, str]] = {
    "HW Slowdown": (Remediation.RESEAT_OR_REPLACE, "check the GPU's power cables, PSUs and cooling"),
    "HW Thermal Slowdown": (Remediation.RESEAT_OR_REPLACE, "over temperature: check fans, airflow, heatsink seating"),
    "HW Power Brake Slowdown": (Remediation.RESEAT_OR_REPLACE,
                                "external power brake asserted: check the PSUs and the board's power cables"),
    "SW Thermal Slowdown": (Remediation.RESEAT_OR_REPLACE,
                            "the driver holds clocks down for temperature: check fans, airflow, heatsink seating"),
}


def judge_clock_events(gpu: GpuInfo, node: Subject = NODE) -> list[Verdict]:
    """One GPU's active clock event (throttle) reasons: a HW/thermal slowdown fails the GPU;
    a setting or idle is a note. Idle and idle-clock reasons mean something only on a
    load-free sample (a health check samples with nothing running); a slowdown is a fault
    whenever it is seen. [] when the output has no clock event section."""
    if gpu.clock_events is None:
        return []
    return judge_clock_event_reasons([name for name, on in gpu.clock_events if on], _gpu_subject(gpu, node))


def judge_clock_event_reasons(active: Sequence[str], subject: Subject) -> list[Verdict]:
    """The one rule of which active clock event reasons (named as `nvidia-smi -q` prints them,
    `CLOCK_EVENT_NAMES`) are faults: a HW/thermal slowdown fails the GPU, the others are
    settings or idle (a note). Used by `judge_clock_events` (nvidia-smi -q/XML) and by
    `gpuctl health` (its --query-gpu CSV, names mapped)."""
    faults = [n for n in active if n in _CLOCK_FAULTS]
    notes = [n for n in active if n not in _CLOCK_FAULTS]
    check = "clock_event_reasons"
    if faults:
        rem = _CLOCK_FAULTS[faults[-1]][0]
        what = "; ".join(f"{n}: {_CLOCK_FAULTS[n][1]}" for n in faults)
        return [judge_fact(check, False, value=", ".join(faults), expected="no HW/thermal slowdown", subject=subject,
                           source=CLOCK_EVENTS_SOURCE, remediation=rem,
                           message=f"clocks held down: {what}"
                                   + (f" (also active, not faults: {', '.join(notes)})" if notes else ""))]
    shown = ", ".join(notes) if notes else "none"
    return [Verdict(check, Status.PASS, subject, shown, "no HW/thermal slowdown", "", CLOCK_EVENTS_SOURCE,
                    Remediation.NONE, f"{subject.label()}: {check}: no HW or thermal slowdown; active: {shown}"
                    + (" (settings or idle, not faults; idle reasons mean something only on a load-free sample)"
                       if notes else ""))]


FABRIC_SOURCE = ("NVML nvmlGpuFabricInfo_v2_t/_v3_t (docs.nvidia.com/deploy/nvml-api): state is Not Started, In "
                 "Progress or Completed; status is to be checked once state is Completed; v3 adds a health summary; "
                 "clique ID with cluster UUID "
                 "identify the NVLink domain (NVIDIA/nccl#1301: the clique ID alone is not unique)")
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def judge_fabric(gpus: Sequence[GpuInfo], sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """The Fabric section of each GPU: a GPU that reports a fabric state (NVSwitch and
    multi-node NVLink systems; others print N/A) must be Completed with Status Success; on
    a SKU with NVSwitch a GPU without any fabric state fails too. Where any GPU names a
    (non-zero) cluster UUID the node is part of a multi-node NVLink domain: every GPU must
    report a clique ID and cluster UUID, and all GPUs of the node the same ones."""
    nvswitch = bool(sku is not None and sku.nvlink.nvswitch)
    out: list[Verdict] = []
    for gpu in gpus:
        s = _gpu_subject(gpu, subject)
        state, status = gpu.fabric_state, gpu.fabric_status
        if not gpu.fabric_section or (state is None and not nvswitch):
            continue
        ok = state == "Completed" and status == "Success"
        if state is None:
            # NVML reports the fabric state for Hopper and later only: an A100 HGX prints N/A too
            out.append(judge_fact("fabric_state", False, value="N/A", expected="Completed/Success", subject=s,
                                  source=FABRIC_SOURCE, remediation=Remediation.RECONFIGURE, warn_only=True,
                                  message="no fabric state reported on an NVSwitch SKU: on Hopper and later, check "
                                          "that nvidia-fabricmanager is installed and running (GPUs before "
                                          "Hopper do not report it)"))
            continue
        if state != "Completed":
            why = (f"fabric registration {state}: nvidia-fabricmanager has not finished (check the service and its "
                   "log; CUDA fails with 'system not yet initialized' until it does)")
        else:
            why = f"fabric state Completed with status {status!r}: the NVLink fabric failed to set up this GPU"
        out.append(judge_fact("fabric_state", ok, value=f"{state}/{status}", expected="Completed/Success", subject=s,
                              source=FABRIC_SOURCE + (f"; {sku.nvlink.source}" if nvswitch and sku else ""),
                              remediation=Remediation.REBOOT, message=why))
        if gpu.fabric_health is not None:
            out.append(judge_fact("fabric_health", gpu.fabric_health != "Unhealthy", value=gpu.fabric_health,
                                  expected="not Unhealthy", subject=s, source=FABRIC_SOURCE,
                                  remediation=Remediation.RESEAT_OR_REPLACE,
                                  message="fabric health summary Unhealthy: an NVLink route or link of this GPU "
                                          "is degraded (nvidia-smi -q Fabric / Health, nvidia-smi nvlink -e)"))
    clusters = {g.fabric_cluster_uuid for g in gpus if g.fabric_cluster_uuid not in (None, _ZERO_UUID)}
    if clusters:
        ids = {(g.fabric_clique_id, g.fabric_cluster_uuid) for g in gpus}
        missing = [g for g in gpus if g.fabric_clique_id is None or g.fabric_cluster_uuid in (None, _ZERO_UUID)]
        ok = not missing and len(ids) == 1
        value = "; ".join(f"clique {c} cluster {u}" for c, u in sorted(ids, key=str))
        out.append(judge_fact(
            "fabric_clique", ok, value=value, expected="one clique and cluster for all GPUs", subject=subject,
            source=FABRIC_SOURCE, remediation=Remediation.REBOOT,
            message=(f"{', '.join(g.label for g in missing)} without a clique ID or cluster UUID" if missing else
                     f"the node's GPUs are in {len(ids)} cliques ({value})")
            + ": multi-node NVLink needs every GPU of a node in one clique (check the IMEX/fabric manager setup)"))
    return out


def judge_gpu_against_sku(gpu: GpuInfo, sku: Sku, subject: Subject) -> list[Verdict]:
    """One GPU against its SKU: model, memory, PCIe generation (max; a lower current one only
    warns) and current width. The one rule for these facts, shared by `gpuctl analyze` and
    verify (nvidia_driver.gpu_model, gpu_memory, gpu_pcie_gen, gpu_pcie_width)."""
    out: list[Verdict] = []
    s = subject
    if gpu.name is not None:
        out.append(judge_fact("gpu_model", gpu.name == sku.gpu.model, value=gpu.name, expected=sku.gpu.model,
                              subject=s, source=sku.gpu.source, remediation=Remediation.VENDOR_RMA,
                              message=f"model {gpu.name!r}, expected {sku.gpu.model!r}"))
    if gpu.memory_total_mib is not None:
        out.append(judge_fact("memory_total_mib", gpu.memory_total_mib >= sku.gpu.memory_mib,
                              value=gpu.memory_total_mib, expected=sku.gpu.memory_mib, unit="MiB", subject=s,
                              source=sku.gpu.source, remediation=Remediation.VENDOR_RMA,
                              message=f"{gpu.memory_total_mib} MiB of GPU memory, expected {sku.gpu.memory_mib}"))
    pcie = sku.pcie
    if gpu.pcie_gen_max is not None:
        out.append(judge_pcie_gen_max(gpu.pcie_gen_max, pcie.generation, s, pcie.source))
    if gpu.pcie_gen_current is not None:
        out.append(judge_fact("pcie_gen_current", gpu.pcie_gen_current >= pcie.generation,
                              value=gpu.pcie_gen_current, expected=pcie.generation, subject=s,
                              source=pcie.source, remediation=Remediation.RERUN, warn_only=True,
                              message=f"running at PCIe Gen{gpu.pcie_gen_current}, expected Gen{pcie.generation}"
                                      " (idle power saving? rerun under load)"))
    if gpu.pcie_width_current is not None:
        out.append(judge_pcie_width(gpu.pcie_width_current, pcie.width, s, pcie.source))
    return out


def judge_pcie_width(current: int | None, expected: int, subject: Subject, source: str,
                     check: str = "pcie_width") -> Verdict:
    """A GPU's current PCIe link width against the SKU's: fewer lanes is a seating, riser or slot
    fault. The one rule for analyze, verify (gpu_pcie_width) and preflight (from sysfs)."""
    return judge_fact(check, current is not None and current >= expected, value=current, expected=expected,
                      unit="lanes", subject=subject, source=source, remediation=Remediation.RESEAT_OR_REPLACE,
                      message=f"PCIe link trained at x{current}, expected x{expected}")


def judge_pcie_gen_max(gen_max: int | None, expected: int, subject: Subject, source: str,
                       check: str = "pcie_gen_max") -> Verdict:
    """The generation a GPU's PCIe link is capable of against the SKU's (the current one drops at
    idle and is not judged here): the one rule for analyze, verify (gpu_pcie_gen) and preflight."""
    return judge_fact(check, gen_max is not None and gen_max >= expected, value=gen_max, expected=expected,
                      subject=subject, source=source, remediation=Remediation.RECONFIGURE,
                      message=f"link capable of PCIe Gen{gen_max} only, expected Gen{expected} "
                              "(BIOS slot setting or riser)")


def judge_gpu_count(count: int, sku: Sku, subject: Subject, where: str = "visible") -> Verdict:
    """The number of GPUs the node shows against its SKU (analyze's nvidia-smi and topo -m, verify's gpu_count)."""
    return judge_fact("gpu_count", count == sku.gpu.count, value=count, expected=sku.gpu.count, subject=subject,
                      source=sku.gpu.source, remediation=Remediation.RESEAT_OR_REPLACE,
                      message=f"{count} GPUs {where}, the SKU {sku.name} has {sku.gpu.count}")


def judge_nvidia_smi(result: NvidiaSmiResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """ECC, retired pages and row remapping against `load_health()` always; with a SKU,
    GPU count, model, memory and PCIe generation/width, each naming GPU and bus id.

    PCIe: the maximum generation and the current width must match the SKU (a GPU trained
    down to x8 fails); a lower *current* generation only warns, because idle GPUs drop
    to Gen1 to save power — rerun under load to confirm."""
    health = load_health()
    out: list[Verdict] = []
    if result.partial:
        # the GPUs it does not show are not judged (nor counted); the ones it shows are
        out.append(partial_paste(f"nvidia-smi -{result.format}", result.partial, subject))
    elif sku is not None:
        out.append(judge_gpu_count(len(result.gpus), sku, subject))
    out.extend(judge_fabric(result.gpus, sku, subject))
    for gpu in result.gpus:
        s = _gpu_subject(gpu, subject)
        out.extend(_health_verdicts(gpu, health, s))
        out.extend(judge_clock_events(gpu, subject))
        if sku is None:
            out.extend(_link_verdicts(gpu, health, s))
            continue
        out.extend(judge_gpu_against_sku(gpu, sku, s))
    return out


# ---------------------------------------------------------------- nvlink --status


# A link's speed below this share of the SKU's per-link figure is judged trained down.
_NVLINK_SPEED_TOLERANCE = 0.95


def judge_nvlink(result: NvlinkResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """Per GPU: all links inactive fails (fabric manager down or a fault).

    With a SKU: the GPU count (a paste of one GPU, `nvidia-smi nvlink -s -i N`, is not
    counted), the active links against the SKU's links per GPU, and each active link's speed
    against the SKU's per-link figure (per-GPU NVLink bandwidth, bidirectional, ÷ 2 ÷ links).

    Without a SKU nothing says how many links a GPU should have: an NVLink-bridged PCIe
    card uses 12 of its 18 by design. Inactive links every GPU shares are a warning; a GPU
    with fewer active links than its peers is the odd one out and fails.
    """
    if not result.gpus:
        # nvidia-smi nvlink -s prints nothing when no GPU has NVLink
        want = sku.nvlink.links_per_gpu if sku else None
        return [judge_fact("nvlink_active", want == 0, value=0, expected=want, unit="links", subject=subject,
                           source=sku.nvlink.source if sku else NVLINK_TOOL,
                           remediation=Remediation.REBOOT if sku else Remediation.NONE,
                           warn_only=sku is None,
                           message=("no GPU reports NVLink (nvidia-smi nvlink --status printed nothing, or the "
                                    "paste is empty); " + (f"the SKU {sku.name} has {want} links per GPU: check "
                                    "nvidia-fabricmanager and the driver, then reboot" if sku else
                                    "without --sku it is not known whether this machine should have NVLink")))]
    out: list[Verdict] = []
    if result.partial:
        out.append(partial_paste(NVLINK_TOOL, result.partial, subject))
    if sku is not None and len(result.gpus) > 1:
        n = len(result.gpus)
        out.append(judge_fact("gpu_count", n == sku.gpu.count, value=n, expected=sku.gpu.count, subject=subject,
                              source=sku.gpu.source, remediation=Remediation.RESEAT_OR_REPLACE,
                              message=f"{n} GPUs in nvidia-smi nvlink --status, the SKU {sku.name} has "
                                      f"{sku.gpu.count}"))
    most = max((g.active_links for g in result.gpus if not g.all_inactive and not g.cut), default=0)
    for gpu in result.gpus:
        s = Subject(subject.node, gpu.index)
        if gpu.cut and not gpu.all_inactive:
            continue  # its link list is elided: how many links it has is not known (partial_paste says so)
        if gpu.all_inactive:
            out.append(judge_fact("nvlink_active", False, value=0, expected=sku.nvlink.links_per_gpu if sku else None,
                                  subject=s, source="nvidia-smi nvlink --status", remediation=Remediation.REBOOT,
                                  message="all NVLinks inactive (fabric manager down or a link fault; "
                                          "check nvidia-fabricmanager, then reboot)"))
            continue
        inactive = [link.link for link in gpu.links if not link.active]
        listed = f" (inactive: {', '.join(map(str, inactive))})" if inactive else ""
        if sku is None:
            if gpu.active_links < most:
                out.append(judge_fact("nvlink_active", False, value=gpu.active_links, expected=most, unit="links",
                                      subject=s, source="nvidia-smi nvlink --status: its peers",
                                      remediation=Remediation.RESEAT_OR_REPLACE,
                                      message=f"{gpu.active_links} NVLinks active, its peers have {most}{listed}"))
            else:
                out.append(judge_fact("nvlink_active", not inactive, value=gpu.active_links, expected=len(gpu.links),
                                      unit="links", subject=s, source="nvidia-smi nvlink --status",
                                      remediation=Remediation.RESEAT_OR_REPLACE, warn_only=True,
                                      message=f"{gpu.active_links} of {len(gpu.links)} NVLinks active{listed}; "
                                              "without --sku it is not known how many this GPU should have "
                                              "(an NVLink bridge uses fewer)"))
            continue
        want = sku.nvlink.links_per_gpu
        out.append(judge_fact("nvlink_active", gpu.active_links >= want, value=gpu.active_links, expected=want,
                              unit="links", subject=s, source=sku.nvlink.source,
                              remediation=Remediation.RESEAT_OR_REPLACE,
                              message=f"{gpu.active_links} of {want} NVLinks active{listed}"))
        bw = sku.nvlink.per_gpu_bandwidth_gb_s
        if want and bw.value:
            per_link = bw.value / 2 / want
            slow = [link for link in gpu.links
                    if link.speed_gb_s is not None and link.speed_gb_s < per_link * _NVLINK_SPEED_TOLERANCE]
            slowest = min((link.speed_gb_s for link in gpu.links if link.speed_gb_s is not None), default=None)
            out.append(judge_fact(
                "nvlink_link_speed", not slow, value=slowest, expected=round(per_link, 3), unit="GB/s", subject=s,
                source=f"{bw.source} (÷ 2 directions ÷ {want} links)", remediation=Remediation.RESEAT_OR_REPLACE,
                message=(f"links {', '.join(f'{x.link} at {x.speed_gb_s:g}' for x in slow)} GB/s, below "
                         f"{per_link:.3g} GB/s per link")))
    return out


# ---------------------------------------------------------------- ibstat


def judge_ibstat(result: IbstatResult, sku: Sku | None = None, subject: Subject = NODE, *,
                 fabric: str | None = None, ports: Sequence[str] | None = None) -> list[Verdict]:
    """Without a SKU: every port's state (not Active → warn, as unused ports may be down).
    With a SKU: the fabric ports (link layer InfiniBand for `fabric='infiniband'`,
    Ethernet for 'roce'; default from the SKU; or exactly the CAs named in `ports`)
    must be Active/LinkUp at the SKU's rate, and there must be `fabric.hcas` of them."""
    out: list[Verdict] = []
    if sku is None:
        for p in result.ports:
            s = Subject(subject.node, port=p.name)
            rem, why = _port_down_cause(p)
            out.append(judge_fact("ib_port_state", p.active, value=f"{p.state}/{p.physical_state}",
                                  expected="Active/LinkUp", subject=s, source="ibstat",
                                  remediation=rem, warn_only=True,
                                  message=f"{p.link_layer} port {p.state}/{p.physical_state}: {why}"))
        up = [p for p in result.ports if p.active]
        out.append(Verdict("ib_ports_up", Status.PASS if up else Status.WARN, subject, len(up), None, "ports",
                           "ibstat", Remediation.NONE if up else Remediation.RESEAT_OR_REPLACE,
                           f"{subject.label()}: {len(up)} of {len(result.ports)} ports Active/LinkUp"
                           + _by_layer(up)))
        return out
    if fabric is None:
        fabric = "infiniband" if sku.fabric.infiniband_rate_gbps else "roce" if sku.fabric.roce_rate_gbps else None
        layers = {p.link_layer for p in result.ports}
        # a RoCE build of an InfiniBand SKU (or the reverse): judge the layer the node has
        if fabric == "infiniband" and "InfiniBand" not in layers and "Ethernet" in layers:
            fabric = "roce"
        elif fabric == "roce" and "Ethernet" not in layers and "InfiniBand" in layers \
                and sku.fabric.infiniband_rate_gbps:
            fabric = "infiniband"
    rate = sku.fabric_rate_gbps(fabric) if fabric else None
    if rate is None:
        return [Verdict("ib_port", Status.NOT_APPLICABLE, subject, None, None, "Gb/s", "SKU catalog",
                        Remediation.NONE, f"{subject.label()}: {sku.name} has no RDMA fabric")]
    layer = "InfiniBand" if fabric == "infiniband" else "Ethernet"
    chosen = [p for p in result.ports if (p.ca in ports or p.name in ports)] if ports else \
        [p for p in result.ports if p.link_layer in (layer, "unknown")]  # unknown: a grep lost the line
    fig = sku.fabric.infiniband_rate_gbps if fabric == "infiniband" else (sku.fabric.roce_rate_gbps
                                                                         or sku.fabric.infiniband_rate_gbps)
    source = fig.source if fig else "SKU catalog"
    ca_types = {ca.name: ca.ca_type for ca in result.cas}
    good = 0
    for p in chosen:
        s = Subject(subject.node, port=p.name)
        if not p.active:
            out.append(judge_port_state(p, s, source))
        elif p.rate_gbps is None:
            good += 1
            out.append(Verdict("ib_port", Status.NO_THRESHOLD, s, None, rate, "Gb/s", source, Remediation.NONE,
                               f"{s.label()}: Active, rate not printed (ibv_devinfo without -v): state judged, "
                               f"the {rate:g} Gb/s rate not"))
        elif p.rate_gbps < rate:
            out.append(judge_port_rate(p.rate_gbps, rate, s, source, ca_types.get(p.ca)))
        elif p.link_layer not in (layer, "unknown"):
            out.append(judge_fact("ib_port", False, value=p.link_layer, expected=layer, subject=s, source=source,
                                  remediation=Remediation.RECONFIGURE,
                                  message=f"link layer {p.link_layer}, expected {layer} (mlxconfig LINK_TYPE)"))
        else:
            good += 1
            out.append(judge_fact("ib_port", True, value=p.rate_gbps, expected=rate, unit="Gb/s", subject=s,
                                  source=source, remediation=Remediation.NONE, message=""))
    if sku.fabric.hcas is not None:
        want = int(sku.fabric.hcas.value)
        out.append(judge_fact("ib_ports_up", good >= want, value=good, expected=want, unit="ports", subject=subject,
                              source=sku.fabric.hcas.source, remediation=Remediation.RESEAT_OR_REPLACE,
                              message=f"{good} {layer} fabric ports Active at {rate:g} Gb/s, expected {want}"))
        if good >= want:
            v = out[-1]
            out[-1] = Verdict(v.check, v.status, v.subject, v.value, v.threshold, v.unit, v.source, v.remediation,
                              f"{v.message}; {layer} link layer")
    return out


def judge_port_rate(rate_gbps: float, expected: float, subject: Subject, source: str, ca_type: str | None = None,
                    check: str = "ib_port") -> Verdict:
    """An RDMA port's rate against the fabric's (SKU or inventory): at least the expected rate
    passes; below it is a degraded link, or the wrong adapter model where the adapter cannot
    go faster (`_slow_port_cause`). The one rule for `gpuctl analyze ibstat`, verify
    (network.fabric_port_rate) and preflight (hca_rate)."""
    if rate_gbps >= expected:
        return judge_fact(check, True, value=rate_gbps, expected=expected, unit="Gb/s", subject=subject,
                          source=source, remediation=Remediation.NONE, message="")
    why, why_source = _slow_port_cause(ca_type, expected)
    return judge_fact(check, False, value=rate_gbps, expected=expected, unit="Gb/s", subject=subject,
                      source="; ".join(x for x in (source, why_source) if x), remediation=Remediation.RESEAT_OR_REPLACE,
                      message=f"port rate {rate_gbps:g} Gb/s, expected {expected:g} Gb/s ({why})")


def _slow_port_cause(ca_type: str | None, rate: float) -> tuple[str, str]:
    """Why an Active port runs below `rate`, and the source of that reason: the adapter
    model itself when its fastest rate (health.yaml `hca_max_rate_gbps`) is below
    `rate`, else a degraded link."""
    adapters = load_health().hca_max_rate_gbps
    cap = adapters.rates.get(ca_type) if adapters and ca_type else None
    if adapters and cap is not None and cap < rate:
        return f"adapter {ca_type} tops out at {cap:g} Gb/s: wrong adapter model, not a cable fault", adapters.source
    return "degraded link: cable or transceiver", ""


def judge_port_state(port: IbPort, subject: Subject, source: str, check: str = "ib_port") -> Verdict:
    """An RDMA port must be Active/LinkUp; what one that is not needs comes from its physical
    state (`_port_down_cause`). The one rule for `gpuctl analyze ibstat` and verify
    (network.fabric_port_state, on `rdma link` read into ibstat's words)."""
    value = f"{port.state}/{port.physical_state}"
    if port.active:
        return judge_fact(check, True, value=value, expected="Active/LinkUp", subject=subject, source=source,
                          remediation=Remediation.NONE, message="")
    rem, why = _port_down_cause(port)
    return judge_fact(check, False, value=value, expected="Active/LinkUp", subject=subject, source=source,
                      remediation=rem, message=f"port {value}: {why}")


def _port_down_cause(port: IbPort) -> tuple[Remediation, str]:
    """What a port that is not Active/LinkUp needs, read from its physical state (the
    IBTA PortPhysicalState ibstat prints): Polling is a link that found no partner
    (cable, transceiver, switch port); Disabled is a port switched off (interface down,
    ibportstate or the SM disabled it); LinkUp with a logical state short of Active is a
    trained link waiting for configuration (InfiniBand: no subnet manager has activated
    it, Base lid 65535/SM lid 0; Ethernet: the interface or SR-IOV VF is down)."""
    phys = port.physical_state
    if phys == "Disabled":
        return Remediation.RECONFIGURE, ("port disabled, not a cable fault until enabled (ip link set up; "
                                         "ibportstate enable; mlxconfig)")
    if phys == "LinkUp":
        if port.link_layer not in ("InfiniBand", "Ethernet"):
            return Remediation.RECONFIGURE, ("physical link up but the port not activated: InfiniBand, no subnet "
                                             "manager reached it (opensm/UFM); Ethernet, the interface is down")
        if port.link_layer == "InfiniBand":
            return Remediation.RECONFIGURE, (f"physical link up but not activated by a subnet manager (SM lid "
                                             f"{port.sm_lid}); check opensm/UFM reaches this port")
        return Remediation.RECONFIGURE, "physical link up but the interface or SR-IOV VF is down (ip link)"
    if phys == "Polling":
        return Remediation.RESEAT_OR_REPLACE, "no link partner: cable, transceiver or switch port"
    return Remediation.RESEAT_OR_REPLACE, f"link not up ({phys}): cable, transceiver or switch port"


def _by_layer(ports: Sequence[IbPort]) -> str:
    """' (Ethernet 8, InfiniBand 1)' for a port list."""
    counts: dict[str, int] = {}
    for p in ports:
        counts[p.link_layer] = counts.get(p.link_layer, 0) + 1
    return f" ({', '.join(f'{k} {n}' for k, n in sorted(counts.items()))})" if counts else ""


# ---------------------------------------------------------------- perftest

IB_BW_CHECK = "ib_write_bw_gbit_s"


def judge_ib_write_bw(result: BwResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """Every rail of the output judged on its own (`_judge_ib_write_bw_rail`), each verdict
    naming its rail (device, GID) when the output shows more than one."""
    runs = (result, *result.rails)
    if len(runs) == 1 and not result.mixed_with:
        return _judge_ib_write_bw_rail(result, sku, subject)
    out = []
    for run in runs:
        s = replace(subject, port=run.rail) if run.rail else subject
        for v in _judge_ib_write_bw_rail(run, sku, s):
            if run.mixed_with:
                rails = ", ".join((run.rail or "?", *run.mixed_with))
                v = replace(v, message=f"{v.message} [rows of rails {rails} are interleaved in the output: this is the "
                                       "lowest of them; rerun each rail into its own file to judge each]")
            out.append(v)
    return out


def _judge_ib_write_bw_rail(result: BwResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """`ib_write_bw_gbit_s` is a floor for one port in one direction. A unidirectional run
    is judged as printed. A bidirectional run (``-b``) prints the SUM of both directions:
    with ``--report_both`` each direction is judged on its own; without, the mean per
    direction (half the sum) is judged. The mean can prove a failure (the weaker direction
    is at most the mean) but not a pass (the output does not say how the sum splits), so
    a mean at or above the floor only warns and asks for a run that shows each direction."""
    t = _threshold(sku, IB_BW_CHECK)
    rem = Remediation.RECONFIGURE
    measured = Measured(message_bytes=result.msg_size_bytes)
    if outside_workload(t.applies_to if t else None, measured) or not result.bidirectional:
        return [judge(IB_BW_CHECK, result.bw_avg_gbit_s, t, "Gb/s", subject, remediation=rem, measured=measured)]
    total = _fmt(result.bw_avg_gbit_s, "Gb/s")
    both = result.direction_avgs_gbit_s
    if both is not None:
        out = []
        for side, value in zip(("local (this side sending)", "remote (the peer sending)"), both, strict=True):
            v = judge(IB_BW_CHECK, value, t, "Gb/s", subject, remediation=rem)
            out.append(replace(v, message=f"{v.message} [the {side} direction of a bidirectional run (-b "
                                          f"--report_both); {total} both directions together]"))
        return out
    mean = result.bw_avg_per_direction_gbit_s
    v = judge(IB_BW_CHECK, mean, t, "Gb/s", subject, remediation=rem)
    head = (f"{subject.label()}: {IB_BW_CHECK} = {_fmt(mean, 'Gb/s')} per direction on average (a bidirectional "
            f"run, -b: {total} is the sum of both directions)")
    if v.status is Status.FAIL:
        return [replace(v, message=f"{head}, below the minimum {_fmt(v.threshold, 'Gb/s')}: at least one direction "
                                   "is below it")]
    if v.status in (Status.PASS, Status.WARN):
        return [replace(v, status=Status.WARN, remediation=Remediation.RERUN,
                        message=f"{head}; the mean meets the minimum {_fmt(v.threshold, 'Gb/s')}, but perftest prints "
                                "only the sum, so one direction may still be below it: rerun without -b, or with "
                                "--report_both, to judge each direction")]
    return [replace(v, message=f"{v.message} ({head.split(': ', 1)[1]})")]


def judge_ib_write_lat(result: LatResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    return [judge("ib_write_lat_us", result.headline.t_typical_us, _threshold(sku, "ib_write_lat_us"), "us",
                  subject, remediation=Remediation.RECONFIGURE)]


# ---------------------------------------------------------------- fio

_RANDREAD = {"randread", "randrw"}
_SEQWRITE = {"write"}
# fio engines that move no data to or from a local disk: their figure is no disk throughput
_NO_DISK_DATA_ENGINES = frozenset({
    "null", "falloc", "ftruncate", "filecreate", "filestat", "filedelete", "dircreate", "dirstat", "dirdelete",
    "cpuio", "e4defrag", "exec", "net", "netsplice", "rdma", "http",
})
# engines that reach the device without the page cache whatever direct= says (NVMe/SCSI passthrough, SPDK)
_NO_PAGE_CACHE_ENGINES = frozenset({"io_uring_cmd", "sg", "spdk", "spdk_bdev"})


def _not_a_disk_measurement(jobs: Sequence[FioJob]) -> str | None:
    """Why these jobs' figures do not measure the disk, or None."""
    for j in jobs:
        if (j.ioengine or "").lower() in _NO_DISK_DATA_ENGINES:
            return f"job {j.name!r} ran with ioengine={j.ioengine}, which moves no data to or from the disk"
    for j in jobs:
        if j.direct is False and (j.ioengine or "").lower() not in _NO_PAGE_CACHE_ENGINES:
            return (f"job {j.name!r} ran buffered (no direct=1; fio's default is direct=0), so the figure "
                    "includes the page cache, not only the disk")
    return None


def _judge_fio_figure(name: str, value: float, unit: str, jobs: Sequence[FioJob], sku: Sku | None,
                      subject: Subject) -> Verdict:
    rw = tuple(dict.fromkeys(j.rw for j in jobs if j.rw))
    v = judge(name, value, _threshold(sku, name), unit, subject, remediation=Remediation.RECONFIGURE,
              measured=Measured(fio_rw=rw or None))
    inferred = "; ".join(f"rw={j.rw} of job {j.name!r} inferred from the {j.rw_source}: no job definition line"
                         for j in jobs if j.rw_source in RW_INFERRED)
    if inferred:
        v = replace(v, message=f"{v.message} ({inferred})")
    why = _not_a_disk_measurement(jobs)
    if why is None:
        return v
    if v.status in (Status.PASS, Status.WARN, Status.FAIL):
        return replace(v, status=Status.ERROR, remediation=Remediation.RERUN,
                       message=f"{subject.label()}: {name} = {_fmt(value, unit)}, not judged against the "
                               f"{_fmt(v.threshold, unit)} disk threshold: {why}; rerun with direct=1 and a disk "
                               "I/O engine (libaio, io_uring)")
    return replace(v, message=f"{v.message} ({why})")


def judge_fio(result: FioResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """4k random read IOPS of the rw=randread/randrw jobs against `fio_randread_iops`;
    sequential write GB/s (10^9 bytes/s) of the rw=write jobs against `fio_seqwrite_gb_s`.
    Other workloads have no threshold. A figure from a run that did not measure the disk
    (a data-less engine such as falloc or null, or buffered I/O) is not judged against a
    disk threshold (error, "could not be judged"). A job whose workload the output does not
    say (text without its job definition line, see `gpuctl.parsers.fio`) cannot be judged
    at all: an error verdict, with or without a SKU."""
    out = []
    seqwrite = [j for j in result.jobs if j.rw in _SEQWRITE]
    for mode in sorted(_RANDREAD):  # each workload on its own: the threshold says which it is for
        randread = [j for j in result.jobs if j.rw == mode]
        if randread:
            iops = sum(j.read.iops for j in randread if j.read is not None)
            out.append(_judge_fio_figure("fio_randread_iops", iops, "IOPS", randread, sku, subject))
    if seqwrite:
        gb_s = sum(j.write.bw_gb_s for j in seqwrite if j.write is not None)
        out.append(_judge_fio_figure("fio_seqwrite_gb_s", gb_s, "GB/s", seqwrite, sku, subject))
    for mode in result.rw_modes:
        if mode in _RANDREAD | _SEQWRITE:
            continue
        jobs = [j for j in result.jobs if j.rw == mode]
        side = "read" if any(j.read is not None for j in jobs) else "write"
        iops = sum(getattr(j, side).iops for j in jobs if getattr(j, side) is not None)
        out.append(_judge_fio_figure(f"fio_{mode}_{side}_iops", iops, "IOPS", jobs, None, subject))
    unknown = [j.name for j in result.jobs if j.rw is None]
    if unknown:
        names = ", ".join(repr(n) for n in unknown)
        out.append(Verdict(
            "fio_workload", Status.ERROR, subject, None, None, "", "", Remediation.RERUN,
            f"{subject.label()}: fio results could not be judged: the output does not say the workload (rw=) of "
            f"job {names}: no '(g=0): rw=...' job definition line, no rw= elsewhere and no job name that names "
            "it; keep fio's whole report (or use --output-format=json) so random and sequential I/O can be told "
            "apart"))
    return out


# ---------------------------------------------------------------- bandwidth


def judge_bandwidth(result: BandwidthResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """Per GPU: H2D, D2H against `h2d_gb_s`/`d2h_gb_s`; HBM copy as a fraction of the
    datasheet HBM bandwidth against `hbm_copy_fraction`; per pair: P2P against `p2p_gb_s`."""
    out = []
    hbm_peak_gb_s = sku.hbm_bandwidth_tb_s.value * 1000 if sku else None
    p2p_t = _threshold(sku, "p2p_gb_s")
    for g in result.gpus:
        s = Subject(subject.node, g.index, g.bus_id)
        out.append(judge("h2d_gb_s", g.h2d_gb_s, _threshold(sku, "h2d_gb_s"), "GB/s", s,
                         remediation=Remediation.RESEAT_OR_REPLACE))
        out.append(judge("d2h_gb_s", g.d2h_gb_s, _threshold(sku, "d2h_gb_s"), "GB/s", s,
                         remediation=Remediation.RESEAT_OR_REPLACE))
        frac = g.hbm_copy_gb_s / hbm_peak_gb_s if g.hbm_copy_gb_s is not None and hbm_peak_gb_s else None
        if sku is None:
            out.append(judge("hbm_copy_gb_s", g.hbm_copy_gb_s, None, "GB/s", s))
        else:
            out.append(judge("hbm_copy_fraction", frac, _threshold(sku, "hbm_copy_fraction"), "of datasheet", s,
                             remediation=Remediation.VENDOR_RMA))
        if p2p_t is not None and p2p_t.not_applicable:
            continue
        for peer, val in sorted(g.p2p_gb_s.items()):
            out.append(judge("p2p_gb_s", val, p2p_t, "GB/s", Subject(subject.node, g.index, None, peer),
                             remediation=Remediation.RESEAT_OR_REPLACE))
    if p2p_t is not None and p2p_t.not_applicable:
        out.append(judge("p2p_gb_s", None, p2p_t, "GB/s", subject))
    return out


# ---------------------------------------------------------------- dcgm

_HARDWARE_CATEGORIES = {"hardware", "stress", "integration", "performance"}


# When a DCGM run validated the GPUs: the one rule (`dcgm_unvalidated`), and why.
DCGM_VALIDATION_SOURCE = (
    "gpuctl rule: dcgmi diag lists every test of the level it ran (-r 1 the deployment/software checks; -r 2 adds "
    "Integration (PCIe) and Hardware (GPU Memory); -r 3 adds Stress; DCGM User Guide, 'Run Levels'), and marks a "
    "test it did not run Skip (a missing plugin, an is_allowed=false test, an unsupported GPU: NVIDIA/DCGM#55, "
    "#139). A category of the run whose every test was skipped validated nothing, so a run with one is at best a "
    "warning, never a pass: a level-3 run that skipped PCIe, GPU Memory and every stress test checked the "
    "software only"
)


def dcgm_unvalidated(result: DcgmResultSet) -> dict[str, list[str]]:
    """The categories of `result` in which no test ran (every result Skip), each with its
    tests: what the run's level asked for and did not check (see `DCGM_VALIDATION_SOURCE`)."""
    tests_by_category: dict[str, list[DcgmTest]] = {}
    for t in result.tests:
        tests_by_category.setdefault(t.category or "(no category)", []).append(t)
    return {cat: list(dict.fromkeys(t.name for t in tests))
            for cat, tests in tests_by_category.items() if all(t.status == "skip" for t in tests)}


def judge_dcgm(result: DcgmResultSet, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """One verdict per test result (a skipped one is not-applicable), plus `dcgm_validated`:
    a warning when a category of the run had every test skipped (`dcgm_unvalidated`)."""
    out = []
    source = f"DCGM {result.dcgm_version or ''} diagnostic".replace("  ", " ")
    if result.partial:
        out.append(partial_paste("dcgmi diag", result.partial, subject))
    unvalidated = dcgm_unvalidated(result)
    if unvalidated:
        listed = "; ".join(f"{cat}: {', '.join(names)}" for cat, names in unvalidated.items())
        out.append(Verdict(
            "dcgm_validated", Status.WARN, subject, False, True, "", DCGM_VALIDATION_SOURCE, Remediation.RERUN,
            f"{subject.label()}: not validated: every test of {len(unvalidated)} categor"
            f"{'y' if len(unvalidated) == 1 else 'ies'} of this run was skipped ({listed}); rerun with those tests "
            "allowed (dcgmi diag -r N -v shows why each was skipped)"))
    for test in result.tests:
        for r in test.results:
            gpus = "all GPUs" if r.gpus is None else "GPU " + ", ".join(map(str, r.gpus))
            s = Subject(subject.node, r.gpus[0] if r.gpus and len(r.gpus) == 1 else None)
            check = f"dcgm: {test.name}"
            detail = f" — {'; '.join(r.warnings)}" if r.warnings else ""
            if r.status == "skip":
                out.append(Verdict(check, Status.NOT_APPLICABLE, s, "skip", "pass", "", source, Remediation.NONE,
                                   f"{s.label()}: {test.name} skipped on {gpus}{detail}"))
                continue
            rem = Remediation.VENDOR_RMA if test.category.lower() in _HARDWARE_CATEGORIES else Remediation.RECONFIGURE
            status = {"pass": Status.PASS, "warn": Status.WARN, "fail": Status.FAIL}[r.status]
            out.append(Verdict(check, status, s, r.status, "pass", "", source,
                               Remediation.NONE if status is Status.PASS else rem,
                               f"{s.label()}: {test.category} / {test.name}: {r.status} on {gpus}{detail}"))
    return out


# ---------------------------------------------------------------- xid

_STATUS = {PASS: Status.PASS, WARN: Status.WARN, FAIL: Status.FAIL}


def judge_xid(result: XidResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """Each finding of `gpuctl.xidpolicy` (the policy verify's fatal-Xid check applies too)."""
    health = load_health()
    out = []
    for f in xid_findings(result, health):
        s = Subject(subject.node, bus_id=f.bus_id, port=f.port)
        threshold = "on the bus and initialised" if f.check == "gpu_lost" else None
        out.append(Verdict(f.check, _STATUS[f.status], s, f.value, threshold, "", f.source, f.remediation,
                           f"{s.label()}: {f.text}"))
    if not out:
        out.append(Verdict("xid", Status.PASS, subject, 0, 0, "events", health.xid_fatal.source, Remediation.NONE,
                           f"{subject.label()}: no Xid/SXid events in {result.lines_read} log lines"))
    return out


# ---------------------------------------------------------------- gdsio


def judge_gdsio(result: GdsioResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """No SKU threshold exists for GPUDirect Storage yet: figures only (no-threshold)."""
    return [judge(f"gdsio_{r.io_type.lower()}_{r.xfer_type.lower()}_gib_s", r.throughput_gib_s, None, "GiB/s",
                  subject) for r in result.runs]


# ---------------------------------------------------------------- training

TRAIN_LOSS_SOURCE = ("gpuctl policy: on the memorisation task the loss must fall to <= 90% of its start "
                     "(facts.md: 9.18 → 0.007 in 60 steps on an H200)")
TRAIN_LOSS_RATIO = 0.9


def judge_training(result: TrainingResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    if result.skipped is not None:
        # Not a pass and not a failure: the node has no PyTorch, so the run was not made.
        return [Verdict("training", Status.NOT_APPLICABLE, subject, None, None, "", "", Remediation.NONE,
                        f"{subject.label()}: skipped: {result.skipped}")]
    if result.final is None:
        return [could_not_run("training", "no final record", subject, Remediation.RERUN)]
    final = result.final
    window = max(1, min(3, len(result.steps) // 2))  # first/last few steps, never overlapping
    start, end = result.loss_start(window), result.loss_end(window)
    finite = all(math.isfinite(s.loss) for s in result.steps)
    out = [judge_fact(
        "train_loss_falls", finite and len(result.steps) >= 2 and end <= start * TRAIN_LOSS_RATIO,
        value=round(end, 6) if finite else "non-finite", expected=round(start * TRAIN_LOSS_RATIO, 6),
        subject=subject, source=TRAIN_LOSS_SOURCE, remediation=Remediation.RERUN,
        message=(f"loss went from {start:.4g} to {end:.4g}, must fall to <= {start * TRAIN_LOSS_RATIO:.4g}"
                 if finite else "loss became NaN/inf"),
    ), judge_fact(
        "train_ranks_agree", final.ranks_agree, value=len(set(final.param_checksum_per_rank)), expected=1,
        unit="distinct checksums", subject=subject,
        source="DDP keeps replicas identical: every rank's parameter checksum must be equal",
        remediation=Remediation.VENDOR_RMA,
        message=f"{len(set(final.param_checksum_per_rank))} distinct parameter checksums across "
                f"{len(final.param_checksum_per_rank)} ranks (silent data corruption?)",
    )]
    limits = load_health().training
    floor = limits.mfu_min_flops_per_token if limits else None
    if sku is None:
        out.append(judge("train_tflops", final.achieved_tflops, None, "TFLOP/s", subject))
    elif floor is not None and final.model_flops_per_token < floor.value:
        # A model this small leaves the GPU idle between kernel launches: its MFU measures
        # launch overhead, not the node (0.00076 on a healthy H200).
        threshold = _threshold(sku, "train_mfu_fraction")
        out.append(Verdict(
            "train_mfu_fraction", Status.NOT_APPLICABLE, subject, None, None, "of peak", floor.source,
            Remediation.NONE,
            f"{subject.label()}: train_mfu_fraction not judged: the timed model does "
            f"{final.model_flops_per_token:.3g} training FLOPs per token, under the "
            f"{floor.value:.3g} a model needs to load the GPU (achieved {final.achieved_tflops:.3g} TFLOP/s"
            + (f"; the SKU's floor is {threshold.min:g} of peak" if threshold and threshold.min is not None else "")
            + ")"))
    else:
        peak = sku.dense_bf16_tflops.value * 1e12 * final.world_size
        mfu = final.model_flops_per_token * final.tokens_per_s / peak
        out.append(judge("train_mfu_fraction", mfu, _threshold(sku, "train_mfu_fraction"), "of peak", subject,
                         remediation=Remediation.RECONFIGURE))
    return out


# ---------------------------------------------------------------- training across nodes

LAUNCH_SOURCE = ("gpuctl policy: every node's torchrun launcher must finish within its bound "
                 "(c10d join timeout, the process group's per-collective timeout, the launcher's own limit); "
                 "a launcher that fails or is stopped names its node")


@dataclass(frozen=True)
class Launch:
    """One node's torchrun launcher as the bench saw it (its parsed output in `log`)."""

    node: str
    exit_status: int
    timed_out: bool
    duration_s: float
    timeout_s: float
    log: LauncherLog
    unreachable: str | None = None  # the node could not be reached to start it: why
    last_line: str = ""  # the launcher's last stderr line, for a failure its log does not explain
    stopped: str | None = None  # the bench's watchdog stopped it after another launcher failed: why


def judge_launchers(launches: Sequence[Launch], endpoint: str, head: str, subject: Subject = NODE) -> list[Verdict]:
    """`train_launcher`: one failing verdict per node whose launcher did not finish cleanly,
    naming the node and what its output says (rendezvous error, failed ranks with exit code
    or signal, NCCL warnings/errors); one pass for the cluster when all finished."""
    out = []
    for launch in launches:
        where = Subject(node=launch.node)
        said = launch.log.summary()
        if launch.unreachable is not None:
            text, rem = f"the training launcher could not be started: {launch.unreachable}", Remediation.RECONFIGURE
        elif launch.timed_out:
            if launch.stopped:
                text = (f"the training launcher had not finished after {launch.duration_s:.0f} s and was stopped "
                        f"({launch.stopped}; the rendezvous is at {endpoint} on {head})")
            else:
                text = (f"the training launcher did not finish within {launch.timeout_s:.0f} s and was stopped "
                        f"(a rank hung, or the rendezvous at {endpoint} on {head} never completed)")
            text += f"; it said: {said}" if said else ""
            rem = Remediation.RERUN
        elif launch.exit_status != 0:
            why = said or launch.last_line or "no output"
            text = f"the training launcher failed (exit {launch.exit_status}): {why}"
            rem = Remediation.RECONFIGURE if (launch.log.rendezvous_error or launch.log.nccl) else Remediation.RERUN
            if launch.log.rendezvous_error and launch.node != head:
                text += f" (the rendezvous is at {endpoint} on {head})"
        else:
            continue
        out.append(judge_fact("train_launcher", False, value="timed out" if launch.timed_out else launch.exit_status,
                              expected=0, subject=where, source=LAUNCH_SOURCE, remediation=rem, message=text))
    if not out and launches:
        slowest = max(launches, key=lambda x: x.duration_s)
        out.append(Verdict("train_launcher", Status.PASS, subject, len(launches), len(launches), "launchers",
                           LAUNCH_SOURCE, Remediation.NONE,
                           f"{subject.label()}: all {len(launches)} torchrun launchers finished (rendezvous at "
                           f"{endpoint} on {head}; slowest {slowest.node} {slowest.duration_s:.0f} s)"))
    return out


SCALING_CPU_REASON = ("gloo on CPU: the run shows the mechanics (rendezvous, all-reduce, ranks agree), "
                      "its speed says nothing about a GPU fabric; reported, not judged")


def judge_training_multi_node(result: TrainingResult, sku: Sku | None, subject: Subject,
                              single: dict[str, TrainingFinal]) -> list[Verdict]:
    """The rank-0 output of the run across nodes: the single-node rules (`judge_training`:
    loss falls, ranks agree, MFU), with the ranks-agree verdict naming every rank's node and
    checksum; tokens/s per GPU (reported); the scaling efficiency against the SKU's floor
    (`judge_scaling_efficiency`, from the per-node runs in `single`, node → final record)."""
    out = judge_training(result, sku, subject)
    final = result.final
    if final is None:
        return out
    if final.ranks:
        majority = final.majority_checksum
        listing = ", ".join(f"rank {r.rank} on {r.node}" + (f" ({r.host})" if r.host and r.host != r.node else "")
                            + f": {r.checksum}" + ("" if r.checksum == majority else " (differs)")
                            for r in final.ranks)
        out = [replace(v, message=f"{v.message}: {listing}") if v.check == "train_ranks_agree" else v for v in out]
    unit = "tokens/s per GPU" if not final.on_cpu else "tokens/s per rank"
    out.append(judge("train_tokens_per_s_per_gpu", round(final.tokens_per_s_per_rank, 1), None, unit, subject))
    out.append(judge_scaling_efficiency(final, single, sku, subject))
    return out


def judge_scaling_efficiency(final: TrainingFinal, single: dict[str, TrainingFinal], sku: Sku | None,
                             subject: Subject = NODE) -> Verdict:
    """tokens/s of the N-node run ÷ (N × single-node tokens/s), per rank so that runs with a
    different rank count per node compare: (multi tokens/s ÷ its ranks) ÷ (mean over the
    per-node runs of tokens/s ÷ their ranks); equal to the plain formula when every node
    runs one rank per GPU in both. Judged against the SKU's `train_scaling_efficiency`
    floor on GPUs; on CPU (gloo) reported, not judged."""
    name = "train_scaling_efficiency"
    same = [f for f in single.values() if f.model == final.model and f.mfu_model == final.mfu_model
            and f.on_cpu == final.on_cpu and f.tokens_per_s > 0]
    if not same:
        why = ("no per-node training run finished in this bench" if not single else
               "the per-node runs trained another model shape or device: "
               + ", ".join(f"{node}: {f.model or '?'}" for node, f in sorted(single.items())))
        return could_not_run(name, f"no single-node figure to compare with ({why})", subject, Remediation.RERUN)
    base = sum(f.tokens_per_s_per_rank for f in same) / len(same)
    value = round(final.tokens_per_s_per_rank / base, 4)
    detail = (f"{final.tokens_per_s:,.0f} tokens/s on {final.world_size} ranks vs {base:,.0f} tokens/s per rank "
              f"alone (mean of {len(same)} per-node runs)")
    if final.on_cpu:
        return Verdict(name, Status.NOT_APPLICABLE, subject, value, None, "of linear", SCALING_CPU_REASON,
                       Remediation.NONE, f"{subject.label()}: {name} = {value:g} ({detail}); {SCALING_CPU_REASON}")
    v = judge(name, value, _threshold(sku, name), "of linear", subject, remediation=Remediation.RECONFIGURE)
    return replace(v, message=f"{v.message} ({detail})")
