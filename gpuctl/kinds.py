"""The one registry of tool kinds: every tool output gpuctl reads, what reads and judges it.

A `ToolKind` pairs the tool's parser (`gpuctl.parsers`) with its one judging rule
(`gpuctl.verdicts`), the function that lists its headline figures, a description, the marks
its output carries (how `gpuctl analyze FILE` tells the kind), whether it is a counter kind
(judged by the change between samples), and how the bench runs it (its test and raw-file
name, the check a could-not-run verdict carries). `gpuctl analyze`, the bench's judging and
the bench's running all read `KINDS`; `judge_text` is the one path from a raw output to
verdicts, so analyze and bench give the same verdicts on the same output
(tests/unit/test_tool_kinds.py holds both, and fails on a second registry anywhere else).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from gpuctl import verdicts as v
from gpuctl.catalog import Sku
from gpuctl.errors import ParseError
from gpuctl.parsers._common import strip_ansi
from gpuctl.parsers.bandwidth import BandwidthResult, parse_bandwidth
from gpuctl.parsers.dcgm import DcgmResultSet, parse_dcgmi_diag
from gpuctl.parsers.fio import FioResult, parse_fio
from gpuctl.parsers.gdsio import GdsioResult, parse_gdsio
from gpuctl.parsers.ib_counters import IbCountersResult, parse_ib_counters
from gpuctl.parsers.ibstat import IbstatResult, parse_ibstat
from gpuctl.parsers.ibv_devinfo import parse_ibv_devinfo
from gpuctl.parsers.lspci import LspciResult, parse_lspci
from gpuctl.parsers.nccl import NcclResult, parse_nccl_tests
from gpuctl.parsers.nccl_log import NcclLogResult, find_ib_completions, parse_nccl_log
from gpuctl.parsers.nvidia_smi.model import NvidiaSmiResult
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q
from gpuctl.parsers.nvidia_smi.q_xml import parse_nvidia_smi_xml
from gpuctl.parsers.nvidia_smi.query_gpu import parse_query_gpu_csv
from gpuctl.parsers.nvlink import NvlinkResult, parse_nvlink_status
from gpuctl.parsers.nvlink_errors import NvlinkErrorsResult, parse_nvlink_errors
from gpuctl.parsers.perftest import BwResult, LatResult, parse_ib_write_bw, parse_ib_write_lat
from gpuctl.parsers.topo import TopoResult, parse_topo_matrix
from gpuctl.parsers.training import TrainingResult, parse_training_log
from gpuctl.parsers.xid import XidResult, parse_xid_log
from gpuctl.provenance import emulated_reason


@dataclass(frozen=True)
class Figure:
    name: str
    value: Any
    unit: str = ""


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _nccl_figures(r: NcclResult) -> list[Figure]:
    return [
        Figure("test", r.test), Figure("gpus", r.gpus), Figure("hosts", len(r.hosts)),
        Figure("notes", list(r.notes)),
        Figure("avg_busbw", r.avg_busbw_gb_s, "GB/s"), Figure("max_busbw", r.max_busbw_gb_s, "GB/s"),
        Figure("max_algbw", r.max_algbw_gb_s, "GB/s"), Figure("large_msg_busbw", _r(r.large_msg_busbw_gb_s), "GB/s"),
        Figure("wrong", r.wrong if r.validated else None), Figure("nccl_version", r.nccl_version),
        Figure("rows", [{"size_bytes": x.size_bytes, "algbw_gb_s": x.oop_algbw_gb_s, "busbw_gb_s": x.oop_busbw_gb_s,
                         "ip_busbw_gb_s": x.ip_busbw_gb_s, "wrong": x.oop_wrong} for x in r.rows]),
    ]


def _nccl_log_figures(r: NcclLogResult) -> list[Figure]:
    return [Figure("nccl_lines", r.nccl_lines), Figure("hosts", list(r.hosts)),
            Figure("ib_completion_errors", len(r.completions)),
            Figure("ib_completions", [f"line {c.line}: {c.host or '?'} <- {c.peer or '?'} status {c.status} "
                                      f"{c.status_name} vendor err {c.vendor_err}" for c in r.completions])]


def _lspci_figures(r: LspciResult) -> list[Figure]:
    return [Figure("devices", len(r.devices)),
            Figure("acs_devices", sum(d.acs_ctl is not None for d in r.devices)),
            Figure("acs_redirect", [f"{d.label}: {' '.join(f + '+' for f in d.acs_redirect)}"
                                    for d in r.devices if d.acs_redirect]),
            Figure("aer_set", [f"{d.label}: " + " ".join(k + "+" for k, on in {**(d.ue_status or {}),
                                                                               **(d.ce_status or {})}.items() if on)
                               for d in r.devices if any((d.ue_status or {}).values())
                               or any((d.ce_status or {}).values())])]


def _topo_figures(r: TopoResult) -> list[Figure]:
    nearest = {g: r.nearest_nic(g) for g in r.gpus}
    return [
        Figure("gpus", len(r.gpus)), Figure("nics", list(r.nics)),
        Figure("nvlink_full_mesh", r.nvlink_full_mesh()),
        Figure("links", {f"{p.a}-{p.b}": p.code for p in r.gpu_pairs()}),
        Figure("nearest_nic", {g: f"{n[1]} {r.nic_label(n[0])}" for g, n in nearest.items() if n}),
    ]


def _smi_figures(r: NvidiaSmiResult) -> list[Figure]:
    out = [Figure("gpus", len(r.gpus)), Figure("driver_version", r.driver_version)]
    if r.notes:
        out.append(Figure("notes", list(r.notes)))
    for g in r.gpus:
        p = f"gpu{g.index}."
        out += [
            Figure(p + "name", g.name), Figure(p + "bus_id", g.bus_id), Figure(p + "driver_version", g.driver_version),
            Figure(p + "pcie_gen_current", g.pcie_gen_current), Figure(p + "pcie_gen_max", g.pcie_gen_max),
            Figure(p + "pcie_width_current", g.pcie_width_current, "lanes"),
            Figure(p + "pcie_width_max", g.pcie_width_max, "lanes"),
            Figure(p + "memory_total", g.memory_total_mib, "MiB"), Figure(p + "persistence_mode", g.persistence_mode),
            Figure(p + "ecc_mode", g.ecc_mode),
            Figure(p + "ecc_volatile_uncorrectable", g.ecc_volatile_uncorrectable),
            Figure(p + "retired_pages_pending", g.retired_pending),
            Figure(p + "remapped_rows_pending", g.remap_pending),
            Figure(p + "remapped_rows_failure", g.remap_failure),
        ]
        if g.clock_events is not None:
            out.append(Figure(p + "clock_events_active", [n for n, on in g.clock_events if on]))
        if g.fabric_state or g.fabric_status or g.fabric_clique_id or g.fabric_cluster_uuid:
            out += [Figure(p + "fabric_state", g.fabric_state), Figure(p + "fabric_status", g.fabric_status),
                    Figure(p + "fabric_clique_id", g.fabric_clique_id),
                    Figure(p + "fabric_cluster_uuid", g.fabric_cluster_uuid)]
    return out


def _nvlink_figures(r: NvlinkResult) -> list[Figure]:
    out: list[Figure] = [Figure("gpus", len(r.gpus))]
    for g in r.gpus:
        out += [Figure(f"gpu{g.index}.active_links", g.active_links),
                Figure(f"gpu{g.index}.total", _r(g.total_gb_s), "GB/s")]
    return out


def _nvlink_errors_figures(r: NvlinkErrorsResult) -> list[Figure]:
    last = r.samples[-1]
    out = [Figure("samples", len(r.samples)), Figure("gpus", len(r.gpus)),
           Figure("links", len({(g, link) for g, link, _ in last})),
           Figure("nonzero", [f"GPU {g} link {link} {name} = {v}" for (g, link, name), v in last.items() if v])]
    if r.partial:
        out.append(Figure("partial", r.partial))
    return out


def _ib_counters_figures(r: IbCountersResult) -> list[Figure]:
    last = r.samples[-1]
    errors = {"SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
              "PortRcvRemotePhysicalErrors", "LocalLinkIntegrityErrors", "ExcessiveBufferOverrunErrors",
              "PortXmitDiscards", "VL15Dropped", "PortRcvSwitchRelayErrors"}
    return [Figure("samples", len(r.samples)), Figure("ports", list(r.ports)),
            *[Figure(f"{port}.{name}", v) for (port, name), v in last.items() if name in errors]]


def _ibstat_figures(r: IbstatResult) -> list[Figure]:
    out: list[Figure] = [Figure("cas", len(r.cas))]
    for ca in r.cas:
        for p in ca.ports:
            rate = "rate not printed" if p.rate_gbps is None else f"{p.rate_gbps:g} Gb/s"
            out.append(Figure(f"{p.name}", f"{p.state}/{p.physical_state} {rate} {p.link_layer}"))
    return out


def _ibv_devinfo_figures(r: IbstatResult) -> list[Figure]:
    out = _ibstat_figures(r)
    for ca in r.cas:
        out += [Figure(f"{ca.name}.fw_ver", ca.firmware), Figure(f"{ca.name}.board_id", ca.board_id),
                Figure(f"{ca.name}.ca_type", ca.ca_type)]
    return out


def _bw_figures(r: BwResult) -> list[Figure]:
    # bw_average is as printed (a bidirectional run's is the sum of both directions);
    # bw_peak is None where perftest did not measure it (duration mode)
    return [Figure("bw_average", _r(r.bw_avg_gbit_s), "Gb/s"), Figure("bw_peak", _r(r.bw_peak_gbit_s), "Gb/s"),
            Figure("bidirectional", r.bidirectional),
            Figure("bw_average_per_direction", _r(r.bw_avg_per_direction_gbit_s), "Gb/s"),
            Figure("msg_size", r.msg_size_bytes, "bytes"), Figure("reported_unit", r.reported_unit),
            Figure("sizes", len(r.rows)), Figure("test", r.test), Figure("rail", r.rail),
            *[f for o in r.rails for f in (Figure(f"{o.rail}.bw_average", _r(o.bw_avg_gbit_s), "Gb/s"),
                                           Figure(f"{o.rail}.msg_size", o.msg_size_bytes, "bytes"))],
            *([Figure("rails_interleaved", list(r.mixed_with))] if r.mixed_with else []),
            *[f for o in r.others for f in (Figure(f"{o.label}.bw_average", _r(o.bw_avg_gbit_s), "Gb/s"),
                                             Figure(f"{o.label}.bw_peak", _r(o.bw_peak_gbit_s), "Gb/s"))]]


def _lat_figures(r: LatResult) -> list[Figure]:
    h = r.headline
    return [Figure("msg_size", h.size_bytes, "bytes"), Figure("t_min", h.t_min_us, "us"),
            Figure("t_typical", h.t_typical_us, "us"), Figure("t_avg", h.t_avg_us, "us"),
            Figure("t_99", h.t_p99_us, "us"), Figure("t_99.9", h.t_p999_us, "us")]


def _fio_figures(r: FioResult) -> list[Figure]:
    return [
        Figure("rw", ",".join(r.rw_modes)), Figure("read_iops", _r(r.read_iops, 1), "IOPS"),
        Figure("write_iops", _r(r.write_iops, 1), "IOPS"),
        Figure("read_bw", _r(r.read_bw_gb_s, 4), "GB/s"), Figure("write_bw", _r(r.write_bw_gb_s, 4), "GB/s"),
        Figure("read_bw_mib", _r(r.read_bw_mib_s, 2), "MiB/s"),
        Figure("write_bw_mib", _r(r.write_bw_mib_s, 2), "MiB/s"),
    ]


def _dcgm_figures(r: DcgmResultSet) -> list[Figure]:
    return [Figure("dcgm_version", r.dcgm_version), Figure("gpus", len(r.device_ids) or None),
            Figure("tests", len(r.tests)), Figure("failed", [t.name for t in r.failed])]


def _bandwidth_figures(r: BandwidthResult) -> list[Figure]:
    out: list[Figure] = [Figure("source", r.source), Figure("gpus", len(r.gpus))]
    for g in r.gpus:
        p = f"gpu{g.index}."
        out += [Figure(p + "h2d", g.h2d_gb_s, "GB/s"), Figure(p + "d2h", g.d2h_gb_s, "GB/s"),
                Figure(p + "hbm_copy", g.hbm_copy_gb_s, "GB/s")]
        out += [Figure(f"{p}p2p_to_{peer}", val, "GB/s") for peer, val in sorted(g.p2p_gb_s.items())]
    return out


def _gdsio_figures(r: GdsioResult) -> list[Figure]:
    out = []
    for i, run in enumerate(r.runs):
        p = f"run{i}.{run.io_type.lower()}_{run.xfer_type.lower()}."
        out += [Figure(p + "throughput", run.throughput_gib_s, "GiB/s"),
                Figure(p + "throughput_gb", _r(run.throughput_gb_s), "GB/s"),
                Figure(p + "avg_latency", run.avg_latency_us, "us")]
    return out


def _xid_figures(r: XidResult) -> list[Figure]:
    return [Figure("xid_events", len(r.events)), Figure("xid_codes", list(r.codes)),
            Figure("sxid_events", len(r.sxid_events)),
            Figure("gpus_lost", sorted({e.bus_id or "unnamed" for e in r.lost}))]


def _training_figures(r: TrainingResult) -> list[Figure]:
    if r.final is None:
        return [Figure("skipped", r.skipped)]
    return [Figure("steps", len(r.steps)), Figure("loss_start", _r(r.loss_start(), 4)),
            Figure("loss_end", _r(r.loss_end(), 4)), Figure("tokens_per_s", r.final.tokens_per_s, "tokens/s"),
            Figure("world_size", r.final.world_size), Figure("model_tflops", _r(r.final.achieved_tflops, 1), "TFLOP/s"),
            Figure("ranks_agree", r.final.ranks_agree)]


def _ib_completion_verdicts(text: str, subject: v.Subject) -> list[v.Verdict]:
    """NCCL's NET/IB work completion errors anywhere in the output (an nccl-tests run logs them
    with NCCL_DEBUG=INFO/WARN): each a fault between two named hosts."""
    return v.judge_ib_completions(find_ib_completions(strip_ansi(text)), subject)


TextJudge = Callable[[str, v.Subject], list[v.Verdict]]


@dataclass(frozen=True)
class ToolKind:
    """One tool output kind (see the module docstring)."""

    name: str
    parse: Callable[[str], Any]
    judge: Callable[..., list[v.Verdict]]  # judge(parsed, sku | None, subject): the one rule in gpuctl.verdicts
    figures: Callable[[Any], list[Figure]]
    help: str
    # what marks this tool's output, checked on the text without paste noise; each pattern beside
    # an example of the line it matches (any one found makes the kind a candidate: `gpuctl.analyze.detect_kind`)
    signs: tuple[re.Pattern[str], ...]
    counters: bool = False  # judged as the change between samples: a --baseline output may precede it
    bench: bool = False  # `gpuctl bench` runs this tool
    # the bench's test (and raw-file) name for a run of this kind; None where each run is named
    # by what it ran (the nccl-tests collective, the fio job) or the kind is not benchmarked
    bench_test: str | None = None
    check: str = ""  # the check a could-not-run verdict of this kind carries (default: the kind's name)
    rdma_device: bool = False  # the output names the RDMA device it ran on (a software one: emulated figures)
    # verdicts read from the whole text beside the parsed result (NCCL's NET/IB errors in an nccl-tests log)
    text_verdicts: TextJudge | None = None
    # the kind whose marks this kind's output may carry too: both detected means this kind; an output
    # this kind's parser cannot read but in which `text_verdicts` finds something is judged as that kind
    also_reads: str | None = None

    def __post_init__(self) -> None:
        if not self.check:
            object.__setattr__(self, "check", self.name)


_ALL: tuple[ToolKind, ...] = (
    ToolKind("nccl", parse_nccl_tests, v.judge_nccl, _nccl_figures, "nccl-tests output (all_reduce_perf, ...)", (
        # "#       size         count      type   redop    root     time   algbw   busbw #wrong ..."
        # (also behind a launcher prefix: "[1,0]<stdout>:#  size ...", "(head, rank=0, pid=3808) # nThread 1 ...")
        re.compile(r"#\s+size\s+count\s+type\b"),
        re.compile(r"#\s*(?:nccl-tests version|Collective test starting:|Out of bounds values|nThread \d+ nGpus)")),
        bench=True, text_verdicts=_ib_completion_verdicts, also_reads="nccl-log"),
    ToolKind("nccl-log", parse_nccl_log, v.judge_nccl_log, _nccl_log_figures,
             "NCCL debug log (NCCL_DEBUG=INFO/WARN of any program): NET/IB completion errors", (
                 # "NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, ..." (any NCCL log)
                 re.compile(r"NET/IB\w*(?:/GIN)?\s*:\s*Got completion\b"),)),
    ToolKind("lspci", parse_lspci, v.judge_lspci, _lspci_figures, "lspci -vvv (ACS redirect, AER status)", (
        # "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ ..." / "\t\tCESta:\tRxErr- BadTLP+ ..." /
        # "0000:02:08.0 PCI bridge: PLX ..." + "\tControl: I/O- Mem- BusMaster+ ..."
        re.compile(r"^\s+(?:ACSCtl|UESta|CESta):\s*\w+[+-]", re.M),
        re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] .+\n\s+(?:Subsystem|Control):", re.M))),
    ToolKind("topo", parse_topo_matrix, v.judge_topo, _topo_figures, "nvidia-smi topo -m", (
        # "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity" / "GPU0\t X \tNV18"
        re.compile(r"^GPU0\s+X\s", re.M),)),
    ToolKind("nvidia-smi-q", parse_nvidia_smi_q, v.judge_nvidia_smi, _smi_figures, "nvidia-smi -q", (
        # "==============NVSMI LOG==============" / "Attached GPUs : 8" + "GPU 00000000:18:00.0"
        re.compile(r"NVSMI LOG"),
        re.compile(r"^Attached GPUs\s*:.*\n(?:.*\n)*?GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", re.M),
        # a grepped section: "    Fabric" + "        State  : Completed",
        # "    Clocks Throttle Reasons" + "        Idle  : Active"
        re.compile(r"^[ \t]*(?:Fabric|Clocks (?:Event|Throttle) Reasons)[ \t]*\n[ \t]+(?:State|Idle)\s+:", re.M))),
    ToolKind("nvidia-smi-xml", parse_nvidia_smi_xml, v.judge_nvidia_smi, _smi_figures, "nvidia-smi -q -x", (
        # "<nvidia_smi_log>"
        re.compile(r"<nvidia_smi_log>"),)),
    ToolKind("nvidia-smi-csv", parse_query_gpu_csv, v.judge_nvidia_smi, _smi_figures,
             "nvidia-smi --query-gpu=<QUERY_GPU_FIELDS> --format=csv,noheader,nounits", (
                 # "index, name, pci.bus_id, memory.total [MiB]" / "0, NVIDIA H200, 00000000:00:06.0, 580.159.04, ..."
                 re.compile(r"^(?:index|name|pci\.bus_id|uuid|driver_version|memory\.total)"
                            r"(?:\s*\[[^\]]*\])?(?:\s*,\s*[a-z_.]+(?:\s*\[[^\]]*\])?)+\s*$", re.M),
                 re.compile(r"^\d+,\s*[^,\n]+,\s*[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*,", re.M))),
    ToolKind("nvlink-errors", parse_nvlink_errors, v.judge_nvlink_errors, _nvlink_errors_figures,
             "nvidia-smi nvlink -e (error counters; two outputs concatenated or --baseline: the change)", (
                 # "\t Link 0: Replay Errors: 0" / "   Link 1: Replay Errors: 142, Recovery Errors: 3, CRC Errors: 891"
                 re.compile(r"^\s+Link \d+: (?:[A-Za-z][A-Za-z ]*?Errors|Link recovery \w+ events): \d+", re.M),),
             counters=True),
    ToolKind("nvlink", parse_nvlink_status, v.judge_nvlink, _nvlink_figures, "nvidia-smi nvlink --status", (
        # "\t Link 0: 25 GB/s" / "NVML: Unable to retrieve NVLink information as all links are inActive"
        re.compile(r"^\s+Link \d+: (?:[\d.]+ GB/s|<inactive>)\s*$", re.M),
        re.compile(r"all links are inactive", re.I))),
    ToolKind("ibstat", parse_ibstat, v.judge_ibstat, _ibstat_figures, "ibstat", (
        # "CA 'mlx5_0'" then "\tCA type: MT4129"
        re.compile(r"^CA '[^']+'\s*\n\s+CA type:", re.M),)),
    ToolKind("ibv_devinfo", parse_ibv_devinfo, v.judge_ibstat, _ibv_devinfo_figures,
             "ibv_devinfo [-v] (port state, width x speed, link layer, firmware; judged as ibstat)", (
                 # "hca_id:\tmlx5_0" + "\ttransport:\t\t\tInfiniBand (0)" / "\t\t\tstate:\t\t\tPORT_ACTIVE (4)"
                 re.compile(r"^hca_id:\s*\S+\s*$", re.M), re.compile(r"^\s+state:\s+PORT_[A-Z_]+ \(\d\)", re.M))),
    ToolKind("ib-counters", parse_ib_counters, v.judge_ib_counters, _ib_counters_figures,
             "perfquery [-x] or grep . /sys/class/infiniband/*/ports/*/counters/* (error counters; two "
             "outputs concatenated or --baseline: the change)", (
                 # "# Port counters: Lid 10 port 1 (CapMask: 0x5300)" /
                 # "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0"
                 re.compile(r"^#\s*Port (?:extended )?counters:\s*Lid \d+", re.M | re.I),
                 re.compile(r"^/sys/class/infiniband/[^/\s]+/ports/\d+/(?:hw_)?counters/\w+:\s*\d+", re.M)),
             counters=True),
    ToolKind("ib_write_bw", parse_ib_write_bw, v.judge_ib_write_bw, _bw_figures, "perftest ib_write_bw", (
        # " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        # "                    RDMA_Write BW Test" (the banner, printed before a connection fails too)
        re.compile(r"#bytes\s+#iterations\s+BW peak"), re.compile(r"^\s*\S+(?: \S+)* BW Test\s*$", re.M)),
        bench=True, bench_test="ib_write_bw", check="ib_write_bw_gbit_s", rdma_device=True),
    ToolKind("ib_write_lat", parse_ib_write_lat, v.judge_ib_write_lat, _lat_figures, "perftest ib_write_lat", (
        # " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec] ..." / "RDMA_Write Latency Test"
        re.compile(r"#bytes\s+#iterations\s+t_min"), re.compile(r"^\s*\S+ Latency Test\s*$", re.M)),
        bench=True, bench_test="ib_write_lat", check="ib_write_lat_us", rdma_device=True),
    ToolKind("fio", parse_fio, v.judge_fio, _fio_figures, "fio (JSON or text)", (
        # "randread: (g=0): rw=randread, bs=(R) 4096B-4096B" / "job1: (groupid=0, jobs=1): err= 0" / '"fio version"'
        re.compile(r"\(g=\d+\): rw=\w+"), re.compile(r": \(groupid=\d+, jobs=\d+\)"),
        re.compile(r'"fio version"\s*:')),
        bench=True),
    ToolKind("dcgm", parse_dcgmi_diag, v.judge_dcgm, _dcgm_figures, "dcgmi diag -r N (table or -j JSON)", (
        # "| Diagnostic                | Result   |" / "| PCIe      | Pass - All |" / '"DCGM GPU Diagnostic"'
        re.compile(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|", re.M),
        re.compile(r"^\|[^|]*\|\s*(?:Pass|Fail|Skip|Warn)(?:\s*-\s*(?:All|GPUs?:?[\d, ]+))?\s*\|", re.M),
        re.compile(r'"DCGM GPU Diagnostic"')),
        bench=True, bench_test="dcgm_diag"),
    ToolKind("bandwidth", parse_bandwidth, v.judge_bandwidth, _bandwidth_figures,
             "nvbandwidth or gpuctl-bwprobe JSON", (
                 # "nvbandwidth Version: v0.10" / '"tool": "gpuctl-bwprobe"'
                 re.compile(r"^nvbandwidth Version", re.M), re.compile(r'"tool"\s*:\s*"gpuctl-bwprobe"')),
             bench=True, bench_test="bwprobe"),
    ToolKind("gdsio", parse_gdsio, v.judge_gdsio, _gdsio_figures, "gdsio summary lines", (
        # "IoType: READ XferType: GPUD Threads: 8 DataSetSize: ..."
        re.compile(r"IoType:\s*\S+\s+XferType:"),),
        bench=True, bench_test="gdsio"),
    ToolKind("xid", partial(parse_xid_log, strict=True), v.judge_xid, _xid_figures,
             "kernel log (dmesg, journalctl -k)", (
                 # "NVRM: Xid (PCI:0000:18:00): 79, ..." / "nvidia-nvswitch0: SXid ..." / "NVRM: GPU 0000:5d:00.0: ..."
                 # (a kernel log without any GPU event is told by its line prefix alone: `detect_kind`)
                 re.compile(r"NVRM: Xid \("), re.compile(r"\bSXid \("), re.compile(r"NVRM: (?:GPU |The NVIDIA GPU )"))),
    ToolKind("training", parse_training_log, v.judge_training, _training_figures,
             "gpuctl training run JSON lines", (
                 # '{"step": 0, "loss": 9.18}' / '{"final": true, ...}' / '{"skipped": "no PyTorch"}'
                 re.compile(r'^\{"(?:step|final|skipped)"\s*:', re.M),),
             bench=True, bench_test="training"),
)

#: kind name → its entry, in the order above (the order `detect_kind` tries them and help lists them)
KINDS: dict[str, ToolKind] = {k.name: k for k in _ALL}


def get(name: str) -> ToolKind:
    """The kind called `name`; ParseError naming the known kinds otherwise."""
    if name not in KINDS:
        raise ParseError(f"unknown kind {name!r}; known: {', '.join(KINDS)}")
    return KINDS[name]


def counter_kinds() -> tuple[str, ...]:
    """The kinds judged as the change between samples (`ToolKind.counters`)."""
    return tuple(k.name for k in _ALL if k.counters)


def emulated_source(kind: str, stdout: str, stderr: str = "") -> str | None:
    """Why the figures of this output of `kind` are emulated, or None (`gpuctl.provenance`)."""
    return emulated_reason(stdout, stderr, rdma_device=get(kind).rdma_device)


@dataclass(frozen=True)
class Judgement:
    """One raw output read and judged: the kind it was judged as (`ToolKind.also_reads` may
    have taken over), the parsed result, the verdicts, why its figures are emulated, and
    `note`: why it was judged as another kind than asked."""

    kind: str
    parsed: Any
    verdicts: tuple[v.Verdict, ...]
    emulated: str | None = None
    note: str | None = None


def judge_text(name: str, text: str, sku: Sku | None, subject: v.Subject = v.NODE,
               stderr: str = "") -> Judgement:
    """Parse `text` as kind `name` and judge it with the kind's one rule (against `sku` when
    given). A ParseError is raised to the caller (analyze names the file; the bench makes a
    could-not-run verdict of it), except where the kind `also_reads` another whose findings
    are in the text: then it is judged as that kind, and `note` says why."""
    k = get(name)
    try:
        parsed = k.parse(text)
    except ParseError as exc:
        if k.also_reads is not None and k.text_verdicts is not None and k.text_verdicts(text, subject):
            # a run that died on a fault its log names (nccl-tests on an NET/IB error): that is the finding
            return replace(judge_text(k.also_reads, text, sku, subject, stderr),
                           note=f"{exc}; judged as {k.also_reads}")
        raise
    extra = k.text_verdicts(text, subject) if k.text_verdicts is not None else []
    return Judgement(name, parsed, (*k.judge(parsed, sku, subject), *extra),
                     emulated_reason(text, stderr, rdma_device=k.rdma_device))
