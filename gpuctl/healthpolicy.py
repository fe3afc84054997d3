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
from dataclasses import dataclass

from gpuctl.catalog import Health, PassiveLimits, PathLimit
from gpuctl.parsers.health import GpuClockEvents, LspciAcs, PciSysfs
from gpuctl.parsers.nvidia_smi import GpuFabric
from gpuctl.parsers.xid import XidResult
from gpuctl.remediation import Remediation
from gpuctl.xidpolicy import FAIL, WARN, xid_findings

PASS, NOT_JUDGED = "pass", "not_judged"
__all__ = ["FAIL", "NOT_JUDGED", "PASS", "WARN", "HealthFinding"]

#: the checks, in the order they are reported (a node's first failing one is its drain reason)
CHECKS: tuple[str, ...] = ("xid", "clock_events", "nvswitch_fabric", "pcie_aer", "ib_counters", "firmware",
                           "gpu_nic_numa", "pcie_acs")
FIRST_SAMPLE = "first sample: baseline recorded"
_REASON_WORDS = {"hw_slowdown": "HW slowdown", "hw_thermal_slowdown": "HW thermal slowdown",
                 "hw_power_brake_slowdown": "HW power brake slowdown", "sw_thermal_slowdown": "SW thermal slowdown"}
CLOCK_EVENTS_SOURCE = ("NVML nvmlClocksEventReasons (nvidia-smi --help-query-gpu clocks_event_reasons.*): HW slowdown "
                       "(thermal or power-supply protection, 'clocks cut by half or more'), HW power brake (an "
                       "external power-brake assertion), HW/SW thermal slowdown; none is expected on an idle GPU")


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


# ---------------------------------------------------------------- 1. clock events

def judge_clock_events(rows: Sequence[GpuClockEvents], limits: PassiveLimits) -> list[HealthFinding]:
    """An idle GPU with an active HW slowdown / power brake / thermal reason fails; a busy one
    (utilization above the load-free limit) is not judged."""
    limit = limits.idle_max_utilization_pct
    out = []
    for g in rows:
        if g.utilization_pct is None or g.utilization_pct > limit.value:
            load = "unknown" if g.utilization_pct is None else f"{g.utilization_pct:g} %"
            out.append(HealthFinding("clock_events", g.label, NOT_JUDGED, f"not judged: GPU busy (utilization {load}, "
                                     f"load-free is ≤ {limit.value:g} %)", found=load, source=limit.source))
            continue
        if all(v is None for v in g.reasons.values()):
            out.append(HealthFinding("clock_events", g.label, NOT_JUDGED,
                                     "not judged: the driver reports no clock-event reasons ([N/A])"))
            continue
        active = g.active
        if active:
            words = ", ".join(_REASON_WORDS.get(r, r) for r in active)
            out.append(HealthFinding(
                "clock_events", g.label, FAIL, f"{words} active at {g.utilization_pct:g} % utilization",
                Remediation.RESEAT_OR_REPLACE, expected="no HW slowdown, power brake or thermal reason on an idle GPU",
                found=words, source=CLOCK_EVENTS_SOURCE))
        else:
            out.append(HealthFinding("clock_events", g.label, PASS, "no slowdown reason active",
                                     source=CLOCK_EVENTS_SOURCE))
    return out


# ---------------------------------------------------------------- 2. NVSwitch fabric

def judge_fabric(gpus: Sequence[GpuFabric], limits: PassiveLimits) -> list[HealthFinding]:
    """On an NVSwitch SKU (the caller decides): every GPU's Fabric State Completed and Status Success."""
    want = limits.fabric_ready
    expected = f"State {want.state}, Status {want.status}"
    out = []
    for g in gpus:
        if g.state is None:
            out.append(HealthFinding("nvswitch_fabric", g.label, NOT_JUDGED,
                                     "not judged: nvidia-smi -q has no Fabric section (driver too old?)",
                                     expected=expected, source=want.source))
            continue
        found = f"State {g.state}, Status {g.status or 'N/A'}" + (f", CliqueId {g.clique_id}" if g.clique_id else "")
        if g.state == want.state and g.status == want.status:
            out.append(HealthFinding("nvswitch_fabric", g.label, PASS, found, expected=expected, found=found,
                                     source=want.source))
            continue
        # not (yet) registered: Fabric Manager is down or still training; registered with an error: reset
        remediation = Remediation.RECONFIGURE if g.state != want.state else Remediation.REBOOT
        why = ("fabric registration not complete (is nvidia-fabricmanager running?)" if g.state != want.state
               else "fabric registration failed")
        out.append(HealthFinding("nvswitch_fabric", g.label, FAIL, f"{why}: {found}", remediation,
                                 expected=expected, found=found, source=want.source))
    return out


# ---------------------------------------------------------------- counters since the last sample

def _delta(check: str, subject: str, now: int, before: int | None, limit: float, what: str, source: str,
           remediation: Remediation) -> HealthFinding:
    if before is None:
        return HealthFinding(check, subject, NOT_JUDGED, f"{FIRST_SAMPLE} ({what} {now})", found=str(now),
                             source=source)
    if now < before:
        return HealthFinding(check, subject, NOT_JUDGED, f"{what} went back from {before} to {now} (reset or "
                             f"reboot): new baseline recorded", found=str(now), source=source)
    rise = now - before
    expected = f"{what} increase ≤ {limit:g} since the last sample"
    if rise > limit:
        return HealthFinding(check, subject, FAIL, f"{what} rose by {rise} since the last sample ({before} → {now})",
                             remediation, expected=expected, found=f"+{rise}", source=source)
    return HealthFinding(check, subject, PASS, f"{what} unchanged at {now}" if not rise else f"{what} +{rise}",
                         expected=expected, found=f"+{rise}", source=source)


def judge_aer(sysfs: PciSysfs, previous: Mapping[str, int] | None, limits: PassiveLimits) -> list[HealthFinding]:
    """PCIe AER of the GPUs and NICs: fatal or non-fatal errors since boot fail; correctable ones
    are judged as the increase since `previous` ({bdf: correctable total})."""
    limit = limits.aer_correctable_max_increase
    out = []
    for fn in sorted(sysfs.functions.values(), key=lambda f: f.bdf):
        if not (fn.is_gpu or fn.is_nic) or not fn.aer:
            continue
        kind = "GPU" if fn.is_gpu else "NIC"
        subject = f"{kind} {fn.bdf}"
        bad = {k: n for k in ("fatal", "nonfatal") if (n := fn.aer.get(k, 0))}
        if bad:
            found = ", ".join(f"{n} {k}" for k, n in bad.items())
            out.append(HealthFinding("pcie_aer", subject, FAIL, f"PCIe AER {found} error(s) since boot",
                                     Remediation.RESEAT_OR_REPLACE, expected="0 fatal, 0 non-fatal",
                                     found=found, source=limit.source))
            continue
        if "correctable" not in fn.aer:
            continue
        before = None if previous is None else previous.get(fn.bdf)
        out.append(_delta("pcie_aer", subject, fn.aer["correctable"], before, limit.value,
                          "correctable AER errors", limit.source, Remediation.RESEAT_OR_REPLACE))
    if not out and any(f.is_gpu or f.is_nic for f in sysfs.functions.values()):
        out.append(HealthFinding("pcie_aer", "node", NOT_JUDGED,
                                 "not judged: no aer_dev_* counters in sysfs (kernel without AER statistics?)"))
    return out


def judge_ib_counters(sysfs: PciSysfs, previous: Mapping[str, Mapping[str, int]] | None,
                      limits: PassiveLimits) -> list[HealthFinding]:
    """IB port error counters (symbol_error, link_downed, link_error_recovery, port_rcv_errors):
    the increase since `previous` ({"mlx5_0/1": {counter: value}}); a first sample is not judged."""
    limit = limits.ib_counter_max_increase
    out = []
    for port, counters in sorted(sysfs.ib_counters.items()):
        before_port = None if previous is None else previous.get(port)
        for name, now in sorted(counters.items()):
            before = None if before_port is None else before_port.get(name)
            remediation = Remediation.RESEAT_OR_REPLACE  # a cable or transceiver taking errors
            out.append(_delta("ib_counters", f"{port} {name}", now, before, limit.value, name, limit.source,
                              remediation))
    return out


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


def judge_acs(sysfs: PciSysfs, acs: LspciAcs, limits: PassiveLimits) -> list[HealthFinding]:
    """ACS request or completion redirect enabled on a PCIe switch port above a GPU or NIC fails:
    every peer-to-peer transfer (GPU↔GPU, GPUDirect RDMA) is sent up to the root complex."""
    rule = limits.acs
    out = []
    for bdf in switch_bridges(sysfs):
        if bdf in acs.denied:
            out.append(HealthFinding("pcie_acs", f"bridge {bdf}", NOT_JUDGED,
                                     "not judged: lspci could not read its capabilities (run as root)"))
            continue
        flags = acs.ctl.get(bdf)
        if flags is None:
            continue  # no ACS capability: nothing can redirect
        on = [f for f in rule.must_be_off if flags.get(f)]
        found = "ACSCtl " + " ".join(f"{k}{'+' if v else '-'}" for k, v in flags.items())
        if on:
            out.append(HealthFinding("pcie_acs", f"bridge {bdf}", FAIL, f"ACS {', '.join(on)} enabled on a PCIe "
                                     "switch port above a GPU or NIC: peer-to-peer traffic goes through the root "
                                     "complex", Remediation.RECONFIGURE, expected=" ".join(f"{f}-" for f in
                                                                                           rule.must_be_off),
                                     found=found, source=rule.source))
        else:
            out.append(HealthFinding("pcie_acs", f"bridge {bdf}", PASS, found, found=found, source=rule.source))
    return out


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
