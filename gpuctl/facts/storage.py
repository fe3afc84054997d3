"""Storage facts for the nvme_raid role: block devices, signatures, md arrays, mounts.

Each fact is a pyinfra `FactBase` whose `process` calls a pure parser in this module
(text in → `gpuctl.storage_safety` dataclasses out), so the parsers are unit-tested on
recorded outputs without a host. `read_storage_facts()` gathers everything
`gpuctl.storage_safety.plan_raid` needs in one place.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase

from gpuctl.errors import ParseError
from gpuctl.shellcmd import OR_TRUE, QUIET, sh
from gpuctl.storage_safety import BlockDev, MdArray, Signature, StorageFacts, Superblock, is_nvme_namespace

log = logging.getLogger(__name__)

LSBLK_COLUMNS = "NAME,TYPE,SIZE,MOUNTPOINT,FSTYPE,PTTYPE,PKNAME"
_MARK = "### gpuctl-device "


# ---------------------------------------------------------------- parsers (pure)

def parse_lsblk(text: str) -> tuple[BlockDev, ...]:
    """`lsblk -J -b -o NAME,TYPE,SIZE,MOUNTPOINT,FSTYPE,PTTYPE,PKNAME` → flattened rows."""
    try:
        data = json.loads(text)
        roots = data["blockdevices"]
    except (ValueError, KeyError, TypeError) as e:
        raise ParseError(f"lsblk JSON unreadable ({e}): {text[:200]!r}") from e
    out: list[BlockDev] = []

    def walk(rows: list[dict[str, Any]], parent: str | None) -> None:
        for r in rows:
            out.append(BlockDev(
                name=r["name"], type=r.get("type") or "", size=int(r.get("size") or 0),
                mountpoint=r.get("mountpoint"), fstype=r.get("fstype"), pttype=r.get("pttype"),
                pkname=r.get("pkname") or parent,
            ))
            walk(r.get("children") or [], r["name"])

    walk(roots, None)
    return tuple(out)


def parse_signatures(text: str) -> dict[str, tuple[Signature, ...]]:
    """Output of `_signatures_command` (a marker line, then `wipefs -n -J` per device).

    A device whose wipefs failed is left out (the caller treats it as unknown, never blank).
    """
    out: dict[str, tuple[Signature, ...]] = {}
    chunks: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith(_MARK):
            rest = line[len(_MARK):].split()
            if len(rest) == 2 and rest[1] == "failed":
                chunks.pop(rest[0], None)
                current = None
                continue
            current = rest[0]
            chunks[current] = []
        elif current is not None:
            chunks[current].append(line)
    for dev, lines in chunks.items():
        body = "\n".join(lines).strip()
        if not body:
            out[dev] = ()
            continue
        try:
            sigs = json.loads(body)["signatures"]
        except (ValueError, KeyError, TypeError) as e:
            raise ParseError(f"wipefs JSON for {dev} unreadable ({e}): {body[:200]!r}") from e
        out[dev] = tuple(Signature(device=dev, type=s.get("type") or "?", offset=s.get("offset") or "") for s in sigs)
    return out


# md1 : active raid1 nvme1n1[1](F) nvme0n1[0]
_MD_HEAD = re.compile(r"^(?P<name>md\S+)\s*:\s*(?P<state>active|inactive)(?:\s+\([^)]*\))*(?P<rest>.*)$")
# nvme0n1[0](F)
_MD_MEMBER = re.compile(r"^(?P<dev>[^\[\s]+)\[\d+\](?P<flags>(?:\([A-Z]\))*)$")
#       2094080 blocks super 1.2 [2/1] [U_]
_MD_COUNT = re.compile(r"\[(?P<n>\d+)/(?P<m>\d+)\]")


def parse_mdstat(text: str) -> tuple[MdArray, ...]:
    """/proc/mdstat → arrays (state, level, members, failed members, [n/m] counts)."""
    arrays: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _MD_HEAD.match(line.strip())
        if m:
            words = m.group("rest").split()
            level = words[0] if words and m.group("state") == "active" and "[" not in words[0] else None
            members, failed = [], []
            for w in words[1 if level else 0:]:
                mm = _MD_MEMBER.match(w)
                if not mm:
                    continue
                dev = "/dev/" + mm.group("dev")
                members.append(dev)
                if "(F)" in mm.group("flags"):
                    failed.append(dev)
            arrays.append({"device": "/dev/" + m.group("name"), "state": m.group("state"), "level": level,
                           "members": tuple(members), "failed": tuple(failed)})
            continue
        c = _MD_COUNT.search(line)
        if c and arrays and "raid_disks" not in arrays[-1]:
            arrays[-1]["raid_disks"] = int(c.group("n"))
            arrays[-1]["working_disks"] = int(c.group("m"))
    return tuple(MdArray(**a) for a in arrays)


def parse_examine_scan(text: str) -> tuple[Superblock, ...]:
    """`mdadm --examine --scan --verbose` → one Superblock per ARRAY line (devices= on the next line)."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("ARRAY "):
            kv = dict(w.split("=", 1) for w in s.split()[2:] if "=" in w)
            if "UUID" not in kv:
                raise ParseError(f"mdadm --examine line without UUID: {s!r}")
            nd = kv.get("num-devices")
            out.append({"uuid": kv["UUID"], "level": kv.get("level"), "name": kv.get("name"),
                        "num_devices": int(nd) if nd and nd.isdigit() else None, "devices": ()})
        elif s.startswith("devices=") and out:
            out[-1]["devices"] = tuple(d for d in s.split("=", 1)[1].split(",") if d)
    return tuple(Superblock(**o) for o in out)


def parse_detail_brief(text: str) -> dict[str, str]:
    """`mdadm --detail --brief /dev/md0` → {"line": "ARRAY …", "UUID": …}; {} when empty."""
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("ARRAY "):
            kv = dict(w.split("=", 1) for w in s.split()[2:] if "=" in w)
            return {"line": " ".join(s.split()), **kv}
    return {}


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
        parts.append(f"echo '{_MARK}'{q}; wipefs -n -J {q} || echo '{_MARK}'{q}' failed'")
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


class MdDetail(FactBase):
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
