"""Storage facts for the nvme_raid role: block devices, signatures, md arrays, mounts.

Each fact is a pyinfra `FactBase` whose `process` calls a pure parser of
`gpuctl.parsers.storage` (text in → `gpuctl.storage_safety` dataclasses out), so the
parsers are unit-tested on recorded outputs without a host. `read_storage_facts()` gathers everything
`gpuctl.storage_safety.plan_raid` needs in one place.
"""

from __future__ import annotations

import logging
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase

from gpuctl.parsers.storage import (
    LSBLK_COLUMNS,
    SIGNATURE_MARK,
    parse_detail_brief,
    parse_examine_scan,
    parse_lsblk,
    parse_mdstat,
    parse_signatures,
)
from gpuctl.shellcmd import OR_TRUE, QUIET, sh
from gpuctl.storage_safety import BlockDev, MdArray, Signature, StorageFacts, Superblock, is_nvme_namespace

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- pyinfra facts

class LsblkDevices(FactBase):
    """Every block device, flattened (`storage_safety.BlockDev`)."""

    def command(self) -> str:
        return f"lsblk -J -b -o {LSBLK_COLUMNS}"

    def requires_command(self) -> str:
        return "lsblk"

    @staticmethod
    def default() -> tuple[BlockDev, ...]:
        return ()

    def process(self, output: list[str]) -> tuple[BlockDev, ...]:
        return parse_lsblk("\n".join(output))


def _signatures_command(devices: list[str]) -> str:
    parts = []
    for d in devices:
        q = sh(d)
        parts.append(f"echo '{SIGNATURE_MARK}'{q}; wipefs -n -J {q} || echo '{SIGNATURE_MARK}'{q}' failed'")
    return "; ".join(parts) if parts else "true"


class DeviceSignatures(FactBase):
    """Signatures `wipefs` finds on each device: {path: (Signature, …)}; failed probes left out."""

    def command(self, devices: list[str]) -> str:
        return _signatures_command(devices)

    def requires_command(self, devices: list[str]) -> str:
        return "wipefs"

    @staticmethod
    def default() -> dict[str, tuple[Signature, ...]]:
        return {}

    def process(self, output: list[str]) -> dict[str, tuple[Signature, ...]]:
        return parse_signatures("\n".join(output))


class MdStat(FactBase):
    """Arrays in /proc/mdstat (`storage_safety.MdArray`); () when md is not loaded."""

    def command(self) -> str:
        return "cat /proc/mdstat 2>/dev/null || true"

    @staticmethod
    def default() -> tuple[MdArray, ...]:
        return ()

    def process(self, output: list[str]) -> tuple[MdArray, ...]:
        return parse_mdstat("\n".join(output))


class MdSuperblocks(FactBase):
    """Arrays whose superblocks `mdadm --examine --scan --verbose` finds on any device."""

    def command(self) -> str:
        return "mdadm --examine --scan --verbose 2>/dev/null || true"

    def requires_command(self) -> str:
        return "mdadm"

    @staticmethod
    def default() -> tuple[Superblock, ...]:
        return ()

    def process(self, output: list[str]) -> tuple[Superblock, ...]:
        return parse_examine_scan("\n".join(output))


class MdDetailBrief(FactBase):
    """`mdadm --detail --brief ARRAY` parsed; {} when the array is not running."""

    def command(self, array: str) -> str:
        return sh("mdadm", "--detail", "--brief", array) + QUIET + OR_TRUE

    def requires_command(self, array: str) -> str:
        return "mdadm"

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_detail_brief("\n".join(output))


class RootSource(FactBase):
    """The device mounted at / (`findmnt -n -o SOURCE /`)."""

    def command(self) -> str:
        return "findmnt -n -o SOURCE /"

    @staticmethod
    def default() -> str:
        return ""

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""


class MountSource(FactBase):
    """What is mounted at PATH: {"source", "fstype"}; {} when nothing is."""

    def command(self, path: str) -> str:
        return sh("findmnt", "-n", "-o", "SOURCE,FSTYPE", "--mountpoint", path) + OR_TRUE

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        parts = output[0].split() if output else []
        return {"source": parts[0], "fstype": parts[1] if len(parts) > 1 else ""} if parts else {}


class FsUuid(FactBase):
    """Filesystem UUID on DEVICE (`blkid -s UUID -o value`); "" when none."""

    def command(self, device: str) -> str:
        return sh("blkid", "-s", "UUID", "-o", "value", device) + QUIET + OR_TRUE

    @staticmethod
    def default() -> str:
        return ""

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""


class TextFile(FactBase):
    """A file's lines; () when the file does not exist."""

    def command(self, path: str) -> str:
        return sh("cat", path) + QUIET + OR_TRUE

    @staticmethod
    def default() -> tuple[str, ...]:
        return ()

    def process(self, output: list[str]) -> tuple[str, ...]:
        return tuple(output)


class ResolvedPaths(FactBase):
    """`readlink -f` of each path (for /dev/disk/by-id/… in storage.raid.devices)."""

    def command(self, paths: list[str]) -> str:
        return "; ".join(f"printf '%s %s\\n' {sh(p)} \"$(readlink -f {sh(p)})\"" for p in paths) \
            or "true"

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        out = {}
        for line in output:
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out


def read_storage_facts(explicit: list[str] | None = None, sudo: bool = False) -> StorageFacts:
    """Read everything `plan_raid` needs from the current host (prepare time)."""
    kw: dict[str, Any] = {"_sudo": True} if sudo else {}
    block = host.get_fact(LsblkDevices, **kw)
    resolved = host.get_fact(ResolvedPaths, paths=list(explicit), **kw) if explicit else {}
    probe = sorted({b.path for b in block if is_nvme_namespace(b)} | set(resolved.values()) | set(explicit or ()))
    probe = [p for p in probe if not p.startswith("/dev/disk/")]
    return StorageFacts(
        block=block,
        signatures=host.get_fact(DeviceSignatures, devices=probe, **kw),
        arrays=host.get_fact(MdStat, **kw),
        superblocks=host.get_fact(MdSuperblocks, **kw),
        root_source=host.get_fact(RootSource, **kw),
        resolved=resolved,
    )


class KernelModuleVersion(FactBase):
    """`modinfo -k $(uname -r) -F version MODULE`: the version built for the running kernel; "" when none."""

    def command(self, module: str) -> str:
        return f"modinfo -k \"$(uname -r)\" -F version {sh(module)} 2>/dev/null || true"

    @staticmethod
    def default() -> str:
        return ""

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""
