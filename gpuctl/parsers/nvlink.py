"""`nvidia-smi nvlink --status` (`-s`): per GPU, the speed of every NVLink.

Per-link speeds are in GB/s as printed (unidirectional per link: 25 GB/s on A100,
26.562 GB/s on H100). A link shown as ``<inactive>`` is down; the line
``NVML: Unable to retrieve NVLink information as all links are inactive`` marks every
link of that GPU down. A GPU with neither links nor that line has no NVLink (PCIe card).
When no GPU has NVLink at all, nvidia-smi prints nothing (seen on a single H200 VM): empty
output parses to no GPUs, and the verdicts say what that means for the SKU. Paste noise
is skipped; an elision line inside a GPU's link list marks that GPU `cut` (its link count
is then not judged, the rest is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import noise_kind, quote, require_text, to_float

TOOL = "nvidia-smi nvlink --status"

# "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5269b708-678a-b1a8-60f0-c90406537486)"
_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: (\S+)\))?\s*$")
# "\t Link 0: 25 GB/s"  /  "         Link 11: <inactive>"
_LINK = re.compile(r"^\s+Link (\d+): (?:([\d.]+) GB/s|(<inactive>))\s*$")
# "NVML: Unable to retrieve NVLink information as all links are inactive"
_ALL_INACTIVE = re.compile(r"all links are inactive")
# "Failed to initialize NVML: Driver/library version mismatch"
_ERROR = re.compile(r"Failed to initialize NVML|couldn't communicate with the NVIDIA driver|No devices were found")


@dataclass(frozen=True)
class NvlinkLink:
    link: int
    speed_gb_s: float | None  # None when <inactive>

    @property
    def active(self) -> bool:
        return self.speed_gb_s is not None


@dataclass(frozen=True)
class NvlinkGpu:
    index: int
    name: str
    uuid: str | None
    links: tuple[NvlinkLink, ...]
    all_inactive: bool
    cut: bool = False  # an elision line inside its block: its link list is not whole

    @property
    def active_links(self) -> int:
        return sum(1 for link in self.links if link.active)

    @property
    def total_gb_s(self) -> float:
        return sum((link.speed_gb_s or 0.0 for link in self.links), 0.0)


@dataclass(frozen=True)
class NvlinkResult:
    gpus: tuple[NvlinkGpu, ...]

    @property
    def partial(self) -> str | None:
        """Why the paste is not whole (an elision inside a GPU's link list), or None."""
        cut = [g.index for g in self.gpus if g.cut]
        return f"the link list of GPU {', '.join(map(str, cut))} is elided" if cut else None


def parse_nvlink_status(text: str) -> NvlinkResult:
    """Parse `nvidia-smi nvlink --status` for one or all GPUs."""
    if text is not None and not text.strip():
        return NvlinkResult(())  # nvidia-smi's whole output where no GPU has NVLink
    text = require_text(text, TOOL, keep_noise=True)
    gpus: list[tuple[int, str, str | None, list[NvlinkLink], list[bool]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if (noise := noise_kind(line)) is not None:
            if noise == "elision" and gpus:
                gpus[-1][4][1] = True  # "\t ..." in a GPU's link list: that GPU's list is cut
            continue
        if _ERROR.search(line):
            raise ParseError(f"{TOOL}: {quote(line)}")
        if m := _GPU.match(line):
            gpus.append((int(m.group(1)), m.group(2), m.group(3), [], [False, False]))
        elif m := _LINK.match(line):
            if not gpus:
                raise ParseError(f"{TOOL}: link line before any GPU line: {quote(line)}")
            speed = None if m.group(3) else to_float(m.group(2), TOOL, line)
            gpus[-1][3].append(NvlinkLink(int(m.group(1)), speed))
        elif _ALL_INACTIVE.search(line):
            if not gpus:
                raise ParseError(f"{TOOL}: {quote(line)} before any GPU line")
            gpus[-1][4][0] = True
        else:
            raise ParseError(f"{TOOL}: unexpected line {quote(line)}")
    if not gpus:
        raise ParseError(f"{TOOL}: no 'GPU n: ...' line in the output")
    return NvlinkResult(tuple(
        NvlinkGpu(index, name, uuid, tuple(links), flags[0], flags[1]) for index, name, uuid, links, flags in gpus
    ))
