"""nvidia-smi's data model, shared by its three forms: `GpuInfo` per GPU, `NvidiaSmiResult`, the
typed `NvidiaSmiFailure`s (NVML could not talk to the driver); the value readers the three forms
share live in `values`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote

TOOL = "nvidia-smi"

# The --query-gpu fields checks ask for, in this order (see `nvidia-smi --help-query-gpu`).
QUERY_GPU_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "pci.bus_id",
    "driver_version",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "memory.total",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "ecc.errors.corrected.aggregate.total",
    "retired_pages.pending",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "serial",
    "uuid",
)


class NvidiaSmiFailure(ParseError):
    """nvidia-smi ran but could not read the GPUs; `kind` names why."""

    kind = "nvidia-smi-failed"


class DriverLibraryMismatch(NvidiaSmiFailure):
    """'Failed to initialize NVML: Driver/library version mismatch' (user space upgraded,
    kernel module still the old one: reboot or reload the module)."""

    kind = "driver-library-mismatch"


class DriverNotLoaded(NvidiaSmiFailure):
    """'NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver'."""

    kind = "driver-not-loaded"


class NoDevicesFound(NvidiaSmiFailure):
    """'No devices were found'."""

    kind = "no-devices"


class GpuLost(NvidiaSmiFailure):
    """'Unable to determine the device handle for GPU ...: GPU is lost' / 'Unknown Error'."""

    kind = "gpu-lost"


# Each pattern beside the line it matches.
_FAILURES: tuple[tuple[re.Pattern[str], type[NvidiaSmiFailure]], ...] = (
    # "Failed to initialize NVML: Driver/library version mismatch"
    (re.compile(r"Driver/library version mismatch"), DriverLibraryMismatch),
    # "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure ..."
    (re.compile(r"couldn't communicate with the NVIDIA driver"), DriverNotLoaded),
    # "No devices were found"
    (re.compile(r"^No devices were found", re.M), NoDevicesFound),
    # "Unable to determine the device handle for GPU0000:18:00.0: GPU is lost.  Reboot the system ..."
    (re.compile(r"Unable to determine the device handle|GPU is lost"), GpuLost),
    # "Failed to initialize NVML: Unknown Error"
    (re.compile(r"Failed to initialize NVML"), NvidiaSmiFailure),
)


@dataclass(frozen=True)
class GpuInfo:
    """One GPU. Counts are None where nvidia-smi reports N/A or the section is absent."""

    index: int
    name: str | None
    bus_id: str | None
    uuid: str | None = None
    serial: str | None = None
    driver_version: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    memory_total_mib: int | None = None
    persistence_mode: bool | None = None
    ecc_mode: bool | None = None
    ecc_volatile_uncorrectable: int | None = None
    ecc_aggregate_uncorrectable: int | None = None
    ecc_aggregate_correctable: int | None = None
    ecc_dram_correctable: int | None = None
    ecc_sram_correctable: int | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    ecc_sram_uncorrectable: int | None = None  # aggregate SRAM part (not covered by row remapping)
    sram_threshold_exceeded: bool | None = None  # Hopper+: 'SRAM Threshold Exceeded'
    # 'Clocks Event Reasons' (535+) / 'Clocks Throttle Reasons' (older): (reason, active) in the
    # order printed, reason names as -q prints them ('HW Slowdown'); None: section absent
    clock_events: tuple[tuple[str, bool], ...] | None = None
    # 'Utilization' / <utilization><gpu_util> (whether the clock events are judged: a load-free GPU)
    utilization_gpu_pct: int | None = None
    vbios_version: str | None = None  # 'VBIOS Version' / <vbios_version>
    # 'Fabric' (NVSwitch and multi-node NVLink systems; N/A elsewhere); fabric_section: the output
    # has the section at all (drivers before 535 and the CSV form do not)
    fabric_section: bool = False
    fabric_state: str | None = None  # Completed, In Progress, Not Started (N/A, Not Supported: None)
    fabric_status: str | None = None  # Success, or the NVML error ('Insufficient Resources')
    fabric_clique_id: str | None = None
    fabric_cluster_uuid: str | None = None
    fabric_health: str | None = None  # 'Health' / 'Summary' (Healthy, Unhealthy; GB200 and later)

    @property
    def label(self) -> str:
        """'GPU 3 (00000000:4C:00.0)'."""
        return f"GPU {self.index}" + (f" ({self.bus_id})" if self.bus_id else "")


@dataclass(frozen=True)
class NvidiaSmiResult:
    format: str  # "q", "xml" or "csv"
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[GpuInfo, ...]
    # what was read but not used (CSV columns gpuctl does not judge), for the reader
    notes: tuple[str, ...] = ()
    # why the paste holds only part of the output (None: whole); what it holds is still judged
    partial: str | None = None


def check_failure(text: str) -> None:
    """Raise the typed `NvidiaSmiFailure` when `text` is NVML's one-line failure instead of a report."""
    for pattern, exc in _FAILURES:
        if m := pattern.search(text):
            line = next((ln for ln in text.splitlines() if m.group(0) in ln), m.group(0))
            raise exc(f"{TOOL}: {quote(line)}")


# reason names of the XML form (`clocks_event_reason_hw_slowdown`) as -q prints them
CLOCK_EVENT_NAMES: dict[str, str] = {
    "gpu_idle": "Idle", "applications_clocks_setting": "Applications Clocks Setting",
    "sw_power_cap": "SW Power Cap", "hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
    "hw_power_brake_slowdown": "HW Power Brake Slowdown", "sync_boost": "Sync Boost",
    "sw_thermal_slowdown": "SW Thermal Slowdown", "display_clocks_setting": "Display Clock Setting",
}
