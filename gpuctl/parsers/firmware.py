"""Firmware versions as the lock and health read them: RDMA adapters' `fw_ver` and the GPUs' VBIOS.

Pure functions: text in, {key: version} out (keys ``hca/<dev>`` and ``vbios/<index>``, the
lock file's own). The VBIOS comes from the one `nvidia-smi -q -x` verify and health read
(`gpuctl.parsers.nvidia_smi.q_xml`), never from a query of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuctl.errors import ParseError
from gpuctl.parsers.nvidia_smi.model import GpuInfo
from gpuctl.parsers.nvidia_smi.q_xml import parse_nvidia_smi_xml


def parse_fw_ver_lines(lines: list[str]) -> dict[str, str]:
    """``<dev>\\t<fw_ver>`` lines (one per /sys/class/infiniband/<dev>/fw_ver) → {"hca/<dev>": version}."""
    out: dict[str, str] = {}
    for line in lines:
        dev, _, ver = line.partition("\t")
        if dev and ver.strip():
            out[f"hca/{dev}"] = ver.strip()
    return out


def vbios_versions(gpus: Sequence[GpuInfo]) -> dict[str, str]:
    """The GPUs' VBIOS versions as firmware items ({"vbios/0": "96.00.74.00.01"}); a GPU whose
    VBIOS nvidia-smi cannot read (N/A) is left out."""
    return {f"vbios/{g.index}": g.vbios_version for g in gpus if g.vbios_version}


def parse_vbios_xml(text: str) -> dict[str, str]:
    """`nvidia-smi -q -x` → {"vbios/<index>": version}; {} where there is no report to read (no
    nvidia-smi, or NVML's one-line failure instead of the XML)."""
    if not text.strip():
        return {}
    try:
        return vbios_versions(parse_nvidia_smi_xml(text).gpus)
    except ParseError:
        return {}
