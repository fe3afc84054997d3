"""nvidia-smi in its three useful forms: `-q` text, `-q -x` XML, and `--query-gpu` CSV.

All three give the same `NvidiaSmiResult` (one `GpuInfo` per GPU). Checks should run the
CSV form with the canonical field list `QUERY_GPU_FIELDS`::

    nvidia-smi --query-gpu=<",".join(QUERY_GPU_FIELDS)> --format=csv,noheader,nounits

`-q` and `-q -x` carry no GPU index: GPUs are numbered in the order printed, which is
nvidia-smi's own index order (PCI bus order).

When nvidia-smi cannot talk to the driver it prints one line instead of data. Those
outputs raise a typed `NvidiaSmiFailure` subclass of `ParseError`, so a check can tell
them apart (`except DriverLibraryMismatch:` → "driver/library mismatch, reboot") from a
merely unreadable file; each carries a short `kind` string.

Values nvidia-smi cannot report (``N/A``, ``[N/A]``, ``[Not Supported]``) become None.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.parsers._common import noise_lines, quote, require_text

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


_MISSING = {"", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", "[Unknown Error]"}


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in _MISSING else value


def _percent(value: str | None, where: str) -> int | None:
    """'0 %' (the -q and XML forms of a utilization)."""
    value = _clean(value)
    if value is None:
        return None
    m = re.match(r"^(\d+)\s*%?$", value)
    if not m:
        raise ParseError(f"{TOOL}: expected a percentage, got {value!r} for {where}")
    return int(m.group(1))


def _int(value: str | None, where: str) -> int | None:
    value = _clean(value)
    if value is None:
        return None
    # "81559 MiB", "16x", "5" ; the unit is what `nounits` would have removed
    m = re.match(r"^(-?\d+)\s*(?:x|MiB|MB|bank\(s\))?$", value)
    if not m:
        raise ParseError(f"{TOOL}: expected a number, got {value!r} for {where}")
    return int(m.group(1))


def _bool(value: str | None, where: str) -> bool | None:
    value = _clean(value)
    if value is None:
        return None
    low = value.lower()
    if low in ("enabled", "yes", "true", "active", "1"):
        return True
    if low in ("disabled", "no", "false", "not active", "0"):
        return False
    raise ParseError(f"{TOOL}: expected Enabled/Disabled or Yes/No, got {value!r} for {where}")


def _sum(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _check_failure(text: str) -> None:
    for pattern, exc in _FAILURES:
        if m := pattern.search(text):
            line = next((ln for ln in text.splitlines() if m.group(0) in ln), m.group(0))
            raise exc(f"{TOOL}: {quote(line)}")


# ---------------------------------------------------------------- nvidia-smi -q (text)

# "GPU 00000000:19:00.0"
_Q_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
# "    Product Name                          : NVIDIA H100 80GB HBM3"   /   "    ECC Errors"
_Q_LINE = re.compile(r"^(\s*)([^:]+?)\s*(?::\s?(.*))?$")
# "Driver Version                            : 535.161.08"
_Q_TOP = re.compile(r"^(Driver Version|CUDA Version|Attached GPUs)\s*:\s*(.*)$")

Tree = dict[str, Any]


def _q_tree(block: list[str]) -> Tree:
    """Indentation → nested dicts; the first occurrence of a repeated key wins."""
    root: Tree = {}
    stack: list[tuple[int, Tree]] = [(-1, root)]
    for line in block:
        if not line.strip():
            continue
        m = _Q_LINE.match(line)
        if not m:
            continue
        indent, key, value = len(m.group(1).expandtabs(4)), m.group(2).strip(), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if value is None:
            child: Tree = parent.setdefault(key, {}) if isinstance(parent.get(key, {}), dict) else {}
            stack.append((indent, child))
        else:
            parent.setdefault(key, value.strip())
    return root


def _get(tree: Tree, *path: str) -> str | None:
    node: Any = tree
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, str) else None


def _section(tree: Tree, *path: str) -> Tree:
    node: Any = tree
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


# reason names of the XML form (`clocks_event_reason_hw_slowdown`) as -q prints them
CLOCK_EVENT_NAMES: dict[str, str] = {
    "gpu_idle": "Idle", "applications_clocks_setting": "Applications Clocks Setting",
    "sw_power_cap": "SW Power Cap", "hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
    "hw_power_brake_slowdown": "HW Power Brake Slowdown", "sync_boost": "Sync Boost",
    "sw_thermal_slowdown": "SW Thermal Slowdown", "display_clocks_setting": "Display Clock Setting",
}


def _active(value: str | None, where: str) -> bool | None:
    value = _clean(value)
    if value is None:
        return None
    if value in ("Active", "Not Active"):
        return value == "Active"
    raise ParseError(f"{TOOL}: expected Active or Not Active, got {value!r} for {where}")


def _q_clock_events(tree: Tree, where: str) -> tuple[tuple[str, bool], ...] | None:
    sec = tree.get("Clocks Event Reasons", tree.get("Clocks Throttle Reasons"))
    if not isinstance(sec, dict):
        return None
    out = []
    for name, value in sec.items():
        if isinstance(value, str) and (active := _active(value, f"{where} {name}")) is not None:
            out.append((name, active))
    return tuple(out)


def _q_gpu(index: int, bus: str, tree: Tree, driver: str | None) -> GpuInfo:
    where = f"GPU {bus}" if bus else f"GPU section {index}"
    ecc = _section(tree, "ECC Errors")
    vol, agg = _section(ecc, "Volatile"), _section(ecc, "Aggregate")

    def uncorrectable(sec: Tree) -> int | None:
        if "Double Bit" in sec:  # pre-Ampere layout: Single Bit / Double Bit → Total
            return _int(_get(sec, "Double Bit", "Total"), where)
        return _sum([_int(v, where) for k, v in sec.items() if "Uncorrectable" in k and isinstance(v, str)])

    def correctable(sec: Tree, prefix: str = "") -> int | None:
        if "Single Bit" in sec:
            return _int(_get(sec, "Single Bit", "Total"), where) if prefix in ("", "DRAM") else None
        return _sum([
            _int(v, where) for k, v in sec.items()
            if k.endswith("Correctable") and "Uncorrectable" not in k and k.startswith(prefix)
            and isinstance(v, str)
        ])

    remap = tree.get("Remapped Rows")
    remap = remap if isinstance(remap, dict) else {}
    link = _section(tree, "PCI", "GPU Link Info")
    fabric = _section(tree, "Fabric")
    return GpuInfo(
        index=index,
        name=_clean(_get(tree, "Product Name")),
        bus_id=_clean(_get(tree, "PCI", "Bus Id")) or bus or None,
        uuid=_clean(_get(tree, "GPU UUID")),
        serial=_clean(_get(tree, "Serial Number")),
        driver_version=driver,
        pcie_gen_current=_int(_get(link, "PCIe Generation", "Current"), where),
        pcie_gen_max=_int(_get(link, "PCIe Generation", "Max"), where),
        pcie_width_current=_int(_get(link, "Link Width", "Current"), where),
        pcie_width_max=_int(_get(link, "Link Width", "Max"), where),
        memory_total_mib=_int(_get(tree, "FB Memory Usage", "Total"), where),
        persistence_mode=_bool(_get(tree, "Persistence Mode"), where),
        ecc_mode=_bool(_get(tree, "ECC Mode", "Current") or _get(tree, "Ecc Mode", "Current"), where),  # 525.x
        ecc_volatile_uncorrectable=uncorrectable(vol),
        ecc_aggregate_uncorrectable=uncorrectable(agg),
        ecc_aggregate_correctable=correctable(agg),
        ecc_dram_correctable=correctable(agg, "DRAM"),
        ecc_sram_correctable=correctable(agg, "SRAM"),
        retired_sbe=_int(_get(tree, "Retired Pages", "Single Bit ECC"), where),
        retired_dbe=_int(_get(tree, "Retired Pages", "Double Bit ECC"), where),
        retired_pending=_bool(
            _get(tree, "Retired Pages", "Pending Page Blacklist") or _get(tree, "Retired Pages", "Pending"), where
        ),
        remapped_correctable=_int(_get(remap, "Correctable Error"), where),
        remapped_uncorrectable=_int(_get(remap, "Uncorrectable Error"), where),
        remap_pending=_bool(_get(remap, "Pending"), where),
        remap_failure=_bool(_get(remap, "Remapping Failure Occurred"), where),
        ecc_sram_uncorrectable=_sum([_int(v, where) for k, v in agg.items()
                                     if k.startswith("SRAM Uncorrectable") and isinstance(v, str)]),
        sram_threshold_exceeded=_bool(_get(agg, "SRAM Threshold Exceeded"), where),
        clock_events=_q_clock_events(tree, where),
        utilization_gpu_pct=_percent(_get(tree, "Utilization", "Gpu") or _get(tree, "Utilization", "GPU"),
                                     f"{where} utilization"),
        vbios_version=_clean(_get(tree, "VBIOS Version")),
        fabric_section="Fabric" in tree,
        fabric_state=_clean(_get(fabric, "State")),
        fabric_status=_clean(_get(fabric, "Status")),
        fabric_clique_id=_clean(_get(fabric, "CliqueId") or _get(fabric, "Clique ID")),
        fabric_cluster_uuid=_clean(_get(fabric, "ClusterUUID") or _get(fabric, "Cluster UUID")),
        fabric_health=_clean(_get(fabric, "Health", "Summary")),
    )


# the head of a -q section grepped out of its GPU's block: "    Fabric", "    Clocks Throttle Reasons"
_FRAGMENT = re.compile(r"^[ \t]*(?:Fabric|Clocks Event Reasons|Clocks Throttle Reasons|ECC Errors)[ \t]*$", re.M)


# Sections every GPU of a full `nvidia-smi -q` (no -d) has, Processes being the last but one
# or last; `-q -d SECTION` output has no Product Name and is not held to this.
_Q_FULL_SECTIONS = ("Product Name", "PCI", "Processes")


def _q_incomplete(buses: list[str], trees: list[Tree]) -> list[str]:
    """Why the output is cut inside a GPU's block (empty when it is not): a GPU without a
    section a full -q block has, or the last GPU without one every other GPU has."""
    out = []
    full = any("Product Name" in t for t in trees)
    for bus, tree in zip(buses, trees, strict=True):
        missing = [k for k in _Q_FULL_SECTIONS if k not in tree] if full else []
        if not tree:
            out.append(f"GPU {bus} has an empty section")
        elif missing:
            out.append(f"GPU {bus} has no {', '.join(missing)} section")
    if len(trees) > 1 and trees[-1]:
        shared = set.intersection(*(set(t) for t in trees[:-1]))
        missing = [k for k in trees[0] if k in shared and k not in trees[-1]]
        if missing and not any(o.startswith(f"GPU {buses[-1]} ") for o in out):
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            out.append(f"GPU {buses[-1]} lacks {shown}, which every other GPU has")
    return out


def parse_nvidia_smi_q(text: str) -> NvidiaSmiResult:
    """Parse `nvidia-smi -q` (also `-q -d SECTION`) text; a cut paste is read and marked
    `partial` (see below), refused only when it holds no GPU section."""
    raw = text
    text = require_text(text, TOOL)
    _check_failure(text)
    top: dict[str, str] = {}
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if m := _Q_GPU.match(line):
            blocks.append((m.group(1), []))
        elif blocks and (line.startswith((" ", "\t")) or not line.strip()):
            blocks[-1][1].append(line)
        elif m := _Q_TOP.match(line):
            top[m.group(1)] = m.group(2).strip()
    if not blocks and (head := _FRAGMENT.search(text)):
        # `nvidia-smi -q | grep -A8 Fabric`: one GPU's section without its 'GPU <bus id>' line
        blocks.append(("", text[head.start():].splitlines()))
    if not blocks:
        raise ParseError(f"{TOOL} -q: no 'GPU 0000xxxx:xx:xx.x' section in the output")
    # A paste cut short (fewer GPU sections than 'Attached GPUs', a GPU block without its
    # sections, an elision line) is read for what it shows and marked partial: a fault in
    # the part that is there is still reported.
    partial: list[str] = []
    attached = _int(top.get("Attached GPUs"), "Attached GPUs")
    if attached is not None and attached != len(blocks):
        partial.append(f"'Attached GPUs : {attached}' but {len(blocks)} GPU section(s) (cut, or `nvidia-smi -q -i` "
                       "of some GPUs only)")
    driver = _clean(top.get("Driver Version"))
    trees = [_q_tree(block) for _, block in blocks]
    if not blocks[0][0]:
        partial.append("a section without its 'GPU <bus id>' line (a grep of nvidia-smi -q): the GPU is not named")
    else:
        partial += _q_incomplete([bus for bus, _ in blocks], trees)
    elided = [n for n, kind, _ in noise_lines(raw) if kind == "elision"]
    if elided:
        partial.append(f"elided at line {', '.join(map(str, elided))}")
    gpus = [_q_gpu(i, bus, tree, driver) for i, ((bus, _), tree) in enumerate(zip(blocks, trees, strict=True))]
    return NvidiaSmiResult("q", driver, _clean(top.get("CUDA Version")), tuple(gpus),
                           partial="; ".join(partial) or None)


# ---------------------------------------------------------------- nvidia-smi -q -x (XML)


def _x(elem: ET.Element, path: str) -> str | None:
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    return found.text


def _x_clock_events(gpu: ET.Element, where: str) -> tuple[tuple[str, bool], ...] | None:
    for section, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                            ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        sec = gpu.find(section)
        if sec is None:
            continue
        out = []
        for child in sec:
            key = child.tag.removeprefix(prefix)
            name = CLOCK_EVENT_NAMES.get(key, key)
            if (active := _active(child.text, f"{where} {name}")) is not None:
                out.append((name, active))
        return tuple(out)
    return None


def _x_gpu(index: int, gpu: ET.Element, driver: str | None) -> GpuInfo:
    where = f"GPU {gpu.get('id')}"

    def ecc_sum(scope: str, kinds: tuple[str, ...], legacy: str) -> int | None:
        sec = gpu.find(f"ecc_errors/{scope}")
        if sec is None:
            return None
        if sec.find(legacy) is not None:  # <double_bit><total>
            return _int(_x(sec, f"{legacy}/total"), where)
        return _sum([_int(_x(sec, k), where) for k in kinds])

    return GpuInfo(
        index=index,
        name=_clean(_x(gpu, "product_name")),
        bus_id=_clean(_x(gpu, "pci/pci_bus_id")) or gpu.get("id"),
        uuid=_clean(_x(gpu, "uuid")),
        serial=_clean(_x(gpu, "serial")),
        driver_version=driver,
        pcie_gen_current=_int(_x(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"), where),
        pcie_gen_max=_int(_x(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"), where),
        pcie_width_current=_int(_x(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width"), where),
        pcie_width_max=_int(_x(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width"), where),
        memory_total_mib=_int(_x(gpu, "fb_memory_usage/total"), where),
        persistence_mode=_bool(_x(gpu, "persistence_mode"), where),
        ecc_mode=_bool(_x(gpu, "ecc_mode/current_ecc"), where),
        ecc_volatile_uncorrectable=ecc_sum("volatile", ("dram_uncorrectable", "sram_uncorrectable"), "double_bit"),
        ecc_aggregate_uncorrectable=ecc_sum("aggregate", ("dram_uncorrectable", "sram_uncorrectable"), "double_bit"),
        ecc_aggregate_correctable=ecc_sum("aggregate", ("dram_correctable", "sram_correctable"), "single_bit"),
        ecc_dram_correctable=ecc_sum("aggregate", ("dram_correctable",), "single_bit"),
        ecc_sram_correctable=ecc_sum("aggregate", ("sram_correctable",), "__none__")
        if gpu.find("ecc_errors/aggregate/single_bit") is None else None,
        retired_sbe=_int(_x(gpu, "retired_pages/multiple_single_bit_retirement/retired_count"), where),
        retired_dbe=_int(_x(gpu, "retired_pages/double_bit_retirement/retired_count"), where),
        retired_pending=_bool(
            _clean(_x(gpu, "retired_pages/pending_retirement")) or _x(gpu, "retired_pages/pending_blacklist"), where
        ),
        remapped_correctable=_int(_x(gpu, "remapped_rows/remapped_row_corr"), where),
        remapped_uncorrectable=_int(_x(gpu, "remapped_rows/remapped_row_unc"), where),
        remap_pending=_bool(_x(gpu, "remapped_rows/remapped_row_pending"), where),
        remap_failure=_bool(_x(gpu, "remapped_rows/remapped_row_failure"), where),
        ecc_sram_uncorrectable=_sum([_int(_x(gpu, f"ecc_errors/aggregate/{k}"), where) for k in (
            "sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded")]),
        sram_threshold_exceeded=_bool(_x(gpu, "ecc_errors/aggregate/sram_threshold_exceeded"), where),
        clock_events=_x_clock_events(gpu, where),
        utilization_gpu_pct=_percent(_x(gpu, "utilization/gpu_util"), f"{where} utilization"),
        vbios_version=_clean(_x(gpu, "vbios_version")),
        fabric_section=gpu.find("fabric") is not None,
        fabric_state=_clean(_x(gpu, "fabric/state")),
        fabric_status=_clean(_x(gpu, "fabric/status")),
        fabric_clique_id=_clean(_x(gpu, "fabric/cliqueId")),
        fabric_cluster_uuid=_clean(_x(gpu, "fabric/clusterUuid")),
        fabric_health=_clean(_x(gpu, "fabric/health/summary")),
    )


def parse_nvidia_smi_xml(text: str) -> NvidiaSmiResult:
    """Parse `nvidia-smi -q -x`."""
    text = require_text(text, TOOL)
    if "<nvidia_smi_log" not in text:
        _check_failure(text)
        first = text.strip().splitlines()[0]
        raise ParseError(f"{TOOL} -q -x: no <nvidia_smi_log> document; first line {quote(first)}")
    start = text.index("<?xml") if "<?xml" in text else text.index("<nvidia_smi_log")
    try:
        root = ET.fromstring(text[start:])
    except ET.ParseError as exc:
        raise ParseError(f"{TOOL} -q -x: not well-formed XML ({exc}; truncated output?)") from None
    driver = _clean(_x(root, "driver_version"))
    gpus = tuple(_x_gpu(i, g, driver) for i, g in enumerate(root.findall("gpu")))
    if not gpus:
        raise ParseError(f"{TOOL} -q -x: the document lists no <gpu>")
    return NvidiaSmiResult("xml", driver, _clean(_x(root, "cuda_version")), gpus)


# ---------------------------------------------------------------- --query-gpu CSV

_CSV_MAP: dict[str, tuple[str, Callable[[str | None, str], Any]]] = {
    "index": ("index", lambda v, w: _int(v, w)),
    "name": ("name", lambda v, w: _clean(v)),
    "pci.bus_id": ("bus_id", lambda v, w: _clean(v)),
    "driver_version": ("driver_version", lambda v, w: _clean(v)),
    "pcie.link.gen.current": ("pcie_gen_current", _int),
    "pcie.link.gen.gpucurrent": ("pcie_gen_current", _int),
    "pcie.link.gen.max": ("pcie_gen_max", _int),
    "pcie.link.gen.gpumax": ("pcie_gen_max", _int),
    "pcie.link.width.current": ("pcie_width_current", _int),
    "pcie.link.width.max": ("pcie_width_max", _int),
    "memory.total": ("memory_total_mib", _int),
    "persistence_mode": ("persistence_mode", _bool),
    "ecc.mode.current": ("ecc_mode", _bool),
    "ecc.errors.uncorrected.volatile.total": ("ecc_volatile_uncorrectable", _int),
    "ecc.errors.uncorrected.aggregate.total": ("ecc_aggregate_uncorrectable", _int),
    "ecc.errors.corrected.aggregate.total": ("ecc_aggregate_correctable", _int),
    "retired_pages.pending": ("retired_pending", _bool),
    "retired_pages.single_bit_ecc.count": ("retired_sbe", _int),
    "retired_pages.double_bit.count": ("retired_dbe", _int),
    "remapped_rows.correctable": ("remapped_correctable", _int),
    "remapped_rows.uncorrectable": ("remapped_uncorrectable", _int),
    "remapped_rows.pending": ("remap_pending", _bool),
    "remapped_rows.failure": ("remap_failure", _bool),
    "serial": ("serial", lambda v, w: _clean(v)),
    "uuid": ("uuid", lambda v, w: _clean(v)),
}
_GPU_FIELDS = {f.name for f in fields(GpuInfo)}
# "memory.total [MiB]" in a header written without `nounits`
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]$")
# a header cell: a --query-gpu field name ("pci.bus_id", "clocks_event_reasons.active"), never a value
_FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*$")


# "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |"
_TABLE = re.compile(r"^\|\s*NVIDIA-SMI \S+", re.M)
# "GPU 0: NVIDIA H200 (UUID: GPU-...)"
_LIST = re.compile(r"^GPU \d+: .*\(UUID: ", re.M)
_CSV_HINT = "run nvidia-smi --query-gpu=<QUERY_GPU_FIELDS> --format=csv,noheader,nounits"


def _csv_refuse_other_forms(text: str) -> None:
    """The plain table, `-L` and `-q` are common wrong pastes: name them."""
    if _TABLE.search(text):
        raise ParseError(f"{TOOL} --query-gpu: this is the plain nvidia-smi table, not CSV; {_CSV_HINT}")
    if _LIST.search(text):
        raise ParseError(f"{TOOL} --query-gpu: this is nvidia-smi -L (the GPU list), not CSV; {_CSV_HINT}")
    if "NVSMI LOG" in text:
        raise ParseError(f"{TOOL} --query-gpu: this is nvidia-smi -q text (use the nvidia-smi-q kind); {_CSV_HINT}")


def parse_query_gpu_csv(text: str, query_fields: tuple[str, ...] = QUERY_GPU_FIELDS) -> NvidiaSmiResult:
    """Parse `nvidia-smi --query-gpu=<query_fields> --format=csv[,noheader][,nounits]`.

    A header line, if present, decides the columns (so `query_fields` may be omitted);
    units left in by a missing `nounits` ("81559 MiB") are removed. Columns gpuctl does
    not read (memory.used, pstate, ...) are skipped and named in `notes`.
    """
    text = require_text(text, TOOL)
    _check_failure(text)
    _csv_refuse_other_forms(text)
    reader = csv.reader(io.StringIO(text.strip()), skipinitialspace=True)
    records = [r for r in reader if r and any(c.strip() for c in r)]
    columns = list(query_fields)
    if records and records[0] and all(_FIELD_NAME.match(_HEADER_UNIT.sub("", c.strip())) for c in records[0]):
        columns = [_HEADER_UNIT.sub("", c.strip()) for c in records[0]]
        records = records[1:]
    if not records:
        raise ParseError(f"{TOOL} --query-gpu: a header but no GPU lines")
    # A column gpuctl does not judge (memory.used, pstate, power.draw, ...) is skipped, not
    # refused: only the columns it reads matter, and one of them must be there.
    unknown = [c for c in columns if c not in _CSV_MAP]
    if len(unknown) == len(columns):
        raise ParseError(f"{TOOL} --query-gpu: none of the fields gpuctl reads ({', '.join(unknown)}); "
                         f"{_CSV_HINT}")
    notes = (f"columns not judged by gpuctl, skipped: {', '.join(unknown)}",) if unknown else ()
    gpus = []
    for n, record in enumerate(records):
        line = ", ".join(record)
        if len(record) != len(columns):
            raise ParseError(
                f"{TOOL} --query-gpu: {len(record)} values where {len(columns)} fields were asked for: {quote(line)}"
            )
        values: dict[str, Any] = {}
        for column, raw in zip(columns, record, strict=True):
            if column not in _CSV_MAP:
                continue
            attr, convert = _CSV_MAP[column]
            try:
                values[attr] = convert(raw, f"{column} in {quote(line)}")
            except ParseError:
                raise
        values.setdefault("index", n)
        if values["index"] is None:
            values["index"] = n
        values.setdefault("name", None)
        values.setdefault("bus_id", None)
        gpus.append(GpuInfo(**{k: v for k, v in values.items() if k in _GPU_FIELDS}))
    drivers = {g.driver_version for g in gpus if g.driver_version}
    return NvidiaSmiResult("csv", drivers.pop() if len(drivers) == 1 else None, None, tuple(gpus), notes)
