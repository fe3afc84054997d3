"""RAID data safety: the pure decision between assembling, creating, refusing and reporting.

`plan_raid(raid, facts, allow_wipe)` takes what the host looks like (block devices,
on-disk signatures, active md arrays, md superblocks, the device holding `/`) and the
NodeSpec's RAID section, and returns a `RaidPlan`:

- ``present``   an array over the wanted devices is active: use it as it is;
- ``assemble``  md superblocks of one complete array over the wanted devices exist: assemble it;
- ``create``    every target device is blank (or listed under ``storage.raid.wipe`` and the
                command has ``--allow-wipe``): create the array and make the filesystem;
- ``refuse``    anything else that could lose data; ``reasons`` name the device and signature;
- ``degraded``  the array exists but misses members: reported, never repaired by re-creating.

Rules that hold whatever the inventory says: the OS disk (the disk under ``/``, ``/boot``,
``/boot/efi`` or swap) is never a target; a mounted device or a member of an active array is
never wiped; an existing array is never re-created; a filesystem is never re-made (the role
runs mkfs only on an array it has just created and re-checks that it carries no signature).

No I/O here: `gpuctl/facts/storage.py` reads the host, the nvme_raid role executes the plan.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from gpuctl.spec import RaidSpec

log = logging.getLogger(__name__)

Action = Literal["present", "assemble", "create", "refuse", "degraded"]

#: Minimum member counts per md level (RAID10 also needs an even count).
MIN_MEMBERS: dict[int, int] = {0: 1, 1: 2, 10: 4}
#: Mount points that mark the disk holding them as the OS disk.
OS_MOUNTS: frozenset[str] = frozenset({"/", "/boot", "/boot/efi", "/usr", "/var", "[SWAP]"})


@dataclass(frozen=True)
class BlockDev:
    """One `lsblk` row (children flattened; a device with several parents appears once per parent)."""

    name: str
    type: str
    size: int = 0
    mountpoint: str | None = None
    fstype: str | None = None
    pttype: str | None = None
    pkname: str | None = None

    @property
    def path(self) -> str:
        return f"/dev/{self.name}"


@dataclass(frozen=True)
class Signature:
    """One signature `wipefs` reports on a device."""

    device: str  # /dev/nvme0n1
    type: str  # xfs, ext4, gpt, dos, linux_raid_member, LVM2_member, …
    offset: str = ""

    def describe(self) -> str:
        return f"{self.type} at offset {self.offset}" if self.offset else self.type


@dataclass(frozen=True)
class MdArray:
    """One array in /proc/mdstat."""

    device: str  # /dev/md0
    state: str  # active / inactive
    level: str | None  # raid0 / raid1 / raid10; None when inactive
    members: tuple[str, ...]  # /dev/nvme0n1, … (failed ones included)
    failed: tuple[str, ...] = ()
    raid_disks: int | None = None  # the [n/m] "n"
    working_disks: int | None = None  # the [n/m] "m"

    @property
    def degraded(self) -> bool:
        if self.state != "active" or self.failed:
            return True
        return self.raid_disks is not None and self.working_disks is not None and self.working_disks < self.raid_disks


@dataclass(frozen=True)
class Superblock:
    """One array found by `mdadm --examine --scan --verbose` (superblocks on the members)."""

    uuid: str
    level: str | None
    num_devices: int | None
    devices: tuple[str, ...]
    name: str | None = None


@dataclass(frozen=True)
class StorageFacts:
    """Everything the decision needs, read from the host before anything is changed."""

    block: tuple[BlockDev, ...]
    signatures: dict[str, tuple[Signature, ...]]  # by /dev path; a device absent here was not probed
    arrays: tuple[MdArray, ...] = ()
    superblocks: tuple[Superblock, ...] = ()
    root_source: str = ""  # `findmnt -n -o SOURCE /`
    resolved: dict[str, str] = field(default_factory=dict)  # inventory path (by-id…) -> /dev/nvmeXnY


@dataclass(frozen=True)
class RaidPlan:
    action: Action
    array: str  # the md device the plan acts on (/dev/md0)
    level: int
    devices: tuple[str, ...] = ()  # resolved /dev paths of the members
    wipe: tuple[str, ...] = ()  # members whose signatures are erased before create
    uuid: str | None = None  # array UUID for assemble
    reasons: tuple[str, ...] = ()  # why refused / degraded
    notes: tuple[str, ...] = ()  # informative: excluded devices, member count vs SKU

    @property
    def changes(self) -> bool:
        return self.action in ("assemble", "create")


def md_level(level: int) -> str:
    return f"raid{level}"


def os_disks(facts: StorageFacts) -> frozenset[str]:
    """Names of the disks under /, /boot, /boot/efi, /usr, /var or swap (walking PKNAME up).

    The device `findmnt` names for `/` counts even when lsblk shows no mountpoint for it.
    """
    parents: dict[str, set[str]] = {}
    types: dict[str, str] = {}
    for b in facts.block:
        types[b.name] = b.type
        if b.pkname:
            parents.setdefault(b.name, set()).add(b.pkname)
    start = {b.name for b in facts.block if b.mountpoint in OS_MOUNTS}
    root = _root_name(facts)
    if root:
        start.add(root)
    seen: set[str] = set()
    todo = list(start)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(parents.get(n, ()))
    return frozenset(n for n in seen if types.get(n) == "disk" or n not in parents)


def _root_name(facts: StorageFacts) -> str:
    """The lsblk name of the device `findmnt` shows for / (/dev/mapper/vg-root -> vg-root)."""
    return facts.root_source.removeprefix("/dev/").removeprefix("mapper/")


def _ancestors(facts: StorageFacts, name: str) -> set[str]:
    parents: dict[str, set[str]] = {}
    for b in facts.block:
        if b.pkname:
            parents.setdefault(b.name, set()).add(b.pkname)
    out: set[str] = set()
    todo = [name]
    while todo:
        n = todo.pop()
        for p in parents.get(n, ()):
            if p not in out:
                out.add(p)
                todo.append(p)
    return out


def _children(facts: StorageFacts, name: str) -> list[BlockDev]:
    """Every device below `name` (partitions, md, lvm …), recursively."""
    out: list[BlockDev] = []
    todo = [name]
    seen: set[tuple[str, str]] = set()
    while todo:
        n = todo.pop()
        for b in facts.block:
            if b.pkname == n and (b.name, n) not in seen:
                seen.add((b.name, n))
                out.append(b)
                todo.append(b.name)
    return out


def _row(facts: StorageFacts, name: str) -> BlockDev | None:
    for b in facts.block:
        if b.name == name:
            return b
    return None


def _mounts_under(facts: StorageFacts, name: str) -> list[str]:
    rows = [b for b in facts.block if b.name == name] + _children(facts, name)
    return sorted({f"{b.path} at {b.mountpoint}" for b in rows if b.mountpoint})


def _array_of(facts: StorageFacts, dev: str) -> MdArray | None:
    for a in facts.arrays:
        if dev in a.members:
            return a
    return None


def _what_is_on(facts: StorageFacts, dev: str) -> list[str]:
    """Human descriptions of everything that marks `dev` as in use (empty = blank)."""
    name = dev.removeprefix("/dev/")
    found = [s.describe() for s in facts.signatures.get(dev, ())]
    row = _row(facts, name)
    if row is not None:
        if row.pttype and not any(row.pttype in f for f in found):
            found.append(f"{row.pttype} partition table")
        if row.fstype and not any(row.fstype in f for f in found):
            found.append(row.fstype)
    kids = [b.name for b in _children(facts, name) if b.type == "part"]
    if kids:
        found.append("partitions " + ", ".join(sorted(set(kids))))
    return found


def is_nvme_namespace(b: BlockDev) -> bool:
    return b.type == "disk" and b.name.startswith("nvme") and "n" in b.name[4:] and "p" not in b.name[4:]


def _resolve(raid: RaidSpec, facts: StorageFacts) -> tuple[list[str], list[str]]:
    """Explicit inventory paths -> /dev paths; problems for the ones that do not exist."""
    assert raid.devices != "auto"
    out: list[str] = []
    problems: list[str] = []
    known = {b.path for b in facts.block}
    for d in raid.devices:
        real = facts.resolved.get(d, d)
        if real not in known:
            problems.append(f"{d}: no such block device on this host" + (f" (resolves to {real})" if real != d else ""))
        out.append(real)
    return out, problems


def _wipe_set(raid: RaidSpec, facts: StorageFacts) -> set[str]:
    return {facts.resolved.get(w, w) for w in raid.wipe} | set(raid.wipe)


def plan_raid(raid: RaidSpec, facts: StorageFacts, allow_wipe: bool) -> RaidPlan:
    """Decide what the nvme_raid role may do on this host. Pure: facts in, plan out."""
    array = f"/dev/{raid.name}"
    level = md_level(raid.level)
    osd = os_disks(facts)
    notes: list[str] = []

    def refuse(reasons: list[str], devices: tuple[str, ...] = ()) -> RaidPlan:
        return RaidPlan("refuse", array, raid.level, devices=devices, reasons=tuple(reasons), notes=tuple(notes))

    root = _root_name(facts)
    if not osd or not root or _row(facts, root) is None:
        return refuse([f"cannot tell the OS disk: / is on '{facts.root_source or '?'}', which lsblk does not show; "
                       "refusing to touch any disk"])

    explicit: list[str] | None = None
    if raid.devices != "auto":
        explicit, problems = _resolve(raid, facts)
        os_hits = [d for d in explicit if d.removeprefix("/dev/") in osd
                   or (_ancestors(facts, d.removeprefix("/dev/")) & osd)]
        problems += [f"{d}: is the OS disk (holds {facts.root_source or '/'}); never a RAID member, "
                     "whatever storage.raid.devices or storage.raid.wipe say" for d in os_hits]
        if problems:
            return refuse(problems, tuple(explicit))

    # 1. an active (or inactive) array that is ours
    def usable_member(dev: str) -> bool:
        n = dev.removeprefix("/dev/")
        return n not in osd and not (_ancestors(facts, n) & osd)

    mine: list[MdArray] = []
    for a in facts.arrays:
        if explicit is not None:
            if a.device == array or set(a.members) & set(explicit):
                mine.append(a)
        elif a.device == array or (a.members and all(usable_member(m) for m in a.members)
                                     and all(m.startswith("/dev/nvme") for m in a.members)):
            mine.append(a)
    if len(mine) > 1:
        return refuse([f"several md arrays could be the one wanted: {', '.join(a.device for a in mine)}; "
                       "name the devices explicitly"])
    if mine:
        a = mine[0]
        members = ", ".join(a.members)
        if any(not usable_member(m) for m in a.members):
            return refuse([f"{a.device} includes the OS disk ({members}); not used"])
        if a.state != "active":
            return RaidPlan("degraded", a.device, raid.level, devices=a.members, notes=tuple(notes), reasons=(
                f"{a.device} is {a.state} over {members}: not started, not re-created; inspect it "
                f"(mdadm --detail {a.device}) and assemble or stop it by hand",))
        if explicit is not None and set(a.members) != set(explicit):
            return refuse([f"{a.device} is active over {members}; the inventory lists {', '.join(explicit)}: "
                           "gpuctl never reshapes or re-creates an existing array"], tuple(explicit))
        if a.level and a.level != level:
            return refuse([f"{a.device} is an active {a.level} over {members}; the inventory wants {level}: "
                           "gpuctl never re-creates an existing array"], a.members)
        if a.degraded:
            failed = f"; failed: {', '.join(a.failed)}" if a.failed else ""
            return RaidPlan("degraded", a.device, raid.level, devices=a.members, notes=tuple(notes), reasons=(
                f"{a.device} ({a.level}) is degraded: {a.working_disks}/{a.raid_disks} members working over "
                f"{members}{failed}; not repaired, not re-created — replace the member and add it by hand",))
        if a.device != array:
            notes.append(f"the array is active as {a.device}, not {array}; used as it is")
        return RaidPlan("present", a.device, raid.level, devices=a.members, notes=tuple(notes))

    # 2. superblocks of an array that is not running
    cands: list[Superblock] = []
    for sb in facts.superblocks:
        if explicit is not None:
            if set(sb.devices) == set(explicit):
                cands.append(sb)
        elif sb.devices and all(usable_member(d) and d.startswith("/dev/nvme") for d in sb.devices):
            cands.append(sb)
    if len(cands) > 1:
        return refuse(["md superblocks of several arrays found on the NVMe devices: " + "; ".join(
            f"UUID {sb.uuid} over {', '.join(sb.devices)}" for sb in cands) + "; name the devices explicitly"])
    if cands:
        sb = cands[0]
        if sb.level and sb.level != level:
            return refuse([f"{', '.join(sb.devices)} hold a {sb.level} array (UUID {sb.uuid}); the inventory wants "
                           f"{level}: gpuctl never re-creates an existing array"], sb.devices)
        if sb.num_devices is not None and len(sb.devices) < sb.num_devices:
            return RaidPlan("degraded", array, raid.level, devices=sb.devices, uuid=sb.uuid, notes=tuple(notes),
                            reasons=(f"array UUID {sb.uuid} has {len(sb.devices)} of {sb.num_devices} members "
                                     f"({', '.join(sb.devices)}): not assembled degraded, not re-created",))
        return RaidPlan("assemble", array, raid.level, devices=tuple(sorted(sb.devices)), uuid=sb.uuid,
                        notes=tuple(notes))

    # 3. create: every target must be blank, or explicitly allowed to be wiped
    wipe_ok = _wipe_set(raid, facts)
    reasons: list[str] = []
    wipe: list[str] = []
    if explicit is None:
        targets: list[str] = []
        for b in sorted(facts.block, key=lambda b: b.name):
            if not is_nvme_namespace(b) or b.path in targets:
                continue
            if b.name in osd:
                notes.append(f"{b.path}: OS disk, not a candidate")
                continue
            if b.path not in facts.signatures:
                notes.append(f"{b.path}: not probed by wipefs, not a candidate")
                continue
            used = _what_is_on(facts, b.path) + _mounts_under(facts, b.name)
            if (arr := _array_of(facts, b.path)) is not None:
                used.append(f"member of {arr.device}")
            if used:
                notes.append(f"{b.path}: carries {', '.join(used)}; not a candidate (devices: auto takes blank "
                             "namespaces only)")
                continue
            targets.append(b.path)
        need = MIN_MEMBERS[raid.level]
        if raid.level == 10 and len(targets) % 2:
            targets = targets[:-1]
        if len(targets) < need:
            return refuse([f"devices: auto found {len(targets)} blank NVMe namespace(s); RAID{raid.level} needs "
                           f"{need}", *notes])
    else:
        targets = explicit
        for d in targets:
            name = d.removeprefix("/dev/")
            mounted = _mounts_under(facts, name)
            if mounted:
                reasons.append(f"{d}: mounted ({', '.join(mounted)}); never wiped")
                continue
            arr = _array_of(facts, d)
            if arr is not None:
                reasons.append(f"{d}: member of active array {arr.device}; never wiped")
                continue
            if d not in facts.signatures:
                reasons.append(f"{d}: could not be probed with wipefs; refusing to use a device of unknown content")
                continue
            used = _what_is_on(facts, d)
            if not used:
                continue
            listed = d in wipe_ok
            if listed and allow_wipe:
                wipe.append(d)
                continue
            why = ("listed under storage.raid.wipe but the command lacks --allow-wipe" if listed else
                   "not listed under storage.raid.wipe" + (" (--allow-wipe alone is not enough)" if allow_wipe else ""))
            reasons.append(f"{d}: carries {', '.join(used)}; {why}")
        need = MIN_MEMBERS[raid.level]
        if len(targets) < need or (raid.level == 10 and len(targets) % 2):
            reasons.append(f"RAID{raid.level} needs at least {need} devices (an even count for RAID10); "
                           f"{len(targets)} listed")
    if reasons:
        return refuse(reasons, tuple(targets))
    if raid.expected_members and len(targets) != raid.expected_members:
        notes.append(f"{len(targets)} members; the SKU/inventory expects {raid.expected_members}")
    return RaidPlan("create", array, raid.level, devices=tuple(targets), wipe=tuple(wipe), notes=tuple(notes))


def describe(plan: RaidPlan) -> str:
    """One paragraph for logs and failure messages."""
    head = {
        "present": f"{plan.array} is active over {', '.join(plan.devices)}",
        "assemble": f"assemble {plan.array} (UUID {plan.uuid}) from {', '.join(plan.devices)}",
        "create": f"create {plan.array} RAID{plan.level} over {', '.join(plan.devices)}"
                  + (f", wiping {', '.join(plan.wipe)}" if plan.wipe else ""),
        "refuse": f"refusing to build {plan.array}",
        "degraded": f"{plan.array} is degraded",
    }[plan.action]
    lines = [head] + [f"  {r}" for r in plan.reasons] + [f"  note: {n}" for n in plan.notes]
    return "\n".join(lines)
