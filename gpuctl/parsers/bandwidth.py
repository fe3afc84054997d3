"""GPU memory and host↔device bandwidth: NVIDIA nvbandwidth, and gpuctl's own probe.

Both give a `BandwidthResult`: per GPU, host→device and device→host copy bandwidth, the
device-local copy bandwidth and the copy bandwidth to each peer, all in GB/s (10^9 bytes
per second).

**hbm_copy_gb_s counts read + write bytes**: a device-local copy of N bytes in t seconds
moves 2·N bytes through HBM, so hbm_copy_gb_s = 2·N / t / 10^9, comparable with the
datasheet HBM bandwidth (an H200 measured 4.2 of 4.8 TB/s). nvbandwidth's
``device_local_copy`` counts the bytes once, so its figure is doubled here.

gpuctl-bwprobe JSON (version 1), printed by gpuctl's probe and imitated by the lab::

    {
      "tool": "gpuctl-bwprobe",
      "version": 1,
      "gpus": [
        {
          "index": 0,                      # CUDA/nvidia-smi index (int, required)
          "bus_id": "00000000:19:00.0",    # optional
          "h2d_gb_s": 55.3,                # pinned host → device copy, GB/s (number or null)
          "d2h_gb_s": 55.2,                # device → pinned host copy, GB/s (number or null)
          "hbm_copy_gb_s": 4200.0,         # device-local copy, read+write bytes, GB/s (or null)
          "p2p_gb_s": {"1": 380.0}         # copy to peer index (string key) → GB/s; {} if none
        }
      ],
      "error": "..."                       # optional: present only when the probe could not run
    }

nvbandwidth text output: blocks ``Running <testcase>.``, a title line, a column header,
matrix rows (``N/A`` where not measured) and ``SUM <testcase> <value>``. The testcases
read are ``host_to_device_memcpy_ce`` (row 0 = CPU, one column per GPU),
``device_to_host_memcpy_ce``, ``device_local_copy`` and
``device_to_device_memcpy_read_ce`` (row = source GPU, column = peer).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text, to_float

TOOL = "bandwidth"
PROBE_TOOL = "gpuctl-bwprobe"
PROBE_VERSION = 1


@dataclass(frozen=True)
class GpuBandwidth:
    index: int
    h2d_gb_s: float | None = None
    d2h_gb_s: float | None = None
    hbm_copy_gb_s: float | None = None
    p2p_gb_s: Mapping[int, float] = field(default_factory=dict)
    bus_id: str | None = None


@dataclass(frozen=True)
class NvbwMatrix:
    testcase: str
    title: str
    rows: tuple[tuple[float | None, ...], ...]
    sum_gb_s: float | None


@dataclass(frozen=True)
class BandwidthResult:
    source: str  # "nvbandwidth" or "gpuctl-bwprobe"
    gpus: tuple[GpuBandwidth, ...]
    matrices: tuple[NvbwMatrix, ...] = ()
    version: str | None = None


def parse_bandwidth(text: str) -> BandwidthResult:
    """Parse the probe's JSON (if the text starts with '{') or nvbandwidth's text output."""
    text = require_text(text, TOOL)
    if text.lstrip().startswith("{"):
        return parse_bwprobe(text)
    return parse_nvbandwidth(text)


# ---------------------------------------------------------------- gpuctl-bwprobe


def _num(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ParseError(f"{PROBE_TOOL}: {where} must be a non-negative number or null, got {value!r}")
    return float(value)


def parse_bwprobe(text: str) -> BandwidthResult:
    """Parse gpuctl-bwprobe JSON (schema in the module docstring)."""
    text = require_text(text, PROBE_TOOL)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"{PROBE_TOOL}: not valid JSON ({exc}; truncated?)") from None
    if not isinstance(doc, dict) or doc.get("tool") != PROBE_TOOL:
        raise ParseError(f"{PROBE_TOOL}: not a probe document ('tool' is {doc.get('tool')!r})"
                         if isinstance(doc, dict) else f"{PROBE_TOOL}: not a JSON object")
    if doc.get("version") != PROBE_VERSION:
        raise ParseError(
            f"{PROBE_TOOL}: unsupported version {doc.get('version')!r} (this gpuctl reads {PROBE_VERSION})"
        )
    if doc.get("error"):
        raise ParseError(f"{PROBE_TOOL}: the probe could not run: {quote(str(doc['error']))}")
    raw_gpus = doc.get("gpus")
    if not isinstance(raw_gpus, list) or not raw_gpus:
        raise ParseError(f"{PROBE_TOOL}: 'gpus' must be a non-empty list")
    gpus = []
    for n, g in enumerate(raw_gpus):
        if not isinstance(g, dict) or not isinstance(g.get("index"), int):
            raise ParseError(f"{PROBE_TOOL}: gpus[{n}] needs an integer 'index': {quote(json.dumps(g))}")
        where = f"gpus[{n}]"
        p2p_raw = g.get("p2p_gb_s") or {}
        if not isinstance(p2p_raw, dict):
            raise ParseError(f"{PROBE_TOOL}: {where}.p2p_gb_s must be an object of peer index → GB/s")
        p2p: dict[int, float] = {}
        for peer, val in p2p_raw.items():
            if not str(peer).isdigit():
                raise ParseError(f"{PROBE_TOOL}: {where}.p2p_gb_s key {peer!r} is not a GPU index")
            v = _num(val, f"{where}.p2p_gb_s[{peer}]")
            if v is not None:
                p2p[int(peer)] = v
        gpus.append(GpuBandwidth(
            index=g["index"],
            h2d_gb_s=_num(g.get("h2d_gb_s"), f"{where}.h2d_gb_s"),
            d2h_gb_s=_num(g.get("d2h_gb_s"), f"{where}.d2h_gb_s"),
            hbm_copy_gb_s=_num(g.get("hbm_copy_gb_s"), f"{where}.hbm_copy_gb_s"),
            p2p_gb_s=p2p,
            bus_id=g.get("bus_id") if isinstance(g.get("bus_id"), str) else None,
        ))
    return BandwidthResult(PROBE_TOOL, tuple(gpus), (), str(doc.get("probe_version") or PROBE_VERSION))


# ---------------------------------------------------------------- nvbandwidth

# "nvbandwidth Version: v0.10.0"
_NVBW_VERSION = re.compile(r"^nvbandwidth Version:\s*(\S+)")
# "Running host_to_device_memcpy_ce."
_RUNNING = re.compile(r"^Running (\w+)\.\s*$")
# "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
_TITLE = re.compile(r"bandwidth \(GB/s\)\s*$")
# "           0         1         2"
_COLS = re.compile(r"^\s+\d+(\s+\d+)*\s*$")
# " 0     55.59     55.60     N/A"
_MROW = re.compile(r"^\s*(\d+)((?:\s+(?:[\d.]+|N/A))+)\s*$")
# "SUM host_to_device_memcpy_ce 389.15"
_SUM = re.compile(r"^SUM (\w+)\s+([\d.]+)\s*$")
# "ERROR: ..." / "CUDA_ERROR_..." / "terminate called after throwing"
_ERROR = re.compile(r"^\s*(ERROR|Error)\b|CUDA_ERROR|terminate called")


def parse_nvbandwidth(text: str) -> BandwidthResult:
    """Parse nvbandwidth's text output (any selection of testcases)."""
    text = require_text(text, "nvbandwidth")
    version = None
    blocks: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for line in text.splitlines():
        if _ERROR.search(line):
            raise ParseError(f"nvbandwidth: {quote(line)}")
        if m := _NVBW_VERSION.match(line):
            version = m.group(1)
        elif m := _RUNNING.match(line):
            current = m.group(1)
            blocks[current] = {"title": "", "rows": [], "sum": None}
        elif current and _TITLE.search(line):
            blocks[current]["title"] = line.strip()
        elif current and _COLS.match(line):
            continue
        elif current and (m := _MROW.match(line)):
            cells = tuple(None if c == "N/A" else to_float(c, "nvbandwidth", line) for c in m.group(2).split())
            blocks[current]["rows"].append(cells)
        elif (m := _SUM.match(line)) and m.group(1) in blocks:
            blocks[m.group(1)]["sum"] = float(m.group(2))
    matrices = []
    for name, b in blocks.items():
        if not b["rows"]:
            continue
        if b["sum"] is None:
            raise ParseError(f"nvbandwidth: testcase {name} has no 'SUM {name} ...' line (truncated output?)")
        matrices.append(NvbwMatrix(name, b["title"], tuple(b["rows"]), b["sum"]))
    if not matrices:
        raise ParseError("nvbandwidth: no testcase with a result matrix in the output")
    by_name = {m.testcase: m for m in matrices}

    def row0(name: str) -> tuple[float | None, ...]:
        m = by_name.get(name)
        return m.rows[0] if m and m.rows else ()

    h2d, d2h, local = row0("host_to_device_memcpy_ce"), row0("device_to_host_memcpy_ce"), row0("device_local_copy")
    p2p_m = by_name.get("device_to_device_memcpy_read_ce")
    count = max(len(h2d), len(d2h), len(local), len(p2p_m.rows) if p2p_m else 0)
    gpus = []
    for i in range(count):
        p2p: dict[int, float] = {}
        if p2p_m and i < len(p2p_m.rows):
            p2p = {j: v for j, v in enumerate(p2p_m.rows[i]) if v is not None and j != i}
        loc = local[i] if i < len(local) else None
        gpus.append(GpuBandwidth(
            index=i,
            h2d_gb_s=h2d[i] if i < len(h2d) else None,
            d2h_gb_s=d2h[i] if i < len(d2h) else None,
            hbm_copy_gb_s=2 * loc if loc is not None else None,
            p2p_gb_s=p2p,
        ))
    return BandwidthResult("nvbandwidth", tuple(gpus), tuple(matrices), version)
