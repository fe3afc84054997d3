"""The GPUs: nvidia-smi (health, ECC and row remapping, PCIe link, clock events, fabric state),
NVLink status, memory/host bandwidth, DCGM diagnostics and Xid events."""

from __future__ import annotations

from collections.abc import Sequence

from gpuctl.catalog import EccLimits, Health, Sku, load_health
from gpuctl.parsers.bandwidth import BandwidthResult
from gpuctl.parsers.dcgm import DcgmResultSet, DcgmTest
from gpuctl.parsers.nvidia_smi.model import GpuInfo, NvidiaSmiResult
from gpuctl.parsers.nvlink import TOOL as NVLINK_TOOL
from gpuctl.parsers.nvlink import NvlinkResult
from gpuctl.parsers.xid import XidResult
from gpuctl.remediation import Remediation
from gpuctl.verdicts.core import NODE, Status, Subject, Verdict, _threshold, judge, judge_fact, partial_paste
from gpuctl.xidpolicy import FAIL, PASS, WARN, xid_findings

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
