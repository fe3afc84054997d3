"""Block devices and md arrays: lsblk, wipefs, /proc/mdstat, mdadm --examine --scan,
mdadm --detail (full, for verify; --brief, for provisioning), /proc/mounts.

Pure functions: text in, data out (`gpuctl.storage_safety` types for what `plan_raid`
judges), shared by the nvme_raid role's facts (`gpuctl.facts.storage`) and verify's probe.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.storage_safety import BlockDev, MdArray, Signature, Superblock

LSBLK_COLUMNS = "NAME,TYPE,SIZE,MOUNTPOINT,FSTYPE,PTTYPE,PKNAME"
SIGNATURE_MARK = "### gpuctl-device "


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
        if line.startswith(SIGNATURE_MARK):
            rest = line[len(SIGNATURE_MARK):].split()
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


# ---------------------------------------------------------------- mdadm --detail

@dataclass(frozen=True)
class MdMember:
    raid_device: int | None  # slot; None for spares / faulty outside the array
    state: str  # "active sync", "removed", "faulty"
    device: str | None


@dataclass(frozen=True)
class MdDetail:
    device: str
    level: str
    state: str
    raid_devices: int
    active_devices: int | None
    working_devices: int | None
    failed_devices: int | None
    members: tuple[MdMember, ...]

    def slot(self, n: int) -> MdMember | None:
        return next((m for m in self.members if m.raid_device == n), None)


# "           State : clean "  /  "    Raid Devices : 4"
_MD_KV = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*:\s*(.*?)\s*$")
# "       0     259        1        0      active sync   /dev/nvme0n1"
# "       -       0        0        1      removed"
_MD_ROW = re.compile(r"^\s*(\d+|-)\s+(\d+)\s+(\d+)\s+(\d+|-)\s+(.*?)\s*(/dev/\S+)?\s*$")


def parse_mdadm_detail(text: str) -> MdDetail:
    """`mdadm --detail /dev/mdX`."""
    lines = text.splitlines()
    if not lines or not lines[0].strip().endswith(":") or not lines[0].startswith("/dev/"):
        first = lines[0] if lines else ""
        raise ParseError(f"mdadm --detail: expected '/dev/mdX:' first, got {first!r}")
    kv: dict[str, str] = {}
    members = []
    in_table = False
    for line in lines[1:]:
        if re.match(r"^\s*Number\s+Major\s+Minor\s+RaidDevice\s+State", line):
            in_table = True
            continue
        if in_table:
            if m := _MD_ROW.match(line):
                members.append(MdMember(None if m.group(4) == "-" else int(m.group(4)), m.group(5).strip(),
                                        m.group(6)))
            continue
        if m := _MD_KV.match(line):
            kv.setdefault(m.group(1), m.group(2))

    def num(key: str) -> int | None:
        v = kv.get(key)
        return int(v) if v is not None and v.isdigit() else None

    if "Raid Devices" not in kv or "State" not in kv:
        raise ParseError("mdadm --detail: no 'Raid Devices' or 'State' line (truncated output?)")
    return MdDetail(lines[0].strip().rstrip(":"), kv.get("Raid Level", ""), kv["State"], int(kv["Raid Devices"]),
                    num("Active Devices"), num("Working Devices"), num("Failed Devices"), tuple(members))


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    fstype: str
    options: str


def parse_proc_mounts(text: str) -> dict[str, Mount]:
    """/proc/mounts → mount point → mount (the last mount on a point wins, as the kernel shows it)."""
    out = {}
    for line in text.splitlines():
        # "/dev/md0 /raid xfs rw,relatime,attr2,inode64,sunit=1024,swidth=4096,noquota 0 0"
        parts = line.split()
        if len(parts) >= 4:
            target = parts[1].replace("\\040", " ")
            out[target] = Mount(parts[0], target, parts[2], parts[3])
    return out

