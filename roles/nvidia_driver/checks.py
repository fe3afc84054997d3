"""Checks of the nvidia_driver role: driver packages, kernel modules, and the GPUs themselves.

Every expectation comes from the host's NodeSpec (driver version, GPU count and model,
PCIe generation and width, NVLink code) and the shared health limits
(`gpuctl.catalog.load_health()`: ECC, fatal Xids). One `nvidia-smi -q -x`, one `topo -m`
and one kernel log per host feed every check here.
"""

from __future__ import annotations

import contextlib
from itertools import combinations

from gpuctl import healthpolicy
from gpuctl.catalog import load_health, load_sku
from gpuctl.checks.api import (
    CouldNotRun,
    Remediation,
    component_checks,
    expect,
    fail,
    for_each,
    judge_firmware_lock,
    judge_health,
    judge_verdicts,
)
from gpuctl.checks.probe import Probe, nvml_remediation
from gpuctl.health import comparable_previous, load_previous
from gpuctl.parsers.firmware import vbios_versions
from gpuctl.parsers.nvidia_smi.model import GpuInfo, NvidiaSmiFailure
from gpuctl.spec import NodeSpec
from gpuctl.verdicts import (
    Subject,
    judge_ecc_counts,
    judge_gpu_against_sku,
    judge_gpu_count,
    judge_nvlink_pair,
)
from gpuctl.xidpolicy import FAIL, xid_findings

ROLE = "nvidia_driver"


def gpu_items(spec: NodeSpec) -> list[str]:
    return [f"gpu{i}" for i in range(spec.hardware.gpu_count)]


def pair_items(spec: NodeSpec) -> list[str]:
    if not spec.hardware.nvlink_topo_code:
        return []
    return [f"gpu{a}-gpu{b}" for a, b in combinations(range(spec.hardware.gpu_count), 2)]


def _gpu(probe: Probe, item: str) -> GpuInfo:
    index = int(item.removeprefix("gpu"))
    gpus = probe.gpus().gpus
    if index >= len(gpus):
        raise CouldNotRun(f"GPU {index} is not visible ({len(gpus)} GPUs); see {ROLE}.gpu_present[{item}]",
                          Remediation.RESEAT_OR_REPLACE)
    return gpus[index]


# ---------------------------------------------------------------- packages, services, modules

globals().update(component_checks(ROLE))  # packages pinned/held, services, modules (declared)


def test_nvml_readable(host, spec, probe):
    """nvidia-smi can talk to the driver (no 'Driver/library version mismatch')."""
    try:
        probe.nvidia_smi()
    except NvidiaSmiFailure as exc:
        fail(f"nvidia-smi cannot read the GPUs: {exc}", expected="nvidia-smi lists the GPUs",
             found=str(exc).removeprefix("nvidia-smi: "), remediation=nvml_remediation(exc))


def test_driver_versions_agree(host, spec, probe):
    """Kernel module and user-space driver are the same version (else: reboot)."""
    module, where = probe.kernel_module_version()
    if module is None:
        fail("the nvidia kernel module is not loaded", expected=f"{where} reads {spec.driver_version}",
             found="no nvidia kernel module", remediation=Remediation.REBOOT)
    try:
        smi = probe.nvidia_smi()
    except NvidiaSmiFailure as exc:
        fail(f"nvidia-smi reports a mismatch between user space and the kernel module {module}: {exc}",
             expected=f"user-space driver = kernel module {module}", found=str(exc).removeprefix("nvidia-smi: "),
             remediation=nvml_remediation(exc))
    expect(smi.driver_version == module,
           f"user-space driver {smi.driver_version} but kernel module {module} ({where}): reboot to load the "
           "installed module", expected=f"user space = kernel module ({module})",
           found=f"user space {smi.driver_version}, kernel module {module}", remediation=Remediation.REBOOT)


def test_driver_version(host, spec, probe):
    """The running kernel module is the matrix's driver. A reboot fixes it only where the
    matrix's user-space driver is installed and waits for its module; where the installed
    user space is another release too, the driver must be installed (reconfigure)."""
    module, where = probe.kernel_module_version()
    if module == spec.driver_version:
        return
    message = f"kernel module {module or 'not loaded'} ({where}), the matrix {spec.matrix} pins {spec.driver_version}"
    remediation = Remediation.RECONFIGURE
    if module:
        try:
            user: str | None = probe.nvidia_smi().driver_version
        except NvidiaSmiFailure:
            user = None  # user space and module disagree: a new driver waits for its reboot
        except CouldNotRun:
            user = "missing"  # no nvidia-smi: no user-space driver installed
        if user is None or user == spec.driver_version:
            remediation = Remediation.REBOOT
        else:
            message += f"; the installed user-space driver is {user} too: install the matrix's driver"
    fail(message, expected=spec.driver_version, found=module or "not loaded", remediation=remediation)


# ---------------------------------------------------------------- GPUs

def test_gpu_count(host, spec, probe):
    """As many GPUs as the SKU has — `gpuctl.verdicts.judge_gpu_count`, as `gpuctl analyze`."""
    n = len(probe.gpus().gpus)
    judge_verdicts([judge_gpu_count(n, load_sku(spec.sku), Subject(spec.node))],
                   expected=lambda v: f"{v.threshold} GPUs", found=lambda v: f"{v.value} GPUs")


def _against_sku(spec: NodeSpec, g: GpuInfo, check: str) -> list:
    """The verdict `check` of `gpuctl.verdicts.judge_gpu_against_sku` (the rule analyze applies) for GPU g."""
    verdicts = judge_gpu_against_sku(g, load_sku(spec.sku), Subject(spec.node, g.index, g.bus_id))
    return [v for v in verdicts if v.check == check]


@for_each(gpu_items)
def test_gpu_present(host, spec, probe, item):
    index = int(item.removeprefix("gpu"))
    gpus = probe.gpus().gpus
    expect(index < len(gpus), f"GPU {index} is missing: nvidia-smi lists {len(gpus)} of {spec.hardware.gpu_count}",
           expected=f"GPU {index} visible", found=f"{len(gpus)} GPUs (indices 0-{len(gpus) - 1})",
           remediation=Remediation.RESEAT_OR_REPLACE, subject=f"GPU {index}")


@for_each(gpu_items)
def test_gpu_model(host, spec, probe, item):
    g = _gpu(probe, item)
    if g.name is None:
        raise CouldNotRun(f"{g.label}: nvidia-smi reports no product name")
    judge_verdicts(_against_sku(spec, g, "gpu_model"), expected=lambda v: v.threshold, found=lambda v: v.value,
                   subject=g.label)


@for_each(gpu_items)
def test_gpu_memory(host, spec, probe, item):
    g = _gpu(probe, item)
    if g.memory_total_mib is None:
        raise CouldNotRun(f"{g.label}: nvidia-smi reports no FB memory total")
    judge_verdicts(_against_sku(spec, g, "memory_total_mib"), expected=lambda v: f">= {v.threshold} MiB",
                   found=lambda v: f"{v.value} MiB", subject=g.label)


@for_each(gpu_items)
def test_gpu_persistence_mode(host, spec, probe, item):
    g = _gpu(probe, item)
    expect(g.persistence_mode is True, f"{g.label}: persistence mode is off (nvidia-persistenced not running?)",
           expected="Enabled", found={True: "Enabled", False: "Disabled", None: "N/A"}[g.persistence_mode],
           remediation=Remediation.RECONFIGURE, subject=g.label)


@for_each(gpu_items)
def test_gpu_ecc_mode(host, spec, probe, item):
    g = _gpu(probe, item)
    expect(g.ecc_mode is True, f"{g.label}: ECC is not enabled (nvidia-smi -i {g.index} -e 1, then reboot)",
           expected="Enabled", found={True: "Enabled", False: "Disabled", None: "N/A"}[g.ecc_mode],
           remediation=Remediation.RECONFIGURE, subject=g.label)


# how verify words each count of judge_ecc_counts: (after the limit, after the value)
_ECC_WORDS = {"ecc_volatile_uncorrectable": (" uncorrectable", " volatile uncorrectable"),
              "ecc_aggregate_uncorrectable": (" uncorrectable", " aggregate uncorrectable"),
              "ecc_dram_correctable": ("", ""), "ecc_sram_correctable": ("", "")}


@for_each(gpu_items)
def test_gpu_ecc_errors(host, spec, probe, item):
    """No uncorrectable ECC errors (an aggregate count whose rows were remapped is healthy);
    corrected counts within the shared health limits — `gpuctl.verdicts.judge_ecc_counts`,
    the rule `gpuctl analyze` applies."""
    g = _gpu(probe, item)
    if g.ecc_volatile_uncorrectable is None and g.ecc_aggregate_uncorrectable is None:
        raise CouldNotRun(f"{g.label}: nvidia-smi reports no ECC error counts")
    judge_verdicts(judge_ecc_counts(g, load_health().ecc, Subject(spec.node, g.index, g.bus_id)),
                   expected=lambda v: f"<= {v.threshold:g}{_ECC_WORDS[v.check][0]}",
                   found=lambda v: f"{v.value}{_ECC_WORDS[v.check][1]}", subject=g.label)


@for_each(gpu_items)
def test_gpu_retired_pages(host, spec, probe, item):
    g = _gpu(probe, item)
    if g.retired_pending is None and g.remap_pending is not None:
        return  # Ampere and later retire by row remapping (gpu_row_remap); no page retirement to judge
    if g.retired_pending is None:
        raise CouldNotRun(f"{g.label}: nvidia-smi reports neither page retirement nor row remapping")
    expect(not g.retired_pending, f"{g.label}: page retirement pending (reboot to retire the pages)",
           expected="no pending page retirement", found="pending", remediation=Remediation.REBOOT, subject=g.label)


@for_each(gpu_items)
def test_gpu_row_remap(host, spec, probe, item):
    g = _gpu(probe, item)
    if g.remap_pending is None and g.remap_failure is None:
        if g.retired_pending is not None:
            return  # pre-Ampere GPU: page retirement instead (gpu_retired_pages)
        raise CouldNotRun(f"{g.label}: nvidia-smi reports no row remapping state")
    expect(not g.remap_failure, f"{g.label}: row remapping failed — no spare rows left",
           expected="remapping failure: no", found="remapping failure: yes", remediation=Remediation.VENDOR_RMA,
           subject=g.label)
    expect(not g.remap_pending, f"{g.label}: row remapping pending (reset the GPU or reboot)",
           expected="remapping pending: no", found=f"remapping pending: yes ({g.remapped_uncorrectable or 0} "
           "rows remapped for uncorrectable errors)", remediation=Remediation.REBOOT, subject=g.label)


@for_each(gpu_items)
def test_gpu_pcie_width(host, spec, probe, item):
    g = _gpu(probe, item)
    if g.pcie_width_current is None:
        raise CouldNotRun(f"{g.label}: nvidia-smi reports no current PCIe link width")
    judge_verdicts(_against_sku(spec, g, "pcie_width"), expected=lambda v: f"x{v.threshold}",
                   found=lambda v: f"x{v.value}" + (f" (max x{g.pcie_width_max})" if g.pcie_width_max else ""),
                   subject=g.label)


@for_each(gpu_items)
def test_gpu_pcie_gen(host, spec, probe, item):
    """The link is capable of the SKU's PCIe generation. The *current* generation drops
    at idle to save power, so the maximum is judged, not the current."""
    g = _gpu(probe, item)
    if g.pcie_gen_max is None:
        raise CouldNotRun(f"{g.label}: nvidia-smi reports no maximum PCIe generation")
    judge_verdicts(_against_sku(spec, g, "pcie_gen_max"), expected=lambda v: f"Gen{v.threshold}",
                   found=lambda v: f"Gen{v.value}", subject=g.label)


@for_each(pair_items)
def test_nvlink_pair(host, spec, probe, item):
    """Every GPU pair is joined by the SKU's NVLink bond (topo -m code, e.g. NV18) —
    `gpuctl.verdicts.judge_nvlink_pair`, as `gpuctl analyze topo`."""
    a, b = (int(x.removeprefix("gpu")) for x in item.split("-"))
    topo = probe.topo()
    link = next((p for p in topo.gpu_pairs() if {p.a, p.b} == {f"GPU{a}", f"GPU{b}"}), None)
    if link is None:
        raise CouldNotRun(f"topo -m has no GPU{a}/GPU{b} ({len(topo.gpus)} GPUs); see "
                          f"{ROLE}.gpu_present", Remediation.RESEAT_OR_REPLACE)
    judge_verdicts([judge_nvlink_pair(link, load_sku(spec.sku), Subject(spec.node))],
                   expected=lambda v: v.threshold, found=lambda v: v.value, subject=f"GPU {a} ↔ GPU {b}")


# ---------------------------------------------------------------- passive health (gpuctl health's checks)

def _passive():
    limits = load_health().passive
    if limits is None:
        raise CouldNotRun("catalog/health.yaml has no passive: limits")
    return limits


def _health_baseline(spec, probe):
    """The last `gpuctl health` sample of this node as health compares with it (a reboot since:
    since-boot counters from zero, `gpuctl.health.comparable_previous`); {} when there is none."""
    boot_id = None
    with contextlib.suppress(CouldNotRun):
        boot_id = probe.pci_sysfs().boot_id
    return comparable_previous(load_previous(spec.cluster, spec.node) or {}, boot_id)


def test_health_clock_events(host, spec, probe):
    """No HW slowdown, power brake or thermal clock-event reason on an idle GPU (busy GPUs are
    not judged) — `gpuctl.healthpolicy.judge_clock_events`, as `gpuctl health`."""
    judge_health(healthpolicy.judge_clock_events(probe.gpus().gpus, _passive()))


def test_health_nvlink_errors(host, spec, probe):
    """NVLink replay, recovery and CRC error counters per GPU and link as the change since the last
    `gpuctl health` sample (`gpuctl.healthpolicy.judge_nvlink_errors`); verify reads that sample,
    never writes it: without one the check is skipped, not passed."""
    if not (spec.hardware.gpu_count and spec.hardware.nvlink_topo_code):
        import pytest

        pytest.skip("no NVLink on this SKU")
    previous = _health_baseline(spec, probe)
    judge_health(healthpolicy.judge_nvlink_errors(probe.nvlink_errors(), previous.get("nvlink_errors")))


def test_health_gpu_firmware(host, spec, probe, locked_firmware):
    """Every GPU's VBIOS as the lock file records it for this node (`gpuctl.healthpolicy.judge_firmware`,
    read from the same `nvidia-smi -q -x` as the lock's, `gpuctl.parsers.firmware.vbios_versions`); skipped
    without a lock entry."""
    judge_firmware_lock(spec, vbios_versions(probe.gpus().gpus), locked_firmware)


def test_health_pcie_aer(host, spec, probe):
    """No fatal or non-fatal PCIe AER error on a GPU or NIC since boot; correctable ones judged as
    the change since the last `gpuctl health` sample (verify reads that sample, never writes it)."""
    previous = _health_baseline(spec, probe)
    judge_health(healthpolicy.judge_aer(probe.pci_sysfs(), previous.get("aer_correctable")))


def test_health_gpu_nic_numa(host, spec, probe):
    """Each GPU's NUMA node holds a fabric NIC where the SKU expects one NIC per GPU (else reported)."""
    judge_health(healthpolicy.judge_numa(probe.pci_sysfs(), load_sku(spec.sku).fabric.gpu_nic_max_path,
                                         spec.hardware.gpu_count))


def test_health_pcie_acs(host, spec, probe):
    """No ACS request/completion redirect on a PCIe switch port above a GPU or NIC (`lspci -vvv`)."""
    if not healthpolicy.switch_bridges(probe.pci_sysfs()):
        import pytest

        pytest.skip("not judged: no PCIe switch above the GPUs and NICs")
    judge_health(healthpolicy.judge_acs(probe.pci_sysfs(), probe.pcie_acs()))


def test_no_fatal_xid(host, spec, probe):
    """No fatal Xid (GPU), no GPU lost without an Xid (fell off the bus, probe failed) and no
    fatal SXid (NVSwitch) in this boot's kernel log — judged by `gpuctl.xidpolicy`, the policy
    `gpuctl analyze xid` applies (Xid 154 by its recovery action, RST: Yes fails any Xid)."""
    health = load_health()
    failed = [f for f in xid_findings(probe.kernel_log(), health) if f.status == FAIL]
    if not failed:
        return
    found = "; ".join(f"{f.port or f.bus_id or 'node'}: {f.text}" for f in failed)
    ranked = [Remediation.RESEAT_OR_REPLACE, Remediation.REBOOT, Remediation.RECONFIGURE, Remediation.RERUN]
    remediation = next((r for r in ranked if any(f.remediation is r for f in failed)), failed[0].remediation)
    fail(f"fatal GPU errors in the kernel log: {found}",
         expected=f"no fatal Xid and no lost GPU ({health.xid_fatal.source})", found=found, remediation=remediation)
