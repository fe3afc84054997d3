"""Verdicts: a parsed measurement judged against a threshold from the SKU catalog.

One module per subject, each judgement made once, by one function:
  core      Status, Subject, Verdict; `judge()` (numbers against a threshold), `judge_fact()`,
            `could_not_run()`, `overall()`, partial pastes
  gpu       nvidia-smi (health, ECC/remap, PCIe link, clock events, fabric), NVLink status,
            memory/host bandwidth, DCGM, Xid
  pcie      lspci ACS/AER, the topo -m matrix
  fabric    ibstat, perftest
  counters  error counters between two samples (NVLink, InfiniBand)
  nccl      nccl-tests, the NCCL debug log's NET/IB completions
  storage   fio, gdsio
  training  the training run, its launchers, scaling efficiency

This package's namespace is the API callers use (`from gpuctl.verdicts import judge_nccl`):
a caller needs no knowledge of which subject module holds a judgement. The rules
themselves: see `gpuctl.verdicts.core`.
"""

from gpuctl.verdicts.core import (
    NODE,
    PARTIAL_SOURCE,
    Status,
    Subject,
    Value,
    Verdict,
    could_not_run,
    judge,
    judge_fact,
    overall,
    partial_paste,
)
from gpuctl.verdicts.counters import (
    TOOL_NVLINK_ERRORS,
    CounterDelta,
    CounterSample,
    counter_deltas,
    judge_counter_deltas,
    judge_counter_samples,
    judge_ib_counters,
    judge_nvlink_errors,
)
from gpuctl.verdicts.fabric import (
    IB_BW_CHECK,
    judge_ib_write_bw,
    judge_ib_write_lat,
    judge_ibstat,
    judge_port_rate,
    judge_port_state,
)
from gpuctl.verdicts.gpu import (
    CLOCK_EVENTS_SOURCE,
    DCGM_VALIDATION_SOURCE,
    FABRIC_SOURCE,
    dcgm_unvalidated,
    judge_bandwidth,
    judge_clock_event_reasons,
    judge_clock_events,
    judge_dcgm,
    judge_ecc_counts,
    judge_fabric,
    judge_gpu_against_sku,
    judge_gpu_count,
    judge_nvidia_smi,
    judge_nvlink,
    judge_pcie_gen_max,
    judge_pcie_width,
    judge_xid,
)
from gpuctl.verdicts.nccl import (
    NCCL_IB_SOURCE,
    NCCL_THRESHOLDS,
    NCCL_WRONG_SOURCE,
    judge_ib_completions,
    judge_nccl,
    judge_nccl_log,
)
from gpuctl.verdicts.pcie import (
    ACS_SOURCE,
    AER_SOURCE,
    TOPO_SOURCE,
    judge_acs,
    judge_aer,
    judge_lspci,
    judge_nvlink_pair,
    judge_topo,
)
from gpuctl.verdicts.storage import (
    judge_fio,
    judge_gdsio,
)
from gpuctl.verdicts.training import (
    LAUNCH_SOURCE,
    SCALING_CPU_REASON,
    TRAIN_LOSS_RATIO,
    TRAIN_LOSS_SOURCE,
    Launch,
    judge_launchers,
    judge_scaling_efficiency,
    judge_training,
    judge_training_multi_node,
)

__all__ = [
    "ACS_SOURCE",
    "AER_SOURCE",
    "CLOCK_EVENTS_SOURCE",
    "DCGM_VALIDATION_SOURCE",
    "FABRIC_SOURCE",
    "IB_BW_CHECK",
    "LAUNCH_SOURCE",
    "NCCL_IB_SOURCE",
    "NCCL_THRESHOLDS",
    "NCCL_WRONG_SOURCE",
    "NODE",
    "PARTIAL_SOURCE",
    "SCALING_CPU_REASON",
    "TOOL_NVLINK_ERRORS",
    "TOPO_SOURCE",
    "TRAIN_LOSS_RATIO",
    "TRAIN_LOSS_SOURCE",
    "CounterDelta",
    "CounterSample",
    "Launch",
    "Status",
    "Subject",
    "Value",
    "Verdict",
    "could_not_run",
    "counter_deltas",
    "dcgm_unvalidated",
    "judge",
    "judge_acs",
    "judge_aer",
    "judge_bandwidth",
    "judge_clock_event_reasons",
    "judge_clock_events",
    "judge_counter_deltas",
    "judge_counter_samples",
    "judge_dcgm",
    "judge_ecc_counts",
    "judge_fabric",
    "judge_fact",
    "judge_fio",
    "judge_gdsio",
    "judge_gpu_against_sku",
    "judge_gpu_count",
    "judge_ib_completions",
    "judge_ib_counters",
    "judge_ib_write_bw",
    "judge_ib_write_lat",
    "judge_ibstat",
    "judge_launchers",
    "judge_lspci",
    "judge_nccl",
    "judge_nccl_log",
    "judge_nvidia_smi",
    "judge_nvlink",
    "judge_nvlink_errors",
    "judge_nvlink_pair",
    "judge_pcie_gen_max",
    "judge_pcie_width",
    "judge_port_rate",
    "judge_port_state",
    "judge_scaling_efficiency",
    "judge_topo",
    "judge_training",
    "judge_training_multi_node",
    "judge_xid",
    "overall",
    "partial_paste",
]
