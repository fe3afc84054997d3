"""Parsers of the passive health checks' remote outputs (`gpuctl health`, verify's health checks).

- `parse_pci_sysfs`: the sysfs files of the GPUs' and NICs' PCI functions and of the RDMA devices
  (`class`, `vendor`, `numa_node`, `aer_dev_{fatal,nonfatal,correctable}`, `fw_ver`, the port error
  counters the caller asked for: `gpuctl.checks.probe.health_sysfs_script`), as {path: text} (the
  `tail -n +1` bundle, split by `gpuctl.parsers.files`).

`lspci -vvv` (ACS) is read by `gpuctl.parsers.lspci`; the clock-event reasons, load, VBIOS and Fabric
section by `gpuctl.parsers.nvidia_smi` (`nvidia-smi -q -x`, one reading for all of them).

Pure functions: text in, frozen dataclasses out; ParseError quoting the bad input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuctl.errors import ParseError

from ._common import quote

# ---------------------------------------------------------------- sysfs

AER_KINDS: tuple[str, ...] = ("fatal", "nonfatal", "correctable")
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
#: PCI class codes read: 0x0300xx VGA / 0x0302xx 3D controller (GPUs), 0x0200xx Ethernet, 0x0207xx InfiniBand
GPU_CLASSES = ("0x0300", "0x0302")
NIC_CLASSES = ("0x0200", "0x0207")
NVIDIA_VENDOR = "0x10de"

_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_PCI_FILE = re.compile(r"^/sys/bus/pci/devices/([^/]+)/(class|vendor|numa_node|device-path|"
                       r"aer_dev_(fatal|nonfatal|correctable))$")
_IB_FILE = re.compile(r"^/sys/class/infiniband/([^/]+)/(fw_ver|device-link)$")
_IB_COUNTER = re.compile(r"^/sys/class/infiniband/([^/]+)/ports/(\d+)/counters/([a-z_]+)$")
# "TOTAL_ERR_FATAL 0" / "RxErr 0"
_AER_LINE = re.compile(r"^(\w+)\s+(\d+)$")


@dataclass(frozen=True)
class PciFunction:
    bdf: str  # "0000:18:00.0"
    pci_class: str  # "0x030200"
    vendor: str | None
    numa_node: int | None  # None: -1 (no NUMA information) or not readable
    aer: Mapping[str, int] = field(default_factory=dict)  # kind -> total, kinds the kernel exposes
    #: the PCI bridges above it, root port first (from its resolved sysfs path)
    upstream: tuple[str, ...] = ()

    @property
    def is_gpu(self) -> bool:
        return self.pci_class.startswith(GPU_CLASSES) and self.vendor == NVIDIA_VENDOR

    @property
    def is_nic(self) -> bool:
        return self.pci_class.startswith(NIC_CLASSES)


@dataclass(frozen=True)
class RdmaDevice:
    name: str  # "mlx5_0"
    bdf: str | None  # its PCI function; None for a software device (rxe, siw)
    fw_ver: str | None


@dataclass(frozen=True)
class PciSysfs:
    functions: Mapping[str, PciFunction]
    rdma: Mapping[str, RdmaDevice]
    #: "mlx5_0/1" -> {counter: value}
    ib_counters: Mapping[str, Mapping[str, int]]
    #: /proc/sys/kernel/random/boot_id: which boot the since-boot counters (AER, NVLink) count from
    boot_id: str | None = None


def _int_file(path: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ParseError(f"{path}: {quote(text)} is not a number") from None


def _aer_total(path: str, text: str, kind: str) -> int:
    total, parts = None, 0
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _AER_LINE.match(line.strip())
        if not m:
            raise ParseError(f"{path}: {quote(line)} is not 'NAME COUNT'")
        if m.group(1).startswith("TOTAL_ERR_"):
            total = int(m.group(2))
        else:
            parts += int(m.group(2))
    return total if total is not None else parts


def parse_pci_sysfs(files: Mapping[str, str]) -> PciSysfs:
    """The GPUs' and NICs' PCI functions, RDMA devices and port counters from their sysfs files
    ({path: text}; a `device-link` entry holds `readlink -f /sys/class/infiniband/X/device`)."""
    raw: dict[str, dict[str, str]] = {}
    rdma: dict[str, dict[str, str]] = {}
    counters: dict[str, dict[str, int]] = {}
    boot_id = None
    for path, text in files.items():
        if path == BOOT_ID_PATH:
            boot_id = text.strip() or None
        elif m := _PCI_FILE.match(path):
            raw.setdefault(m.group(1), {})[m.group(2)] = text
        elif m := _IB_FILE.match(path):
            rdma.setdefault(m.group(1), {})[m.group(2)] = text.strip()
        elif m := _IB_COUNTER.match(path):
            counters.setdefault(f"{m.group(1)}/{m.group(2)}", {})[m.group(3)] = _int_file(path, text)
    functions = {}
    for bdf, f in raw.items():
        if not _BDF.match(bdf) or "class" not in f:
            continue
        numa = _int_file(f"/sys/bus/pci/devices/{bdf}/numa_node", f["numa_node"]) if "numa_node" in f else None
        aer = {k: _aer_total(f"/sys/bus/pci/devices/{bdf}/aer_dev_{k}", f[f"aer_dev_{k}"], k)
               for k in AER_KINDS if f"aer_dev_{k}" in f}
        # "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:18:00.0"
        path = [part.lower() for part in f.get("device-path", "").strip().split("/") if _BDF.match(part)]
        upstream = tuple(path[:-1]) if path and path[-1] == bdf.lower() else ()
        functions[bdf] = PciFunction(bdf.lower(), f["class"].strip().lower(), (f.get("vendor") or "").strip().lower()
                                     or None, numa if numa is not None and numa >= 0 else None, aer, upstream)
    devices = {}
    for name, f in rdma.items():
        link = f.get("device-link", "")
        tail = link.rstrip("/").rsplit("/", 1)[-1] if link else ""
        devices[name] = RdmaDevice(name, tail.lower() if _BDF.match(tail) else None, f.get("fw_ver") or None)
    return PciSysfs(functions, devices, counters, boot_id)
