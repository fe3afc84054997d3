"""The SKU catalog: what each GPU server type is and what it must measure.

Data lives in `catalog/skus/<name>.yaml` (one file per SKU, every figure with its
`source:`) and `catalog/health.yaml` (limits shared by every SKU). This module loads
them into typed, frozen models; nothing here hard-codes a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuctl.boundary import catalog_name_problem
from gpuctl.errors import InputError
from gpuctl.paths import catalog_dir
from gpuctl.validation import validate_document
from gpuctl.yamlsrc import load_yaml

# Every SKU must define every one of these thresholds (a missing one is never a pass).
THRESHOLD_NAMES: tuple[str, ...] = (
    "all_reduce_busbw_gb_s",
    "multi_node_busbw_gb_s",
    "h2d_gb_s",
    "d2h_gb_s",
    "p2p_gb_s",
    "hbm_copy_fraction",
    "ib_write_bw_gbit_s",
    "ib_write_lat_us",
    "fio_randread_iops",
    "fio_seqwrite_gb_s",
    "train_mfu_fraction",
    "train_scaling_efficiency",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Figure(_Frozen):
    """A number with the public source it came from."""

    value: float
    source: str = Field(min_length=3)


class Workload(_Frozen):
    """The workload a figure was measured for: a threshold or rule holds only there.

    Each field left out is not a condition. `gpus_per_node`: the ranks of an nccl-tests run
    on each node; `min_message_bytes`: the smallest message the figure is for (a
    large-message bandwidth floor says nothing of an 8-byte message-rate run); `fio_rw`:
    the fio workloads (rw=) it is for; `nics_per_gpu`: fabric NICs per GPU of the build
    (a placement rule for one NIC per GPU says nothing of a box with one NIC per GPU pair).
    `source` says where the workload comes from. `outside_workload` is the one function
    that decides whether a measurement falls outside it.
    """

    gpus_per_node: int | None = Field(default=None, ge=1)
    min_message_bytes: int | None = Field(default=None, ge=1)
    fio_rw: tuple[str, ...] | None = None
    nics_per_gpu: float | None = Field(default=None, gt=0)
    source: str = Field(min_length=3)

    def describe(self) -> str:
        parts = []
        if self.gpus_per_node is not None:
            parts.append(f"{self.gpus_per_node} GPUs per node")
        if self.min_message_bytes is not None:
            parts.append(f"messages of {self.min_message_bytes:,} B or more")
        if self.fio_rw is not None:
            parts.append("fio rw=" + "/".join(self.fio_rw))
        if self.nics_per_gpu is not None:
            parts.append(f"{self.nics_per_gpu:g} fabric NIC per GPU")
        return ", ".join(parts)


@dataclass(frozen=True)
class Measured:
    """What a measurement's own output says about its workload (None: not known, which
    never puts it outside a workload)."""

    gpus_per_node: int | None = None
    message_bytes: int | None = None
    fio_rw: tuple[str, ...] | None = None
    nics: int | None = None
    gpus: int | None = None


def outside_workload(workload: Workload | None, measured: Measured | None) -> str | None:
    """Why `measured` falls outside `workload` (the figure is then reported, not judged),
    or None when the threshold applies. Unknown facts never exclude a measurement.

    NICs per GPU: a build with half the workload's NICs per GPU or fewer is a different
    design (one NIC per GPU pair or fewer) and is outside; above that it is the workload's
    build, perhaps missing a NIC (7 of 8), and is judged, so a lost NIC still fails the GPU
    that has no near NIC, while a 4-NIC, 8-GPU design is not held to a one-NIC-per-GPU rule."""
    if workload is None or measured is None:
        return None
    why = []
    if workload.gpus_per_node is not None and measured.gpus_per_node is not None \
            and measured.gpus_per_node != workload.gpus_per_node:
        why.append(f"{measured.gpus_per_node} GPU{'s' if measured.gpus_per_node != 1 else ''} per node, the "
                   f"threshold is for {workload.gpus_per_node}")
    if workload.min_message_bytes is not None and measured.message_bytes is not None \
            and measured.message_bytes < workload.min_message_bytes:
        why.append(f"{measured.message_bytes:,} B messages, the threshold is for {workload.min_message_bytes:,} B "
                   "or more")
    if workload.fio_rw is not None and measured.fio_rw is not None \
            and not set(measured.fio_rw) <= set(workload.fio_rw):
        why.append(f"fio rw={'/'.join(measured.fio_rw)}, the threshold is for rw={'/'.join(workload.fio_rw)}")
    if workload.nics_per_gpu is not None and measured.nics is not None and measured.gpus:
        ratio = measured.nics / measured.gpus
        if ratio <= workload.nics_per_gpu / 2:
            why.append(f"{measured.nics} fabric NICs for {measured.gpus} GPUs, the rule is for "
                       f"{workload.nics_per_gpu:g} NIC per GPU")
    return "; ".join(why) or None


class Threshold(_Frozen):
    """An acceptance limit: `min` (higher is better) or `max` (lower is better).

    A value between `min` and `warn_below` (or `warn_above` and `max`) is a warning.
    `not_applicable` marks a measurement that makes no sense for the SKU (one GPU has
    no peer to copy to); the verdict then says so with this source as the reason.
    """

    min: float | None = None
    max: float | None = None
    warn_below: float | None = None
    warn_above: float | None = None
    not_applicable: bool = False
    source: str = Field(min_length=3)
    applies_to: Workload | None = None  # outside it the figure is reported, not judged

    @model_validator(mode="after")
    def _one_direction(self) -> Threshold:
        if self.not_applicable:
            return self
        if (self.min is None) == (self.max is None):
            raise ValueError("a threshold needs exactly one of 'min' or 'max'")
        if self.min is not None and self.warn_below is not None and self.warn_below < self.min:
            raise ValueError("warn_below must be >= min")
        if self.max is not None and self.warn_above is not None and self.warn_above > self.max:
            raise ValueError("warn_above must be <= max")
        return self


class GpuFacts(_Frozen):
    count: int = Field(ge=1, le=16)
    model: str
    pci_device_ids: tuple[str, ...]
    architecture: Literal["ampere", "hopper", "blackwell"]
    compute_capability: str
    memory_mib: int
    source: str

    @property
    def pci_ids(self) -> tuple[str, ...]:
        """Device ids as lowercase hex without 0x ('2330')."""
        return tuple(i.lower().removeprefix("0x") for i in self.pci_device_ids)


class NvlinkFacts(_Frozen):
    nvswitch: bool
    links_per_gpu: int
    topo_code: str | None
    per_gpu_bandwidth_gb_s: Figure
    source: str


class PcieFacts(_Frozen):
    generation: int = Field(ge=1, le=6)
    width: int
    source: str


class PathLimit(_Frozen):
    """The farthest `nvidia-smi topo -m` PCIe path allowed (PIX nearest ... SYS farthest)."""

    code: Literal["PIX", "PXB", "PHB", "NODE", "SYS"]
    source: str = Field(min_length=3)
    applies_to: Workload | None = None  # outside it each GPU's nearest NIC is reported, not judged


class FabricFacts(_Frozen):
    infiniband_rate_gbps: Figure | None = None
    roce_rate_gbps: Figure | None = None
    hcas: Figure | None = None
    # every GPU has a fabric NIC at most this far away in topo -m (None: not judged)
    gpu_nic_max_path: PathLimit | None = None


class Sku(_Frozen):
    name: str
    description: str
    preview: bool = False
    gpu: GpuFacts
    nvlink: NvlinkFacts
    pcie: PcieFacts
    hbm_bandwidth_tb_s: Figure
    dense_bf16_tflops: Figure
    node_power_kw: Figure
    min_cpu_memory_gib: Figure
    nvme_count: Figure
    fabric: FabricFacts
    thresholds: dict[str, Threshold]

    @model_validator(mode="after")
    def _all_thresholds(self) -> Sku:
        missing = [n for n in THRESHOLD_NAMES if n not in self.thresholds]
        unknown = [n for n in self.thresholds if n not in THRESHOLD_NAMES]
        if missing:
            raise ValueError(f"thresholds missing: {', '.join(missing)}")
        if unknown:
            raise ValueError(f"unknown thresholds: {', '.join(unknown)} (known: {', '.join(THRESHOLD_NAMES)})")
        return self

    def fabric_rate_gbps(self, fabric_type: str) -> float | None:
        fig = self.fabric.infiniband_rate_gbps if fabric_type == "infiniband" else self.fabric.roce_rate_gbps
        if fig is None and fabric_type == "roce":
            fig = self.fabric.infiniband_rate_gbps
        return fig.value if fig else None


class Limit(_Frozen):
    values: tuple[int, ...]
    source: str


class XidList(_Frozen):
    codes: tuple[int, ...]
    source: str


class EccLimits(_Frozen):
    max_dram_corrected: Figure
    max_sram_corrected: Figure
    max_uncorrectable: Figure
    # 1: an aggregate uncorrectable count whose rows were remapped (not pending, no failure) is not an RMA
    remapped_uncorrectable_ok: Figure | None = None
    # 1: nvidia-smi's 'SRAM Threshold Exceeded: Yes' fails the GPU (RMA)
    sram_threshold: Figure | None = None


class PcieLinkLimits(_Frozen):
    """Current PCIe link against the GPU's own maximum (no SKU needed)."""

    min_width_fraction_of_max: Figure
    gen_below_max_warns: Figure


class PreflightLimits(_Frozen):
    min_free_root_gib: Figure


class TrainingLimits(_Frozen):
    """When a training run's MFU is judged: a model too small to load a GPU says nothing."""

    mfu_min_flops_per_token: Figure


class AdapterRates(_Frozen):
    """The fastest port rate (Gb/s) of each RDMA adapter model, keyed by ibstat's 'CA type'."""

    rates: dict[str, float]
    source: str = Field(min_length=3)


class PassiveLimits(_Frozen):
    """What `gpuctl health` (and verify's health checks) judge against."""

    #: a GPU busier than this (utilization.gpu %) is not judged for clock events: not load-free
    idle_max_utilization_pct: Figure


class CounterRises(_Frozen):
    """Error counters judged by their rise between two samples: counter name → status."""

    counters: dict[str, Literal["warn", "fail"]]
    source: str = Field(min_length=3)


class FaultFindingLimits(_Frozen):
    """What `gpuctl.bench.localise` calls slow: `slow_fraction` below its stage's best figure."""

    slow_fraction: Figure


class Health(_Frozen):
    xid_fatal: XidList
    ecc: EccLimits
    fabric_rates_gbps: dict[Literal["infiniband", "roce"], Limit]
    preflight: PreflightLimits
    pcie_link: PcieLinkLimits | None = None
    hca_max_rate_gbps: AdapterRates | None = None
    training: TrainingLimits | None = None
    passive: PassiveLimits | None = None
    counter_rises: dict[Literal["nvlink", "infiniband", "pcie_aer"], CounterRises] | None = None
    fault_finding: FaultFindingLimits | None = None


def _skus_dir() -> Path:
    return catalog_dir() / "skus"


def sku_names() -> list[str]:
    return sorted(p.stem for p in _skus_dir().glob("*.yaml"))


@cache
def load_sku(name: str) -> Sku:
    """The SKU named `name`; InputError naming the known SKUs if there is none. Only a plain
    catalog name is looked up (never a path: `../../x` would load any YAML file as a SKU)."""

    problem = catalog_name_problem(name, "SKU")
    if problem:
        raise InputError(problem)
    path = _skus_dir() / f"{name}.yaml"
    if not path.is_file():
        raise InputError(f"unknown SKU '{name}'; known: {', '.join(sku_names())}")
    data, smap = load_yaml(path)
    sku = validate_document(Sku, data, smap, "SKU")
    if sku.name != name:
        raise InputError(f"{path}: name '{sku.name}' does not match the file name '{name}'")
    return sku


@cache
def load_health() -> Health:
    path = catalog_dir() / "health.yaml"
    data, smap = load_yaml(path)
    return validate_document(Health, data, smap, "health limits file")
