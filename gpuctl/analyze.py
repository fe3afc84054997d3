"""Judge a tool output that came from anywhere: parse it, list its figures, judge it.

`analyze_text(kind, text, sku)` is what `gpuctl analyze KIND FILE` calls; bench and
report code can call it too. `detect_kind(text)` tells the kind of an output given
without one (`gpuctl analyze FILE`) from the marks each tool prints, and refuses when
none or several kinds' marks are in it. Each kind pairs one parser with one judging helper from
`gpuctl.verdicts` and a function that lists the headline figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from gpuctl import verdicts as v
from gpuctl.catalog import Sku
from gpuctl.errors import ParseError
from gpuctl.parsers._common import drop_noise, noise_lines, strip_ansi
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
from gpuctl.parsers.nvidia_smi.model import NvidiaSmiFailure, NvidiaSmiResult
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q
from gpuctl.parsers.nvidia_smi.q_xml import parse_nvidia_smi_xml
from gpuctl.parsers.nvidia_smi.query_gpu import parse_query_gpu_csv
from gpuctl.parsers.nvlink import NvlinkResult, parse_nvlink_status
from gpuctl.parsers.nvlink_errors import NvlinkErrorsResult, parse_nvlink_errors
from gpuctl.parsers.perftest import BwResult, LatResult, parse_ib_write_bw, parse_ib_write_lat
from gpuctl.parsers.topo import TopoResult, parse_topo_matrix
from gpuctl.parsers.training import TrainingResult, parse_training_log
from gpuctl.parsers.xid import KERNEL_LINE, XidResult, parse_xid_log
from gpuctl.provenance import emulated_source

# The largest input `gpuctl analyze` reads. A whole-boot `dmesg` or a full nccl-tests sweep
# with NCCL_DEBUG=INFO on 64 ranks is a few MiB; 64 MiB leaves room for that tenfold while
# refusing a wrong file (a core dump, a disk image) before it is read into memory.
MAX_INPUT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Figure:
    name: str
    value: Any
    unit: str = ""


@dataclass(frozen=True)
class Analysis:
    kind: str
    figures: tuple[Figure, ...]
    verdicts: tuple[v.Verdict, ...]
    emulated: str | None = None  # why the figures are not real hardware's (gpuctl.provenance)
    detected: str | None = None  # how the kind was told when it was not given (`detect_kind`)

    @property
    def status(self) -> v.Status:
        return v.overall(self.verdicts)

    @property
    def failed(self) -> bool:
        """True when any verdict failed or could not be judged (exit code 1)."""
        return self.status in (v.Status.FAIL, v.Status.ERROR)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **({"detected": self.detected} if self.detected else {}),
            "status": self.status.value,
            "figures": {f.name: {"value": f.value, "unit": f.unit} for f in self.figures},
            "verdicts": [x.as_dict() for x in self.verdicts],
            "emulated": self.emulated,
        }


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


@dataclass(frozen=True)
class Kind:
    parse: Callable[[str], Any]
    judge: Callable[..., list[v.Verdict]]
    figures: Callable[[Any], list[Figure]]
    help: str
    counters: bool = False  # judged as the change between samples: a --baseline output may precede it


KINDS: dict[str, Kind] = {
    "nccl": Kind(parse_nccl_tests, v.judge_nccl, _nccl_figures, "nccl-tests output (all_reduce_perf, ...)"),
    "nccl-log": Kind(parse_nccl_log, v.judge_nccl_log, _nccl_log_figures,
                     "NCCL debug log (NCCL_DEBUG=INFO/WARN of any program): NET/IB completion errors"),
    "lspci": Kind(parse_lspci, v.judge_lspci, _lspci_figures, "lspci -vvv (ACS redirect, AER status)"),
    "topo": Kind(parse_topo_matrix, v.judge_topo, _topo_figures, "nvidia-smi topo -m"),
    "nvidia-smi-q": Kind(parse_nvidia_smi_q, v.judge_nvidia_smi, _smi_figures, "nvidia-smi -q"),
    "nvidia-smi-xml": Kind(parse_nvidia_smi_xml, v.judge_nvidia_smi, _smi_figures, "nvidia-smi -q -x"),
    "nvidia-smi-csv": Kind(parse_query_gpu_csv, v.judge_nvidia_smi, _smi_figures,
                           "nvidia-smi --query-gpu=<QUERY_GPU_FIELDS> --format=csv,noheader,nounits"),
    "nvlink-errors": Kind(parse_nvlink_errors, v.judge_nvlink_errors, _nvlink_errors_figures,
                          "nvidia-smi nvlink -e (error counters; two outputs concatenated or --baseline: the change)",
                          counters=True),
    "nvlink": Kind(parse_nvlink_status, v.judge_nvlink, _nvlink_figures, "nvidia-smi nvlink --status"),
    "ibstat": Kind(parse_ibstat, v.judge_ibstat, _ibstat_figures, "ibstat"),
    "ibv_devinfo": Kind(parse_ibv_devinfo, v.judge_ibstat, _ibv_devinfo_figures,
                        "ibv_devinfo [-v] (port state, width x speed, link layer, firmware; judged as ibstat)"),
    "ib-counters": Kind(parse_ib_counters, v.judge_ib_counters, _ib_counters_figures,
                        "perfquery [-x] or grep . /sys/class/infiniband/*/ports/*/counters/* (error counters; two "
                        "outputs concatenated or --baseline: the change)", counters=True),
    "ib_write_bw": Kind(parse_ib_write_bw, v.judge_ib_write_bw, _bw_figures, "perftest ib_write_bw"),
    "ib_write_lat": Kind(parse_ib_write_lat, v.judge_ib_write_lat, _lat_figures, "perftest ib_write_lat"),
    "fio": Kind(parse_fio, v.judge_fio, _fio_figures, "fio (JSON or text)"),
    "dcgm": Kind(parse_dcgmi_diag, v.judge_dcgm, _dcgm_figures, "dcgmi diag -r N (table or -j JSON)"),
    "bandwidth": Kind(parse_bandwidth, v.judge_bandwidth, _bandwidth_figures, "nvbandwidth or gpuctl-bwprobe JSON"),
    "gdsio": Kind(parse_gdsio, v.judge_gdsio, _gdsio_figures, "gdsio summary lines"),
    "xid": Kind(partial(parse_xid_log, strict=True), v.judge_xid, _xid_figures, "kernel log (dmesg, journalctl -k)"),
    "training": Kind(parse_training_log, v.judge_training, _training_figures, "gpuctl training run JSON lines"),
}


# What marks each kind's output, checked on the text without paste noise. Each pattern
# sits beside the line it matches; a kind whose marks are found is a candidate.
_SIGNS: dict[str, tuple[re.Pattern[str], ...]] = {
    # "#       size         count      type   redop    root     time   algbw   busbw #wrong ..."
    # (also behind a launcher prefix: "[1,0]<stdout>:#  size ...", "(head, rank=0, pid=3808) # nThread 1 ...")
    "nccl": (re.compile(r"#\s+size\s+count\s+type\b"),
             re.compile(r"#\s*(?:nccl-tests version|Collective test starting:|Out of bounds values"
                        r"|nThread \d+ nGpus)")),
    # "NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, ..." (any NCCL log)
    "nccl-log": (re.compile(r"NET/IB\w*(?:/GIN)?\s*:\s*Got completion\b"),),
    # "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ ..." / "\t\tCESta:\tRxErr- BadTLP+ ..." /
    # "0000:02:08.0 PCI bridge: PLX ..." + "\tControl: I/O- Mem- BusMaster+ ..."
    "lspci": (re.compile(r"^\s+(?:ACSCtl|UESta|CESta):\s*\w+[+-]", re.M),
              re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] .+\n\s+(?:Subsystem|Control):",
                         re.M)),
    # "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity" / "GPU0\t X \tNV18"
    "topo": (re.compile(r"^GPU0\s+X\s", re.M),),
    # "==============NVSMI LOG==============" / "Attached GPUs : 8" + "GPU 00000000:18:00.0"
    "nvidia-smi-q": (re.compile(r"NVSMI LOG"),
                     re.compile(r"^Attached GPUs\s*:.*\n(?:.*\n)*?GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", re.M),
                     # a grepped section: "    Fabric" + "        State  : Completed",
                     # "    Clocks Throttle Reasons" + "        Idle  : Active"
                     re.compile(r"^[ \t]*(?:Fabric|Clocks (?:Event|Throttle) Reasons)[ \t]*\n[ \t]+(?:State|Idle)\s+:",
                                re.M)),
    # "<nvidia_smi_log>"
    "nvidia-smi-xml": (re.compile(r"<nvidia_smi_log>"),),
    # "index, name, pci.bus_id, memory.total [MiB]" / "0, NVIDIA H200, 00000000:00:06.0, 580.159.04, ..."
    "nvidia-smi-csv": (re.compile(r"^(?:index|name|pci\.bus_id|uuid|driver_version|memory\.total)"
                                  r"(?:\s*\[[^\]]*\])?(?:\s*,\s*[a-z_.]+(?:\s*\[[^\]]*\])?)+\s*$", re.M),
                       re.compile(r"^\d+,\s*[^,\n]+,\s*[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*,", re.M)),
    # "\t Link 0: Replay Errors: 0" / "   Link 1: Replay Errors: 142, Recovery Errors: 3, CRC Errors: 891"
    "nvlink-errors": (re.compile(r"^\s+Link \d+: (?:[A-Za-z][A-Za-z ]*?Errors|Link recovery \w+ events): \d+", re.M),),
    # "\t Link 0: 25 GB/s" / "NVML: Unable to retrieve NVLink information as all links are inActive"
    "nvlink": (re.compile(r"^\s+Link \d+: (?:[\d.]+ GB/s|<inactive>)\s*$", re.M),
               re.compile(r"all links are inactive", re.I)),
    # "CA 'mlx5_0'" then "\tCA type: MT4129"
    "ibstat": (re.compile(r"^CA '[^']+'\s*\n\s+CA type:", re.M),),
    # "hca_id:\tmlx5_0" + "\ttransport:\t\t\tInfiniBand (0)" / "\t\t\tstate:\t\t\tPORT_ACTIVE (4)"
    "ibv_devinfo": (re.compile(r"^hca_id:\s*\S+\s*$", re.M), re.compile(r"^\s+state:\s+PORT_[A-Z_]+ \(\d\)", re.M)),
    # "# Port counters: Lid 10 port 1 (CapMask: 0x5300)" /
    # "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0"
    "ib-counters": (re.compile(r"^#\s*Port (?:extended )?counters:\s*Lid \d+", re.M | re.I),
                    re.compile(r"^/sys/class/infiniband/[^/\s]+/ports/\d+/(?:hw_)?counters/\w+:\s*\d+", re.M)),
    # " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
    # "                    RDMA_Write BW Test" (the banner, printed before a connection fails too)
    "ib_write_bw": (re.compile(r"#bytes\s+#iterations\s+BW peak"), re.compile(r"^\s*\S+(?: \S+)* BW Test\s*$", re.M)),
    # " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec] ..." / "RDMA_Write Latency Test"
    "ib_write_lat": (re.compile(r"#bytes\s+#iterations\s+t_min"), re.compile(r"^\s*\S+ Latency Test\s*$", re.M)),
    # "randread: (g=0): rw=randread, bs=(R) 4096B-4096B" / "job1: (groupid=0, jobs=1): err= 0" / '"fio version"'
    "fio": (re.compile(r"\(g=\d+\): rw=\w+"), re.compile(r": \(groupid=\d+, jobs=\d+\)"),
            re.compile(r'"fio version"\s*:')),
    # "| Diagnostic                | Result   |" / "| PCIe      | Pass - All |" / '"DCGM GPU Diagnostic"'
    "dcgm": (re.compile(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|", re.M),
             re.compile(r"^\|[^|]*\|\s*(?:Pass|Fail|Skip|Warn)(?:\s*-\s*(?:All|GPUs?:?[\d, ]+))?\s*\|", re.M),
             re.compile(r'"DCGM GPU Diagnostic"')),
    # "nvbandwidth Version: v0.10" / '"tool": "gpuctl-bwprobe"'
    "bandwidth": (re.compile(r"^nvbandwidth Version", re.M), re.compile(r'"tool"\s*:\s*"gpuctl-bwprobe"')),
    # "IoType: READ XferType: GPUD Threads: 8 DataSetSize: ..."
    "gdsio": (re.compile(r"IoType:\s*\S+\s+XferType:"),),
    # "NVRM: Xid (PCI:0000:18:00): 79, ..." / "nvidia-nvswitch0: SXid ..." / "NVRM: GPU 0000:5d:00.0: ..."
    "xid": (re.compile(r"NVRM: Xid \("), re.compile(r"\bSXid \("), re.compile(r"NVRM: (?:GPU |The NVIDIA GPU )")),
    # '{"step": 0, "loss": 9.18}' / '{"final": true, ...}' / '{"skipped": "no PyTorch"}'
    "training": (re.compile(r'^\{"(?:step|final|skipped)"\s*:', re.M),),
}


def detect_kind(text: str) -> tuple[str, str]:
    """(kind, what it was told by) for a tool output whose kind was not given; ParseError
    when no kind's marks are in it, or more than one kind's (the file holds several tools'
    outputs, or one gpuctl cannot tell apart): the message lists them."""
    clean = drop_noise(strip_ansi(text).replace("\r\n", "\n"))
    found: dict[str, str] = {}
    for kind, signs in _SIGNS.items():
        for sign in signs:
            if m := sign.search(clean):
                found[kind] = m.group(0).strip().splitlines()[0][:80]
                break
    kernel = next((ln for ln in clean.splitlines() if KERNEL_LINE.match(ln.lstrip())), None)
    if not found and kernel is not None:
        # a kernel log without any GPU event (the healthy case): the weakest mark, used alone
        found["xid"] = kernel.strip()[:80]
    if not found:
        raise ParseError("cannot tell which tool printed this: none of the kinds' marks is in it; give the kind: "
                         f"gpuctl analyze KIND FILE (KIND: {', '.join(KINDS)})")
    if "nccl" in found and "nccl-log" in found:
        # an nccl-tests run with NET/IB errors in its log: the nccl kind judges both
        del found["nccl-log"]
    if len(found) > 1:
        listed = "; ".join(f"{k} ({e!r})" for k, e in found.items())
        raise ParseError(f"ambiguous: marks of {len(found)} kinds in it: {listed}; give the kind: "
                         "gpuctl analyze KIND FILE, or split the file")
    ((kind, evidence),) = found.items()
    return kind, f"detected as {kind} from the line {evidence!r}"


def analyze_text(kind: str, text: str, sku: Sku | None = None, *, source: str = "<input>",
                 subject: v.Subject = v.NODE, baseline: str | None = None) -> Analysis:
    """Parse `text` as `kind` and judge it (against `sku` when given). `baseline`: an earlier
    output of a counter kind (`Kind.counters`), the first sample the change is judged from.

    A ParseError is re-raised naming `source`; nvidia-smi's driver failures keep their
    type (`DriverLibraryMismatch`, ...) so callers can still tell them apart."""
    if kind not in KINDS:
        raise ParseError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    k = KINDS[kind]
    if baseline is not None:
        if not k.counters:
            counter_kinds = ", ".join(n for n, x in KINDS.items() if x.counters)
            raise ParseError(f"--baseline is for the counter kinds ({counter_kinds}), not {kind}")
        text = baseline.rstrip("\n") + "\n" + text
    if len(text) > MAX_INPUT_BYTES:
        raise ParseError(f"{source}: input too large ({len(text)} characters, the bound is "
                         f"{MAX_INPUT_BYTES // (1024 * 1024)} MiB)")
    extra: list[v.Verdict] = []
    try:
        result = k.parse(text)
    except NvidiaSmiFailure as exc:
        raise type(exc)(f"{source}: {exc}") from None
    except ParseError as exc:
        if kind == "nccl" and find_ib_completions(strip_ansi(text)):
            # a run that died on a network fault: its NET/IB errors are the finding
            a = analyze_text("nccl-log", text, sku, source=source, subject=subject)
            note = Figure("nccl_tests_not_read", f"{exc}; judged as nccl-log")
            return Analysis(kind, (note, *a.figures), a.verdicts, a.emulated, a.detected)
        raise ParseError(f"{source}: {exc}") from None
    if kind == "nccl":
        extra = v.judge_ib_completions(find_ib_completions(strip_ansi(text)), subject)
    figures = k.figures(result)
    if skipped := noise_lines(text):
        # what was skipped as paste noise, so a reader can check nothing of the output was
        figures.append(Figure("paste_noise_skipped",
                              [f"line {n}: {what} {line[:60]!r}" for n, what, line in skipped]))
    return Analysis(kind, tuple(figures), (*k.judge(result, sku, subject), *extra),
                    emulated_source(kind, text))
