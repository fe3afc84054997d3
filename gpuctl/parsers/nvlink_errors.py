"""`nvidia-smi nvlink -e` (`--errorcounters`): per GPU and link, the NVLink error counters.

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
             Link 0: Replay Errors: 0
             Link 0: Recovery Errors: 0
             Link 0: CRC Errors: 0

Newer drivers print more counters per link (CRC Flit/Data, Rx/Tx errors, Symbol Errors, ...);
every `Link N: <name>: <count>` is read (several per line, comma-separated, too). Counters
count since the driver loaded or the counters were reset, so one output is a report, not a
judgement: two outputs (concatenated, or `--baseline`) are two samples, split where a GPU
appears a second time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import noise_lines, quote, require_text

TOOL = "nvidia-smi nvlink -e"

# "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-abcdefab-...)" / "GPU 0:"
_GPU = re.compile(r"^GPU (\d+):\s*(.*?)\s*$")
# "\t Link 0: Replay Errors: 0" / "   Link 1: Replay Errors: 142, Recovery Errors: 3, CRC Errors: 891"
_LINK = re.compile(r"^\s+Link (\d+):\s*(.+)$")
_COUNTER = re.compile(r"([A-Za-z][A-Za-z ]*?):\s*(\d+|N/A)\s*(?:,|$)")

Key = tuple[int, int, str]  # (gpu index, link, counter name)


@dataclass(frozen=True)
class NvlinkErrorsResult:
    samples: tuple[dict[Key, int], ...]  # in order; each: (gpu, link, counter) → count
    gpus: dict[int, str]  # index → the name printed after "GPU N:"
    partial: str | None = None  # an elision in the paste: the links it hides are not read


def parse_nvlink_errors(text: str) -> NvlinkErrorsResult:
    """Parse one or more `nvidia-smi nvlink -e` outputs (a GPU seen again starts the next sample)."""
    raw = text
    text = require_text(text, TOOL)
    samples: list[dict[Key, int]] = []
    seen: set[int] = set()
    gpus: dict[int, str] = {}
    gpu: int | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if m := _GPU.match(line):
            gpu = int(m.group(1))
            if not samples or gpu in seen:
                samples.append({})
                seen = set()
            seen.add(gpu)
            gpus.setdefault(gpu, m.group(2))
        elif m := _LINK.match(line):
            if gpu is None:
                raise ParseError(f"{TOOL}: a link line before any 'GPU N:' line: {quote(line)}")
            counters = _COUNTER.findall(m.group(2))
            if not counters:
                raise ParseError(f"{TOOL}: no 'Name: count' in {quote(line)}")
            for name, value in counters:
                if value != "N/A":
                    samples[-1][(gpu, int(m.group(1)), name.strip())] = int(value)
        elif gpu is None:
            raise ParseError(f"{TOOL}: not nvidia-smi nvlink -e output: {quote(line)}")
        # other lines inside a GPU's block (a new counter group heading) carry no count
    if not samples or not any(samples):
        raise ParseError(f"{TOOL}: no 'GPU N:' block with 'Link N: <counter>: <count>' lines")
    elided = [n for n, kind, _ in noise_lines(raw) if kind == "elision"]
    partial = f"elided at line {', '.join(map(str, elided))}: the links there are not read" if elided else None
    return NvlinkErrorsResult(tuple(samples), gpus, partial)
