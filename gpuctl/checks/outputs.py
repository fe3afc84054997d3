"""Parsers for the small system outputs the checks read that `gpuctl.parsers` does not cover.

`gpuctl.parsers` owns the GPU and fabric tools (nvidia-smi, topo, ibstat, Xid); this
module owns plain Linux outputs: a `tail -n +1 FILE...` bundle, dpkg/rpm package lists,
`systemctl show`, /proc/modules (tolerant of '-' use counts), /proc/meminfo, /proc/mounts,
`mdadm --detail`, `ip -j -d addr`, `rdma -j link`, `ibv_devinfo`, RoCE GID tables and
KEY=VALUE files. Pure functions: text in, plain data out; unusable input raises ParseError.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gpuctl.errors import ParseError

# ---------------------------------------------------------------- tail -n +1 bundle

# "==> /proc/modules <=="
_TAIL_HEADER = re.compile(r"^==> (.+) <==$")
# "tail: cannot open '/etc/nccl.conf' for reading: No such file or directory"
_TAIL_MISSING = re.compile(r"^tail: cannot open '(.+)' for reading: (.+)$")


def parse_tail_bundle(stdout: str, stderr: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """Split `tail -n +1 A B C` output into {path: text} and {path: error} (unreadable files)."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.split("\n"):
        m = _TAIL_HEADER.match(line)
        if m:
            current = files.setdefault(m.group(1), [])
            continue
        if current is not None:
            current.append(line)
    out = {}
    for path, lines in files.items():
        # tail separates files with one blank line; the last file has none.
        text = "\n".join(lines)
        out[path] = text[:-1] if text.endswith("\n\n") else text.rstrip("\n") + ("\n" if text.strip() else "")
    errors = {m.group(1): m.group(2) for line in stderr.splitlines() if (m := _TAIL_MISSING.match(line.strip()))}
    return out, errors


# ---------------------------------------------------------------- packages

@dataclass(frozen=True)
class InstalledPackage:
    name: str
    version: str
    installed: bool
    status: str


def parse_dpkg_query(text: str) -> dict[str, InstalledPackage]:
    """`dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'` → name → package.

    Status "ii " is installed; "rc " (removed, config left) and "hi " (held, installed) too."""
    out = {}
    for line in text.splitlines():
        # "libnccl2\t2.27.7-1+cuda13.0\tii "
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0]:
            continue
        name, version, status = parts[0].split(":")[0], parts[1], parts[2].strip()
        out[name] = InstalledPackage(name, version, len(status) >= 2 and status[1] == "i", status)
    if not out and text.strip():
        raise ParseError(f"dpkg-query: no 'name<TAB>version<TAB>status' lines in {text.splitlines()[0]!r}")
    return out


def parse_rpm_query(text: str) -> dict[str, InstalledPackage]:
    """`rpm -qa --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'` → name → package."""
    out = {}
    for line in text.splitlines():
        # "nvidia-driver\t3:570.133.20-1.el9"
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0]:
            version = parts[1].strip()
            version = version[2:] if version.startswith("0:") else version
            out[parts[0]] = InstalledPackage(parts[0], version, True, "installed")
    return out


def parse_holds(text: str, manager: str) -> set[str]:
    """`apt-mark showhold` (one name a line) or `dnf versionlock list` ('name-1:2.3-1.el9.*')."""
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("Last metadata", "#")):
            continue
        if manager == "apt":
            names.add(line.split(":")[0])
        else:
            # "nvidia-driver-3:570.133.20-1.el9.*" → "nvidia-driver"
            m = re.match(r"^(.+?)-(\d+:)?\d[^-]*-[^-]+$", line)
            names.add(m.group(1) if m else line)
    return names


# ---------------------------------------------------------------- systemctl show

@dataclass(frozen=True)
class UnitState:
    name: str
    load: str
    active: str
    sub: str
    unit_file: str


def parse_systemctl_show(text: str) -> dict[str, UnitState]:
    """`systemctl show --property=Id,LoadState,ActiveState,SubState,UnitFileState UNIT...`
    (blocks separated by a blank line) → unit name without '.service' → state."""
    out = {}
    for block in re.split(r"\n\s*\n", text.strip()):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "Id" not in kv:
            continue
        name = kv["Id"].removesuffix(".service")
        out[name] = UnitState(name, kv.get("LoadState", ""), kv.get("ActiveState", ""), kv.get("SubState", ""),
                              kv.get("UnitFileState", ""))
    return out


# ---------------------------------------------------------------- /proc/modules

@dataclass(frozen=True)
class LoadedModule:
    name: str
    size: int
    use_count: int | None  # None where the kernel prints '-'
    state: str


def parse_proc_modules(text: str) -> dict[str, LoadedModule]:
    """/proc/modules → name → module. A '-' use count (kernels without module unloading,
    and `nvidia 14299136 - - Live 0x0000000000000000 (O)` on an H200 machine) is None."""
    out = {}
    for line in text.splitlines():
        # "nvidia_uvm 2076672 0 - Live 0xffffffffc0a00000 (PO)"
        parts = line.split()
        if len(parts) < 5:
            continue
        name, size, used, _deps, state = parts[:5]
        out[name] = LoadedModule(name, int(size) if size.isdigit() else 0, int(used) if used.isdigit() else None,
                                 state)
    if not out and text.strip():
        raise ParseError(f"/proc/modules: no module lines in {text.splitlines()[0]!r}")
    return out


# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16-I3-B03-4-3)"
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024"
_NVRM = re.compile(r"NVRM version: .*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\s")


def parse_proc_driver_version(text: str) -> str | None:
    """The kernel module version from /proc/driver/nvidia/version, or None."""
    m = _NVRM.search(text + " ")
    return m.group(1) if m else None


# ---------------------------------------------------------------- /proc/meminfo, /proc/mounts, /proc/cmdline

def parse_meminfo_kib(text: str, key: str = "MemTotal") -> int:
    """'MemTotal:       24570312 kB' → 24570312."""
    m = re.search(rf"^{re.escape(key)}:\s+(\d+)\s*kB", text, re.M)
    if not m:
        raise ParseError(f"/proc/meminfo: no {key} line")
    return int(m.group(1))


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


# ---------------------------------------------------------------- ip -j -d addr

@dataclass(frozen=True)
class Interface:
    name: str
    operstate: str
    flags: tuple[str, ...]
    mtu: int | None
    kind: str | None  # "vlan" for 802.1Q
    vlan_id: int | None
    parent: str | None
    addresses: tuple[str, ...]  # "10.100.0.11/24"

    @property
    def up(self) -> bool:
        return "UP" in self.flags and "LOWER_UP" in self.flags


def parse_ip_addr_json(text: str) -> dict[str, Interface]:
    """`ip -j -d addr show` → name → interface."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"ip -j addr: not JSON ({exc})") from None
    out = {}
    for item in data:
        if not isinstance(item, dict) or "ifname" not in item:
            continue
        info = item.get("linkinfo") or {}
        data_ = info.get("info_data") or {}
        addrs = tuple(f"{a['local']}/{a['prefixlen']}" for a in item.get("addr_info", [])
                      if a.get("family") == "inet" and "local" in a)
        out[item["ifname"]] = Interface(
            item["ifname"], item.get("operstate", ""), tuple(item.get("flags", [])), item.get("mtu"),
            info.get("info_kind"), data_.get("id"), item.get("link"), addrs)
    return out


# ---------------------------------------------------------------- rdma link / ibv_devinfo / GIDs

@dataclass(frozen=True)
class RdmaLink:
    device: str
    port: int
    state: str  # ACTIVE / DOWN
    physical_state: str  # LINK_UP / DISABLED
    netdev: str | None


def parse_rdma_link_json(text: str) -> dict[str, RdmaLink]:
    """`rdma -j link show` → 'rxe0/1' → link."""
    try:
        data = json.loads(text or "[]")
    except json.JSONDecodeError as exc:
        raise ParseError(f"rdma -j link: not JSON ({exc})") from None
    out = {}
    for item in data:
        # {"ifindex":1,"ifname":"rxe0","port":1,"state":"ACTIVE","physical_state":"LINK_UP","netdev":"eth1"}
        link = RdmaLink(item["ifname"], int(item.get("port", 1)), item.get("state", ""),
                        item.get("physical_state", ""), item.get("netdev"))
        out[f"{link.device}/{link.port}"] = link
    return out


@dataclass(frozen=True)
class VerbsPort:
    device: str
    port: int
    state: str  # "PORT_ACTIVE (4)" → "PORT_ACTIVE"
    link_layer: str
    active_mtu: str | None


# "hca_id:	rxe0"
_HCA = re.compile(r"^hca_id:\s*(\S+)")
# "		port:	1"
_VPORT = re.compile(r"^\s+port:\s*(\d+)")
# "			state:			PORT_ACTIVE (4)"
_VKV = re.compile(r"^\s+(state|link_layer|active_mtu):\s*(\S+)")


def parse_ibv_devinfo(text: str) -> dict[str, VerbsPort]:
    """`ibv_devinfo` → 'rxe0/1' → port."""
    out: dict[str, VerbsPort] = {}
    dev, port, kv = None, None, {}

    def flush() -> None:
        if dev is not None and port is not None:
            out[f"{dev}/{port}"] = VerbsPort(dev, port, kv.get("state", ""), kv.get("link_layer", ""),
                                             kv.get("active_mtu"))

    for line in text.splitlines():
        if m := _HCA.match(line):
            flush()
            dev, port, kv = m.group(1), None, {}
        elif m := _VPORT.match(line):
            flush()
            port, kv = int(m.group(1)), {}
        elif port is not None and (m := _VKV.match(line)):
            kv[m.group(1)] = m.group(2)
    flush()
    return out


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str  # "RoCE v2", "IB/RoCE v1", "" when unset

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID (0000:…:ffff:c0a8:320b → 192.168.50.11)."""
        groups = self.gid.split(":")
        if len(groups) != 8 or groups[:5] != ["0000"] * 5 or groups[5] != "ffff":
            return None
        hi, lo = int(groups[6], 16), int(groups[7], 16)
        return f"{hi >> 8}.{hi & 255}.{lo >> 8}.{lo & 255}"


_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def parse_gid_bundle(files: dict[str, str]) -> dict[str, list[Gid]]:
    """A tail bundle of /sys/class/infiniband/<dev>/ports/<p>/{gids,gid_attrs/types}/<n> →
    'dev/p' → the set (non-zero) GIDs with their types."""
    gids: dict[tuple[str, int, int], str] = {}
    types: dict[tuple[str, int, int], str] = {}
    for path, text in files.items():
        # "/sys/class/infiniband/rxe0/ports/1/gids/1" / ".../gid_attrs/types/1"
        m = re.match(r"^/sys/class/infiniband/([^/]+)/ports/(\d+)/(gids|gid_attrs/types)/(\d+)$", path)
        if not m:
            continue
        key = (m.group(1), int(m.group(2)), int(m.group(4)))
        (gids if m.group(3) == "gids" else types)[key] = text.strip()
    out: dict[str, list[Gid]] = {}
    for (dev, port, idx), gid in sorted(gids.items()):
        if gid and gid != _ZERO_GID:
            out.setdefault(f"{dev}/{port}", []).append(Gid(idx, gid, types.get((dev, port, idx), "")))
    return out


# ---------------------------------------------------------------- KEY=VALUE files

def parse_key_values(text: str) -> dict[str, str]:
    """nccl.conf-style 'KEY=VALUE' lines; '#' comments and blank lines ignored."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def parse_modprobe_blacklist(files: dict[str, str]) -> dict[str, str]:
    """Modules named by `blacklist NAME` in modprobe.d files → the file that names them."""
    out = {}
    for path, text in files.items():
        for line in text.splitlines():
            parts = line.split("#", 1)[0].split()
            if len(parts) == 2 and parts[0] == "blacklist":
                out.setdefault(parts[1], path)
    return out
