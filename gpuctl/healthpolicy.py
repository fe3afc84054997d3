"""Judgements of the passive health checks: one function per check, shared by `gpuctl health`
and verify's `health_*` checks (roles/nvidia_driver, roles/network).

Each `judge_*` takes parsed samples (`gpuctl.parsers.health`, `gpuctl.parsers.nvidia_smi`,
`gpuctl.parsers.xid`) and the limits of catalog/health.yaml (`passive:`), and returns one
`HealthFinding` per subject (GPU, PCI function, port, firmware item): pass, fail, or
not_judged (a figure reported, never a pass: a busy GPU, a first counter sample, a SKU with
no expectation). Counters are judged as the change since the previous sample, never their
absolute value (`previous` is the last sample kept by `gpuctl.health`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpuctl import verdicts as vd
from gpuctl.catalog import Health, PassiveLimits, PathLimit, Sku, load_health
from gpuctl.parsers.health import PciSysfs
from gpuctl.parsers.ib_counters import NAMES as IB_COUNTER_NAMES
from gpuctl.parsers.lspci import LspciResult
from gpuctl.parsers.nvidia_smi.model import GpuInfo
from gpuctl.parsers.nvlink_errors import NvlinkErrorsResult
from gpuctl.parsers.xid import XidResult
from gpuctl.remediation import Remediation
from gpuctl.xidpolicy import FAIL, WARN, xid_findings

PASS, NOT_JUDGED = "pass", "not_judged"
__all__ = ["FAIL", "NOT_JUDGED", "PASS", "WARN", "HealthFinding"]

#: the checks, in the order they are reported (a node's first failing one is its drain reason)
CHECKS: tuple[str, ...] = ("xid", "clock_events", "nvswitch_fabric", "pcie_aer", "ib_counters", "nvlink_errors",
                           "firmware", "gpu_nic_numa", "pcie_acs")
FIRST_SAMPLE = "first sample: baseline recorded"


@dataclass(frozen=True)
class HealthFinding:
    """One subject's judgement. `node` is set where the check compares nodes (firmware)."""

    check: str
    subject: str
    status: str  # PASS, FAIL, WARN or NOT_JUDGED
    detail: str
    remediation: Remediation = Remediation.NONE
    expected: str = ""
    found: str = ""
    source: str = ""
    node: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"check": self.check, "subject": self.subject, "status": self.status, "detail": self.detail,
                "remediation": self.remediation.value, "expected": self.expected, "found": self.found,
                "source": self.source, **({"node": self.node} if self.node else {})}


# ---------------------------------------------------------------- the shared judgements (gpuctl.verdicts)

_STATUS = {vd.Status.PASS: PASS, vd.Status.WARN: WARN, vd.Status.FAIL: FAIL}


def from_verdicts(check: str, verdicts: Sequence[vd.Verdict]) -> list[HealthFinding]:
    """The verdicts of a `gpuctl.verdicts` judgement (the one analyze, verify and bench use) as
    health findings of `check`: pass, warn and fail kept, anything else not judged."""
    out = []
    for v in verdicts:
        label = v.subject.label()
        out.append(HealthFinding(check, label, _STATUS.get(v.status, NOT_JUDGED), v.message.removeprefix(f"{label}: "),
                                 v.remediation, expected="" if v.threshold is None else str(v.threshold),
                                 found="" if v.value is None else str(v.value), source=v.source))
    return out


# ---------------------------------------------------------------- 1. clock events

def judge_clock_events(gpus: Sequence[GpuInfo], limits: PassiveLimits) -> list[HealthFinding]:
    """Clock-event reasons of each GPU (`nvidia-smi -q -x`, the report verify reads anyway), judged
    on a load-free GPU only (a busy one, above the load-free limit, is not judged; a driver that
    prints no reason, or N/A for every one, neither); which reasons are faults is
    `gpuctl.verdicts.judge_clock_event_reasons`, the rule analyze applies to nvidia-smi -q."""
    limit = limits.idle_max_utilization_pct
    out = []
    for g in gpus:
        util = g.utilization_gpu_pct
        if util is None or util > limit.value:
            load = "unknown" if util is None else f"{util:g} %"
            out.append(HealthFinding("clock_events", g.label, NOT_JUDGED, f"not judged: GPU busy (utilization {load}, "
                                     f"load-free is ≤ {limit.value:g} %)", found=load, source=limit.source))
            continue
        if not g.clock_events:
            out.append(HealthFinding("clock_events", g.label, NOT_JUDGED,
                                     "not judged: the driver reports no clock-event reasons (N/A)"))
            continue
        active = [name for name, on in g.clock_events if on]
        found = from_verdicts("clock_events", vd.judge_clock_event_reasons(active, vd.Subject(gpu=g.index,
                                                                                               bus_id=g.bus_id)))
        out += [replace(f, detail=f"{f.detail} (idle: {util:g} % utilization)") for f in found]
    return out


def hca_firmware(sysfs: PciSysfs) -> dict[str, str]:
    """The RDMA devices' firmware (`/sys/class/infiniband/*/fw_ver`) as firmware items ({"hca/mlx5_0": …})."""
    return {f"hca/{d.name}": d.fw_ver for d in sysfs.rdma.values() if d.fw_ver}


# ---------------------------------------------------------------- 2. NVSwitch fabric

def judge_fabric(gpus: Sequence[GpuInfo], sku: Sku | None) -> list[HealthFinding]:
    """Every GPU's Fabric section (read by the nvidia-smi -q/XML parser), judged by
    `gpuctl.verdicts.judge_fabric`: on an NVSwitch SKU State Completed and Status Success,
    no state at all a warning (GPUs before Hopper print N/A); one clique per node."""
    out = from_verdicts("nvswitch_fabric", vd.judge_fabric(gpus, sku))
    return out or [HealthFinding("nvswitch_fabric", "node", NOT_JUDGED,
                                 "not judged: no GPU reports a fabric state and the SKU has no NVSwitch")]


# ---------------------------------------------------------------- counters since the last sample

AER_FAMILY = "pcie_aer"  # health.yaml counter_rises.pcie_aer
AER_CORRECTABLE = "correctable AER errors"


def aer_correctable(sysfs: PciSysfs) -> dict[str, int]:
    """What is kept of the AER counters for the next run: {bdf: correctable total} of GPUs and NICs."""
    return {f.bdf: f.aer["correctable"] for f in sysfs.functions.values()
            if (f.is_gpu or f.is_nic) and "correctable" in f.aer}


def _aer_sample(sysfs: PciSysfs, counts: Mapping[str, int]) -> vd.CounterSample:
    kinds = {f.bdf: "GPU" if f.is_gpu else "NIC" for f in sysfs.functions.values()}
    return {(vd.Subject(port=f"{kinds.get(bdf, 'PCI')} {bdf}"), AER_CORRECTABLE): n for bdf, n in counts.items()}


def judge_aer(sysfs: PciSysfs, previous: Mapping[str, int] | None) -> list[HealthFinding]:
    """PCIe AER of the GPUs and NICs: fatal or non-fatal errors since boot fail; correctable ones
    are judged as the change since `previous` ({bdf: correctable total}) by the one counter rule
    (`gpuctl.verdicts.judge_counter_deltas`, health.yaml counter_rises.pcie_aer)."""
    rules = (load_health().counter_rises or {}).get(AER_FAMILY)  # type: ignore[call-overload]
    source = rules.source if rules else ""
    out = []
    failed = set()
    for fn in sorted(sysfs.functions.values(), key=lambda f: f.bdf):
        if not (fn.is_gpu or fn.is_nic) or not fn.aer:
            continue
        bad = {k: n for k in ("fatal", "nonfatal") if (n := fn.aer.get(k, 0))}
        if bad:
            failed.add(fn.bdf)
            found = ", ".join(f"{n} {k}" for k, n in bad.items())
            out.append(HealthFinding("pcie_aer", f"{'GPU' if fn.is_gpu else 'NIC'} {fn.bdf}", FAIL,
                                     f"PCIe AER {found} error(s) since boot", Remediation.RESEAT_OR_REPLACE,
                                     expected="0 fatal, 0 non-fatal", found=found, source=source))
    now = {bdf: n for bdf, n in aer_correctable(sysfs).items() if bdf not in failed}
    if now:
        out += _counter_rises("pcie_aer", "pcie_aer_correctable", AER_FAMILY, _aer_sample(sysfs, now),
                              None if previous is None else _aer_sample(sysfs, previous), AER_CORRECTABLE)
    if not out and any(f.is_gpu or f.is_nic for f in sysfs.functions.values()):
        out.append(HealthFinding("pcie_aer", "node", NOT_JUDGED,
                                 "not judged: no aer_dev_* counters in sysfs (kernel without AER statistics?)"))
    return out


def _counter_rises(check: str, verdict_check: str, family: str, now: vd.CounterSample,
                   before: vd.CounterSample | None, what: str) -> list[HealthFinding]:
    """Counters judged as their change since the previous sample by the one counter rule
    (`gpuctl.verdicts.counter_deltas`/`judge_counter_deltas`, health.yaml `counter_rises`);
    counters without an earlier value are a baseline, not judged."""
    before = before or {}
    fresh = sorted({s.label() for s, n in now if (s, n) not in before})
    out = [HealthFinding(check, subject, NOT_JUDGED, f"{FIRST_SAMPLE} ({what})") for subject in fresh]
    deltas = vd.counter_deltas(before, now)
    if deltas:
        out += from_verdicts(check, vd.judge_counter_deltas(verdict_check, deltas, family))
    return out


def ib_counter_sample(counters: Mapping[str, Mapping[str, int]]) -> vd.CounterSample:
    """{"mlx5_0/1": {sysfs counter: value}} as a counter sample, named as perfquery names them."""
    return {(vd.Subject(port=port), IB_COUNTER_NAMES.get(name, name)): v
            for port, c in counters.items() for name, v in c.items()}


def judge_ib_counters(sysfs: PciSysfs, previous: Mapping[str, Mapping[str, int]] | None) -> list[HealthFinding]:
    """IB port error counters (the sysfs files of health.yaml counter_rises.infiniband): the
    change since `previous` ({"mlx5_0/1": {counter: value}}); a first sample is a baseline."""
    return _counter_rises("ib_counters", "ib_port_counters", "infiniband", ib_counter_sample(sysfs.ib_counters),
                          None if previous is None else ib_counter_sample(previous), "port error counters")


def nvlink_error_sample(result: NvlinkErrorsResult | Mapping[str, int]) -> vd.CounterSample:
    """`nvidia-smi nvlink -e` (its last sample) or a kept one ({"GPU/LINK/counter": value}) as a
    counter sample, subjects as `gpuctl.verdicts.judge_nvlink_errors` names them."""
    if isinstance(result, NvlinkErrorsResult):
        items = [((g, link, name), v) for (g, link, name), v in result.samples[-1].items()]
    else:
        items = []
        for key, v in result.items():
            g, link, name = key.split("/", 2)
            items.append(((int(g), int(link), name), int(v)))
    return {(vd.Subject(gpu=g, port=f"link {link}"), name): v for (g, link, name), v in items}


def nvlink_error_keep(result: NvlinkErrorsResult) -> dict[str, int]:
    """What is kept of `nvidia-smi nvlink -e` for the next run ({"GPU/LINK/counter": value})."""
    return {f"{g}/{link}/{name}": v for (g, link, name), v in result.samples[-1].items()}


def judge_nvlink_errors(result: NvlinkErrorsResult, previous: Mapping[str, int] | None) -> list[HealthFinding]:
    """NVLink replay, recovery and CRC error counters per GPU and link: the change since
    `previous` by the one counter rule (health.yaml counter_rises.nvlink); first sample a baseline."""
    out = from_verdicts("nvlink_errors", [vd.partial_paste(vd.TOOL_NVLINK_ERRORS, result.partial)]) \
        if result.partial else []
    return out + _counter_rises("nvlink_errors", "nvlink_error_counters", "nvlink", nvlink_error_sample(result),
                                None if previous is None else nvlink_error_sample(previous), "NVLink error counters")


# ---------------------------------------------------------------- 5. firmware

FIRMWARE_SOURCE = ("gpuctl policy: every node of a cluster runs the same GPU VBIOS and HCA firmware (a rebuilt "
                   "node must be like its peers, design.md); `gpuctl lock` records them per node")


def judge_firmware(found: Mapping[str, Mapping[str, str]],
                   locked: Mapping[str, Mapping[str, str]] | None = None) -> list[HealthFinding]:
    """Firmware per node ({node: {"vbios/0": …, "hca/mlx5_0": …}}): a node whose version of an
    item differs from the majority of the nodes that have the item fails; so does one that
    differs from its own entry in the lock (`locked`, when a lock file exists). A tie (two
    nodes that differ) is not judged among peers; an item only one node has, and no lock
    entry for, is reported, not judged."""
    out = []
    items = sorted({k for fw in found.values() for k in fw})
    holders = {item: sum(1 for fw in found.values() if item in fw) for item in items}
    for item in items:
        have = {n: fw[item] for n, fw in found.items() if item in fw}
        counts = Counter(have.values()).most_common()
        if len(counts) > 1:
            top, second = counts[0][1], counts[1][1]
            if top == second:
                for n, v in sorted(have.items()):
                    out.append(HealthFinding("firmware", item, NOT_JUDGED, f"{item} {v}: no majority among "
                                             f"{len(have)} nodes ({', '.join(f'{c}× {x}' for x, c in counts)})",
                                             found=v, source=FIRMWARE_SOURCE, node=n))
            else:
                majority = counts[0][0]
                for n, v in sorted(have.items()):
                    if v != majority:
                        out.append(HealthFinding(
                            "firmware", item, FAIL, f"{item} is {v}, {top} of {len(have)} nodes run {majority}",
                            Remediation.RECONFIGURE, expected=majority, found=v, source=FIRMWARE_SOURCE, node=n))
    for n, fw in sorted(found.items()):
        lock_fw = (locked or {}).get(n)
        for item, v in sorted(fw.items()):
            if lock_fw is not None and item in lock_fw and lock_fw[item] != v:
                out.append(HealthFinding("firmware", item, FAIL, f"{item} is {v}, the lock records {lock_fw[item]}",
                                         Remediation.RECONFIGURE, expected=lock_fw[item], found=v,
                                         source=FIRMWARE_SOURCE + " (lock file)", node=n))
        failed = {f.subject for f in out if f.node == n and f.status == FAIL}
        for item, v in sorted(fw.items()):
            if item in failed:
                continue
            judged_peers = holders[item] >= 2
            in_lock = lock_fw is not None and item in lock_fw
            if judged_peers or in_lock:
                if not any(f.node == n and f.subject == item for f in out):
                    basis = " and ".join(x for x in ("the peers' majority" if judged_peers else "",
                                                     "the lock" if in_lock else "") if x)
                    out.append(HealthFinding("firmware", item, PASS, f"{item} {v} as {basis}", found=v,
                                             source=FIRMWARE_SOURCE, node=n))
            else:
                out.append(HealthFinding("firmware", item, NOT_JUDGED, f"{item} {v} (no peer and no lock entry to "
                                         "compare with)", found=v, source=FIRMWARE_SOURCE, node=n))
    return out


# ---------------------------------------------------------------- 6. GPU <-> NIC NUMA

NUMA_SOURCE = ("NVIDIA GPUDirect RDMA User Manual: the HCA and the GPU belong on the same PCIe root complex; "
               "a GPU whose NUMA node holds no fabric NIC sends every byte across the CPU interconnect")


def judge_numa(sysfs: PciSysfs, expect: PathLimit | None, gpu_count: int) -> list[HealthFinding]:
    """Each GPU's NUMA node holds a fabric NIC, where the SKU expects one NIC per GPU
    (`expect`: the SKU's gpu_nic_max_path, its `applies_to.nics_per_gpu`); otherwise the
    placement is reported, not judged."""
    gpus = sorted((f for f in sysfs.functions.values() if f.is_gpu), key=lambda f: f.bdf)
    nics = [(d.name, sysfs.functions[d.bdf].numa_node if d.bdf in sysfs.functions else None)
            for d in sysfs.rdma.values() if d.bdf]
    if not gpus:
        return []
    if not nics:
        return [HealthFinding("gpu_nic_numa", "node", NOT_JUDGED, "not judged: no PCI fabric NIC (RDMA device)")]
    if any(g.numa_node is None for g in gpus) or any(n is None for _, n in nics):
        return [HealthFinding("gpu_nic_numa", "node", NOT_JUDGED,
                              "not judged: sysfs gives no NUMA node (numa_node -1) for every GPU and NIC")]
    per_numa: dict[int, list[str]] = {}
    for name, numa in nics:
        per_numa.setdefault(int(numa or 0), []).append(name)
    workload = expect.applies_to if expect else None
    judged = bool(workload and workload.nics_per_gpu and workload.nics_per_gpu >= 1 and len(nics) >= gpu_count)
    source = NUMA_SOURCE + (f"; {expect.source}" if expect else "")
    out = []
    for g in gpus:
        near = per_numa.get(int(g.numa_node or 0), [])
        subject = f"GPU {g.bdf}"
        found = f"NUMA {g.numa_node}; NICs there: {', '.join(sorted(near)) or 'none'}"
        if not judged:
            why = "the SKU states no GPU:NIC placement" if not workload else \
                f"{len(nics)} fabric NICs for {gpu_count} GPUs, the rule is for one NIC per GPU"
            out.append(HealthFinding("gpu_nic_numa", subject, NOT_JUDGED, f"reported, not judged ({why}): {found}",
                                     found=found, source=source))
        elif near:
            out.append(HealthFinding("gpu_nic_numa", subject, PASS, found, expected="a fabric NIC on the GPU's NUMA "
                                     "node", found=found, source=source))
        else:
            out.append(HealthFinding("gpu_nic_numa", subject, FAIL, f"no fabric NIC on the GPU's NUMA node "
                                     f"{g.numa_node} (NICs on NUMA {', '.join(map(str, sorted(per_numa)))})",
                                     Remediation.RESEAT_OR_REPLACE, expected="a fabric NIC on the GPU's NUMA node",
                                     found=found, source=source))
    return out


# ---------------------------------------------------------------- 8. ACS on the switches

def switch_bridges(sysfs: PciSysfs) -> list[str]:
    """The PCIe switch ports above the GPUs and fabric NICs (every bridge on their path but the
    root port: P2P between devices under different root ports crosses the root complex anyway)."""
    out: dict[str, None] = {}
    for f in sorted(sysfs.functions.values(), key=lambda f: f.bdf):
        if f.is_gpu or f.is_nic:
            out.update(dict.fromkeys(f.upstream[1:]))
    return list(out)


def judge_acs(sysfs: PciSysfs, lspci: LspciResult) -> list[HealthFinding]:
    """ACS of the PCIe switch ports above the GPUs and NICs (`switch_bridges`), read by
    `gpuctl.parsers.lspci` and judged by `gpuctl.verdicts.judge_acs` (redirect on a switch port
    fails); a bridge whose capabilities lspci could not read (not root) is not judged."""
    bridges = set(switch_bridges(sysfs))
    mine = [d for d in lspci.devices if d.bus_id and _bdf(d.bus_id) in bridges]
    out = [HealthFinding("pcie_acs", _bdf(d.bus_id or ""), NOT_JUDGED,
                         "not judged: lspci could not read its capabilities (run as root)")
           for d in mine if d.caps_denied]
    return out + from_verdicts("pcie_acs", vd.judge_acs([d for d in mine if not d.caps_denied]))


def _bdf(bus_id: str) -> str:
    return (bus_id if bus_id.count(":") == 2 else f"0000:{bus_id}").lower()


# ---------------------------------------------------------------- 7. Xid since boot

def judge_xid(result: XidResult, health: Health) -> list[HealthFinding]:
    """The kernel log since boot, judged by `gpuctl.xidpolicy` (the policy of verify and analyze)."""
    findings = xid_findings(result, health)
    out = [HealthFinding("xid", f.port or (f"GPU {f.bus_id}" if f.bus_id else "node"), f.status,
                         f"{f.check} {f.value}: {f.text}" if f.value is not None else f.text, f.remediation,
                         found=str(f.value or ""), source=f.source) for f in findings]
    if not out:
        out.append(HealthFinding("xid", "node", PASS, "no Xid, SXid or lost GPU since boot",
                                 source=health.xid_fatal.source))
    return out
