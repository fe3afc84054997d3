"""`nvidia-smi -q`: the text report, read into `NvidiaSmiResult`."""

from __future__ import annotations

import re
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.parsers._common import noise_lines, require_text
from gpuctl.parsers.nvidia_smi.model import TOOL, GpuInfo, NvidiaSmiResult, check_failure
from gpuctl.parsers.nvidia_smi.values import active, clean, flag, number, percent, total

#: the command whose output this module reads
COMMAND = "nvidia-smi -q"

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


def _q_clock_events(tree: Tree, where: str) -> tuple[tuple[str, bool], ...] | None:
    sec = tree.get("Clocks Event Reasons", tree.get("Clocks Throttle Reasons"))
    if not isinstance(sec, dict):
        return None
    out = []
    for name, value in sec.items():
        if isinstance(value, str) and (state := active(value, f"{where} {name}")) is not None:
            out.append((name, state))
    return tuple(out)


def _q_gpu(index: int, bus: str, tree: Tree, driver: str | None) -> GpuInfo:
    where = f"GPU {bus}" if bus else f"GPU section {index}"
    ecc = _section(tree, "ECC Errors")
    vol, agg = _section(ecc, "Volatile"), _section(ecc, "Aggregate")

    def uncorrectable(sec: Tree) -> int | None:
        if "Double Bit" in sec:  # pre-Ampere layout: Single Bit / Double Bit → Total
            return number(_get(sec, "Double Bit", "Total"), where)
        return total([number(v, where) for k, v in sec.items() if "Uncorrectable" in k and isinstance(v, str)])

    def correctable(sec: Tree, prefix: str = "") -> int | None:
        if "Single Bit" in sec:
            return number(_get(sec, "Single Bit", "Total"), where) if prefix in ("", "DRAM") else None
        return total([
            number(v, where) for k, v in sec.items()
            if k.endswith("Correctable") and "Uncorrectable" not in k and k.startswith(prefix)
            and isinstance(v, str)
        ])

    remap = tree.get("Remapped Rows")
    remap = remap if isinstance(remap, dict) else {}
    link = _section(tree, "PCI", "GPU Link Info")
    fabric = _section(tree, "Fabric")
    return GpuInfo(
        index=index,
        name=clean(_get(tree, "Product Name")),
        bus_id=clean(_get(tree, "PCI", "Bus Id")) or bus or None,
        uuid=clean(_get(tree, "GPU UUID")),
        serial=clean(_get(tree, "Serial Number")),
        driver_version=driver,
        pcie_gen_current=number(_get(link, "PCIe Generation", "Current"), where),
        pcie_gen_max=number(_get(link, "PCIe Generation", "Max"), where),
        pcie_width_current=number(_get(link, "Link Width", "Current"), where),
        pcie_width_max=number(_get(link, "Link Width", "Max"), where),
        memory_total_mib=number(_get(tree, "FB Memory Usage", "Total"), where),
        persistence_mode=flag(_get(tree, "Persistence Mode"), where),
        ecc_mode=flag(_get(tree, "ECC Mode", "Current") or _get(tree, "Ecc Mode", "Current"), where),  # 525.x
        ecc_volatile_uncorrectable=uncorrectable(vol),
        ecc_aggregate_uncorrectable=uncorrectable(agg),
        ecc_aggregate_correctable=correctable(agg),
        ecc_dram_correctable=correctable(agg, "DRAM"),
        ecc_sram_correctable=correctable(agg, "SRAM"),
        retired_sbe=number(_get(tree, "Retired Pages", "Single Bit ECC"), where),
        retired_dbe=number(_get(tree, "Retired Pages", "Double Bit ECC"), where),
        retired_pending=flag(
            _get(tree, "Retired Pages", "Pending Page Blacklist") or _get(tree, "Retired Pages", "Pending"), where
        ),
        remapped_correctable=number(_get(remap, "Correctable Error"), where),
        remapped_uncorrectable=number(_get(remap, "Uncorrectable Error"), where),
        remap_pending=flag(_get(remap, "Pending"), where),
        remap_failure=flag(_get(remap, "Remapping Failure Occurred"), where),
        ecc_sram_uncorrectable=total([number(v, where) for k, v in agg.items()
                                     if k.startswith("SRAM Uncorrectable") and isinstance(v, str)]),
        sram_threshold_exceeded=flag(_get(agg, "SRAM Threshold Exceeded"), where),
        clock_events=_q_clock_events(tree, where),
        utilization_gpu_pct=percent(_get(tree, "Utilization", "Gpu") or _get(tree, "Utilization", "GPU"),
                                     f"{where} utilization"),
        vbios_version=clean(_get(tree, "VBIOS Version")),
        fabric_section="Fabric" in tree,
        fabric_state=clean(_get(fabric, "State")),
        fabric_status=clean(_get(fabric, "Status")),
        fabric_clique_id=clean(_get(fabric, "CliqueId") or _get(fabric, "Clique ID")),
        fabric_cluster_uuid=clean(_get(fabric, "ClusterUUID") or _get(fabric, "Cluster UUID")),
        fabric_health=clean(_get(fabric, "Health", "Summary")),
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
    check_failure(text)
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
    attached = number(top.get("Attached GPUs"), "Attached GPUs")
    if attached is not None and attached != len(blocks):
        partial.append(f"'Attached GPUs : {attached}' but {len(blocks)} GPU section(s) (cut, or `nvidia-smi -q -i` "
                       "of some GPUs only)")
    driver = clean(top.get("Driver Version"))
    trees = [_q_tree(block) for _, block in blocks]
    if not blocks[0][0]:
        partial.append("a section without its 'GPU <bus id>' line (a grep of nvidia-smi -q): the GPU is not named")
    else:
        partial += _q_incomplete([bus for bus, _ in blocks], trees)
    elided = [n for n, kind, _ in noise_lines(raw) if kind == "elision"]
    if elided:
        partial.append(f"elided at line {', '.join(map(str, elided))}")
    gpus = [_q_gpu(i, bus, tree, driver) for i, ((bus, _), tree) in enumerate(zip(blocks, trees, strict=True))]
    return NvidiaSmiResult("q", driver, clean(top.get("CUDA Version")), tuple(gpus),
                           partial="; ".join(partial) or None)
