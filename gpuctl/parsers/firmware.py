"""Firmware versions as the lock reads them: RDMA adapters' `fw_ver` and the GPUs' VBIOS.

Pure functions: lines in, {key: version} out (keys ``hca/<dev>`` and ``vbios/<index>``, the
lock file's own).
"""

from __future__ import annotations

#: what nvidia-smi prints for a value it cannot read
_NOT_AVAILABLE = frozenset({"N/A", "[N/A]"})


def parse_fw_ver_lines(lines: list[str]) -> dict[str, str]:
    """``<dev>\\t<fw_ver>`` lines (one per /sys/class/infiniband/<dev>/fw_ver) → {"hca/<dev>": version}."""
    out: dict[str, str] = {}
    for line in lines:
        dev, _, ver = line.partition("\t")
        if dev and ver.strip():
            out[f"hca/{dev}"] = ver.strip()
    return out


def parse_vbios_csv(lines: list[str]) -> dict[str, str]:
    """`nvidia-smi --query-gpu=index,vbios_version --format=csv,noheader` → {"vbios/<index>": version};
    lines that are not ``<index>, <version>`` (an NVML error) and N/A values are left out."""
    out: dict[str, str] = {}
    for line in lines:
        idx, sep, ver = line.partition(",")
        if sep and idx.strip().isdigit() and ver.strip() and ver.strip() not in _NOT_AVAILABLE:
            out[f"vbios/{int(idx)}"] = ver.strip()
    return out
