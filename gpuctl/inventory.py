"""The inventory: one YAML file describing a cluster, validated into a typed model.

`load_inventory(path)` parses the file (remembering lines), validates the schema
(unknown keys are errors, with "did you mean"), then runs the semantic rules —
unique names and addresses, addresses inside their CIDRs, VLAN ids, racks and their
power budget, RAID and Lustre settings, fabric rates, the package cache host, the SKU
and matrix named — and raises one `InputError` listing every problem with
`file:line: field: message`.
Warnings (e.g. CPU memory below the SKU's minimum) are returned, not raised.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
import urllib.parse
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuctl.boundary import catalog_name_problem, length_problem, mount_problem, mounts_overlap
from gpuctl.catalog import THRESHOLD_NAMES, Figure, Sku, Threshold, load_health, load_sku
from gpuctl.errors import InputError
from gpuctl.knobs import FLAG_KNOBS, MountOptions, knob_problems
from gpuctl.matrix import LoadedMatrix, load_matrix
from gpuctl.paths import roles_dir
from gpuctl.pubkey import parse_public_key
from gpuctl.validation import Problem, validate_collecting
from gpuctl.yamlsrc import FieldPath, SourceMap, load_yaml_text, parse_yaml

OS_NAMES: dict[str, str] = {
    "ubuntu-22.04": "ubuntu2204",
    "ubuntu-24.04": "ubuntu2404",
    "debian-12": "debian12",
    "rocky-9": "rhel9",
    "rhel-9": "rhel9",
}

# Every pattern here is used with fullmatch (re.fullmatch / pydantic's anchored patterns):
# `re.match(...$)` also matched before a final newline (issue 17). No control character
# reaches these checks at all: gpuctl.boundary refuses them in every string first.
_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
_IFNAME = r"^[A-Za-z0-9_.:-]{1,15}$"
# shell safety (issue 12): values that reach commands on the nodes
_IFNAME_RE = re.compile(r"(?!\.{1,2}\Z)[A-Za-z0-9_.:-]{1,15}")  # Linux IFNAMSIZ 16 incl. NUL; no / or space
_HCA_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")  # mlx5_0, rxe0, irdma1
_SAFE_PATH_RE = re.compile(r"/[A-Za-z0-9_.+@=/-]*")
_SAFE_KEY_PATH_RE = re.compile(r"~?[A-Za-z0-9_.+@=/-]+")
_POSIX_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_KnobValue = str | int | float | bool | list[str]  # a role_vars value, or an entry of a map knob


def _check(regex: re.Pattern[str], what: str, v: str | None) -> str | None:
    if v is not None and (".." in v.split("/") if what.endswith("path") else False):
        raise ValueError(f"must be a {what} without '..'")
    if v is not None and not regex.fullmatch(v):
        raise ValueError(f"{v!r} is not a safe {what} (shell metacharacters, spaces or quotes are refused)")
    return v
# Lustre NID: "10.0.0.5@o2ib", "10.0.0.5@tcp1", "192.168.1.2@o2ib0"
_NID = re.compile(r"(?P<addr>[0-9.]+)@(?P<net>(tcp|o2ib|kfi|gni)\d*)")
#: apt-cacher-ng 3.7.4 (Debian 12), the cluster package cache, stores its upstream proxy's port
#: signed 16-bit: `Proxy: http://h:42655` reads back as `http://h:-2288…` (`acngtool cfgdump`)
#: and every cache miss fails with "503 Connection refused" (found in the lab, 2026-12-02).
ACNG_MAX_PROXY_PORT = 32767
# LNet networks: "o2ib0(ib0)", "tcp0(eth0),o2ib1(ib1)"
_LNET = re.compile(r"(tcp|o2ib)\d*\([A-Za-z0-9_.-]+\)(,(tcp|o2ib)\d*\([A-Za-z0-9_.-]+\))*")


_HOSTNAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


def is_host(value: str) -> bool:
    """An IPv4/IPv6 address or an RFC 1123 host name."""
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(value))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cluster(_Strict):
    name: str = Field(pattern=_NAME)
    sku: str
    matrix: str
    os: Literal["ubuntu-22.04", "ubuntu-24.04", "debian-12", "rocky-9", "rhel-9"]

    @field_validator("sku", "matrix")
    @classmethod
    def _catalog_name(cls, v: str, info: Any) -> str:
        problem = catalog_name_problem(v, "SKU" if info.field_name == "sku" else "matrix")
        if problem:
            raise ValueError(problem)
        return v

    @property
    def os_family(self) -> str:
        return OS_NAMES[self.os]


class Ssh(_Strict):
    user: str = "root"
    key: str | None = None
    port: int = Field(default=22, ge=1, le=65535)
    known_hosts: str | None = None
    strict_host_keys: bool = False
    connect_timeout_s: int = Field(default=10, ge=1, le=300)

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        return _check(_POSIX_USER_RE, "POSIX user name", v) or v

    @field_validator("key", "known_hosts")
    @classmethod
    def _keypath(cls, v: str | None) -> str | None:
        too_long = v and length_problem(v, "key path")
        if too_long:
            raise ValueError(too_long)
        return _check(_SAFE_KEY_PATH_RE, "key path", v)


class Repos(_Strict):
    mirror: str | None = Field(default=None, description="URL of the cluster's NVIDIA repository mirror")
    apt_proxy: str | None = Field(default=None, description="HTTP proxy/cache for the OS packages")
    offline: bool = False
    cache_host: str | None = Field(default=None, description="node that runs the cluster's package cache "
                                   "(apt-cacher-ng); the other nodes fetch through it")
    cache_address: str | None = Field(default=None, description="IP address or host name the other nodes reach "
                                      "the cache host on (default: its address)")
    keyring_file: str | None = Field(default=None, description="signing key file name at the repo root")
    keyring_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    @field_validator("mirror", "apt_proxy")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"(https?|file)://\S+", v):
            raise ValueError("must be an http(s):// or file:// URL")
        # URL characters only, none a shell gives meaning to ($ ` ' " ; & | < > \ ( ) space)
        if v is not None and not re.fullmatch(r"[A-Za-z0-9._~:/?#\[\]@!%+,=*-]+", v):
            raise ValueError("has a character no repository URL needs ($, `, quotes, ;, &, |, <, >, \\, parentheses); "
                             "percent-encode it")
        return v

    @field_validator("keyring_file")
    @classmethod
    def _keyring(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", v):
            raise ValueError("must be a file name (letters, digits, . _ + -)")
        return v

    @field_validator("cache_address")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        if v is not None and not is_host(v):
            raise ValueError("must be an IP address or a host name (no scheme, port or path)")
        return v


class Management(_Strict):
    """The network gpuctl reaches the nodes on; its interface is never reconfigured."""

    interface: str | None = Field(default=None, pattern=_IFNAME)
    cidr: ipaddress.IPv4Network | None = None


class IpoibSettings(_Strict):
    cidr: ipaddress.IPv4Network
    mode: Literal["connected", "datagram"] = "datagram"
    mtu: int | None = Field(default=None, ge=1280, le=65520)


class RoceSettings(_Strict):
    cidr: ipaddress.IPv4Network
    mtu: int = Field(default=4200, ge=1500, le=9216)
    gid_index: int | Literal["auto"] = "auto"
    traffic_class: int = Field(default=106, ge=0, le=255)
    dscp: int = Field(default=26, ge=0, le=63)
    pfc_priority: int = Field(default=3, ge=0, le=7)
    ecn: bool = True


class Fabric(_Strict):
    type: Literal["infiniband", "roce", "none"]
    rate_gbps: int | None = None
    hcas_per_node: int = Field(default=0, ge=0, le=16)
    hcas: list[str] | None = Field(default=None, description="RDMA device names, default mlx5_0…")
    interfaces: list[str] | None = Field(default=None, description="netdevs, default ib0… for IB")
    ipoib: IpoibSettings | None = None
    roce: RoceSettings | None = None
    soft_roce: bool = Field(default=False, description="lab only: create rdma_rxe devices on the interfaces")

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, v: list[str] | None) -> list[str] | None:
        for x in v or []:
            _check(_HCA_RE, "RDMA device name (like mlx5_0)", x)
        return v

    @field_validator("interfaces")
    @classmethod
    def _ifaces(cls, v: list[str] | None) -> list[str] | None:
        for x in v or []:
            _check(_IFNAME_RE, "interface name (1-15 of A-Z a-z 0-9 _ . : -)", x)
        return v


class Vlan(_Strict):
    id: int = Field(ge=1, le=4094)
    parent: str = Field(pattern=_IFNAME)
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,14}$")
    cidr: ipaddress.IPv4Network
    mtu: int | None = Field(default=None, ge=576, le=9216)


class Raid(_Strict):
    level: Literal[0, 1, 10]
    devices: Literal["auto"] | list[str] = "auto"
    chunk_kib: int = Field(default=512, ge=4, le=65536)
    fs: Literal["xfs", "ext4"] = "xfs"
    mount: str = "/raid"
    name: str = Field(default="md0", pattern=r"^md[0-9]+$")
    wipe: list[str] = Field(default_factory=list, description="devices that may be wiped with --allow-wipe")

    @field_validator("mount")
    @classmethod
    def _abs(cls, v: str) -> str:
        problem = mount_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("devices", "wipe")
    @classmethod
    def _devs(cls, v: Any) -> Any:
        for x in v if isinstance(v, list) else []:
            _check(_SAFE_PATH_RE, "device path", x)
        return v


class Lustre(_Strict):
    mgs_nids: list[str] = Field(min_length=1)
    fsname: str = Field(pattern=r"^[A-Za-z0-9_-]{1,8}$")
    mount: str = "/lustre"
    lnet: str
    mount_options: str = "flock,_netdev"

    @field_validator("mount")
    @classmethod
    def _mount(cls, v: str) -> str:
        problem = mount_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("mount_options")
    @classmethod
    def _opts(cls, v: str) -> str:
        problem = MountOptions().problem(v)
        if problem:
            raise ValueError(problem)
        return v


class Storage(_Strict):
    raid: Raid | None = None
    lustre: Lustre | None = None


class Rack(_Strict):
    name: str = Field(pattern=_NAME)
    power_kw: float = Field(gt=0)
    cooling: Literal["air", "liquid"] = "air"


class Node(_Strict):
    name: str = Field(pattern=_NAME)
    address: str
    ssh_port: int | None = Field(default=None, ge=1, le=65535)
    rack: str | None = None
    fabric_ips: list[ipaddress.IPv4Address] = Field(default_factory=list)
    vlan_ips: dict[int, ipaddress.IPv4Address] = Field(default_factory=dict)
    cpu_memory_gib: float | None = Field(default=None, gt=0)

    @field_validator("fabric_ips", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class Account(_Strict):
    name: str = Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")
    ssh_keys: list[str] = Field(min_length=1)
    sudo: bool = True


class Handover(_Strict):
    accounts: list[Account] = Field(default_factory=list)
    remove_provider_key: bool = False


class HardwareOverrides(_Strict):
    """Per-cluster replacements for SKU hardware expectations, each with its reason."""

    min_cpu_memory_gib: Figure | None = None
    nvme_count: Figure | None = None


class PreflightSettings(_Strict):
    """Overrides of the preflight limits in catalog/health.yaml, each with a reason."""

    min_free_root_gib: float | None = Field(default=None, ge=0)
    source: str | None = None


class ThresholdOverride(Threshold):
    """A per-cluster threshold that replaces the SKU's; its source says why."""


class Inventory(_Strict):
    cluster: Cluster
    ssh: Ssh = Ssh()
    repos: Repos = Repos()
    management: Management = Management()
    fabric: Fabric = Fabric(type="none")
    vlans: list[Vlan] = Field(default_factory=list)
    storage: Storage = Storage()
    racks: list[Rack] = Field(default_factory=list)
    nodes: list[Node] = Field(min_length=1)
    thresholds: dict[str, ThresholdOverride] = Field(default_factory=dict)
    hardware: HardwareOverrides = HardwareOverrides()
    handover: Handover = Handover()
    preflight: PreflightSettings = PreflightSettings()
    role_vars: dict[str, _KnobValue | dict[str, _KnobValue]] = Field(
        default_factory=dict, description="overrides of roles/<role>/defaults.yaml knobs for this cluster")
    lab: dict[str, Any] | None = Field(default=None, description="written by `gpuctl lab up`")

    def select(self, limit: tuple[str, ...] | list[str] = ()) -> list[Node]:
        """Nodes whose name matches any of the globs (all nodes when none given)."""
        if not limit:
            return list(self.nodes)
        chosen = [n for n in self.nodes if any(fnmatch.fnmatchcase(n.name, p) for p in limit)]
        if not chosen:
            raise InputError(f"--limit {' '.join(limit)} matches no node; nodes: "
                             f"{', '.join(n.name for n in self.nodes)}")
        return chosen

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise InputError(f"no node named '{name}'; nodes: {', '.join(n.name for n in self.nodes)}")


@dataclass
class LoadedInventory:
    """A validated inventory with everything resolved from it."""

    inventory: Inventory
    path: Path
    smap: SourceMap
    sku: Sku
    matrix: LoadedMatrix
    warnings: list[str] = field(default_factory=list)
    text: str = ""

    @property
    def base_dir(self) -> Path:
        return self.path.parent


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _semantic(inv: Inventory, smap: SourceMap, sku: Sku | None) -> list[Problem]:
    out: list[Problem] = []

    def err(path: FieldPath, msg: str) -> None:
        out.append(Problem(smap.where(path), path, msg))

    def warn(path: FieldPath, msg: str) -> None:
        out.append(Problem(smap.where(path), path, msg, warning=True))

    # unique names and endpoints
    names = Counter(n.name for n in inv.nodes)
    endpoints = Counter((n.address, n.ssh_port or inv.ssh.port) for n in inv.nodes)
    seen_names: set[str] = set()
    seen_ep: set[tuple[str, int]] = set()
    for i, n in enumerate(inv.nodes):
        if names[n.name] > 1 and n.name in seen_names:
            err(("nodes", i, "name"), f"duplicate node name '{n.name}'")
        seen_names.add(n.name)
        ep = (n.address, n.ssh_port or inv.ssh.port)
        if endpoints[ep] > 1 and ep in seen_ep:
            err(("nodes", i, "address"), f"duplicate address {n.address} port {ep[1]} (already used by another node)")
        seen_ep.add(ep)
        if n.address == "@local":
            if sum(1 for m in inv.nodes if m.address == "@local") > 1:
                err(("nodes", i, "address"), "only one node can be @local (this machine)")
        elif not is_host(n.address):
            err(("nodes", i, "address"), f"'{n.address}' is not a host name or IP address")
        elif inv.management.cidr is not None:
            try:
                ip = ipaddress.IPv4Address(n.address)
            except ValueError:
                ip = None
            if ip is not None and ip not in inv.management.cidr:
                err(("nodes", i, "address"),
                    f"{n.address} is outside the management network {inv.management.cidr}")

    # racks
    rack_names = Counter(r.name for r in inv.racks)
    for j, r in enumerate(inv.racks):
        if rack_names[r.name] > 1:
            err(("racks", j, "name"), f"duplicate rack name '{r.name}'")
    racks = {r.name: (j, r) for j, r in enumerate(inv.racks)}
    per_rack: dict[str, list[str]] = defaultdict(list)
    for i, n in enumerate(inv.nodes):
        if n.rack is None:
            if inv.racks:
                err(("nodes", i), "no rack given; every node needs one of the racks defined under racks")
            continue
        if n.rack not in racks:
            known = ", ".join(racks) or "none defined"
            err(("nodes", i, "rack"), f"'{n.rack}' is not a rack defined under racks (known: {known})")
            continue
        per_rack[n.rack].append(n.name)
    if sku is not None:
        kw = sku.node_power_kw.value
        for rack_name, members in per_rack.items():
            j, rack = racks[rack_name]
            total = kw * len(members)
            if total > rack.power_kw + 1e-9:
                fits = int(rack.power_kw // kw)
                err(("racks", j, "power_kw"),
                    f"rack '{rack_name}' ({rack.cooling}-cooled, {rack.power_kw:g} kW) holds {len(members)} "
                    f"{sku.name} nodes at {kw:g} kW each = {total:g} kW, over its budget; it fits {fits} "
                    f"({', '.join(members)}) — move nodes to another rack or raise power_kw "
                    f"(node power: {sku.node_power_kw.source})")

    # fabric
    f = inv.fabric
    health = load_health()
    if f.type != "none":
        rates = health.fabric_rates_gbps[f.type].values
        if f.rate_gbps is None:
            err(("fabric", "rate_gbps"), f"required for a {f.type} fabric; one of {', '.join(map(str, rates))}")
        elif f.rate_gbps not in rates:
            err(("fabric", "rate_gbps"), f"{f.rate_gbps} is not a known {f.type} rate "
                                         f"({', '.join(map(str, rates))} Gb/s)")
        elif sku is not None and (expected := sku.fabric_rate_gbps(f.type)) and f.rate_gbps < expected:
            warn(("fabric", "rate_gbps"), f"{f.rate_gbps} Gb/s is below the {sku.name} reference {expected:g} Gb/s")
        if f.hcas_per_node < 1:
            err(("fabric", "hcas_per_node"), f"a {f.type} fabric needs at least one HCA per node")
        if f.hcas is not None and len(f.hcas) != f.hcas_per_node:
            err(("fabric", "hcas"), f"lists {len(f.hcas)} devices, hcas_per_node is {f.hcas_per_node}")
        if f.interfaces is not None and len(f.interfaces) != f.hcas_per_node:
            err(("fabric", "interfaces"), f"lists {len(f.interfaces)} interfaces, hcas_per_node is {f.hcas_per_node}")
        if f.type == "roce" and f.interfaces is None:
            err(("fabric", "interfaces"), "RoCE needs the Ethernet interface names (e.g. [ens1f0np0, …])")
        if f.type == "roce" and f.ipoib is not None:
            err(("fabric", "ipoib"), "IPoIB settings on a RoCE fabric; use fabric.roce")
        if f.type == "infiniband" and f.roce is not None:
            err(("fabric", "roce"), "RoCE settings on an InfiniBand fabric; use fabric.ipoib")
    net = (f.ipoib.cidr if f.ipoib else None) or (f.roce.cidr if f.roce else None)
    fab_seen: dict[ipaddress.IPv4Address, str] = {}
    for i, n in enumerate(inv.nodes):
        if not n.fabric_ips:
            continue
        if net is None:
            err(("nodes", i, "fabric_ips"), "fabric addresses given but the fabric defines no ipoib/roce cidr")
            continue
        if len(n.fabric_ips) > max(f.hcas_per_node, 1):
            err(("nodes", i, "fabric_ips"), f"{len(n.fabric_ips)} addresses for {f.hcas_per_node} HCAs")
        for k, ip in enumerate(n.fabric_ips):
            if ip not in net:
                err(("nodes", i, "fabric_ips", k), f"{ip} is outside the fabric network {net}")
            if ip in fab_seen:
                err(("nodes", i, "fabric_ips", k), f"{ip} is already used by {fab_seen[ip]}")
            fab_seen[ip] = n.name

    # VLANs
    ids = Counter(v.id for v in inv.vlans)
    vnames = Counter(v.name for v in inv.vlans)
    vlans = {v.id: (j, v) for j, v in enumerate(inv.vlans)}
    for j, v in enumerate(inv.vlans):
        if ids[v.id] > 1:
            err(("vlans", j, "id"), f"VLAN id {v.id} is defined more than once")
        if vnames[v.name] > 1:
            err(("vlans", j, "name"), f"VLAN name '{v.name}' is defined more than once")
    vlan_seen: dict[ipaddress.IPv4Address, str] = {}
    for i, n in enumerate(inv.nodes):
        for vid, ip in n.vlan_ips.items():
            if vid not in vlans:
                err(("nodes", i, "vlan_ips", vid), f"VLAN {vid} is not defined under vlans")
                continue
            cidr = vlans[vid][1].cidr
            if ip not in cidr:
                err(("nodes", i, "vlan_ips", vid), f"{ip} is outside VLAN {vid}'s network {cidr}")
            if ip in vlan_seen:
                err(("nodes", i, "vlan_ips", vid), f"{ip} is already used by {vlan_seen[ip]}")
            vlan_seen[ip] = n.name
    for j, v in enumerate(inv.vlans):
        missing = [n.name for n in inv.nodes if v.id not in n.vlan_ips]
        if missing and len(missing) < len(inv.nodes):
            warn(("vlans", j), f"VLAN {v.id} has no address on {', '.join(missing)}")

    # storage
    raid = inv.storage.raid
    if raid is not None:
        if isinstance(raid.devices, list):
            counts = Counter(raid.devices)
            for k, d in enumerate(raid.devices):
                if not re.fullmatch(r"/dev/(nvme\d+n\d+|disk/by-[a-z-]+/[A-Za-z0-9_.:+@=-]+)", d):
                    err(("storage", "raid", "devices", k),
                        f"'{d}' is not an NVMe namespace path (/dev/nvmeXnY or /dev/disk/by-id/…)")
                if counts[d] > 1:
                    err(("storage", "raid", "devices", k), f"'{d}' is listed twice")
            n_dev = len(raid.devices)
            need = {0: 1, 1: 2, 10: 4}[raid.level]
            if n_dev < need:
                err(("storage", "raid", "devices"), f"RAID{raid.level} needs at least {need} devices, {n_dev} listed")
            if raid.level == 10 and n_dev % 2:
                err(("storage", "raid", "devices"), "RAID10 needs an even number of devices")
            for k, w in enumerate(raid.wipe):
                if w not in raid.devices:
                    err(("storage", "raid", "wipe", k), f"'{w}' is not one of the RAID devices")
        else:
            for k, w in enumerate(raid.wipe):
                err(("storage", "raid", "wipe", k),
                    f"'{w}': wipe needs an explicit device list (devices: auto never wipes anything)")
    lustre = inv.storage.lustre
    if lustre is not None:
        for k, nid in enumerate(lustre.mgs_nids):
            m = _NID.fullmatch(nid)
            if not m:
                err(("storage", "lustre", "mgs_nids", k), f"'{nid}' is not a Lustre NID like 10.0.0.5@o2ib")
                continue
            try:
                ipaddress.IPv4Address(m.group("addr"))
            except ValueError:
                err(("storage", "lustre", "mgs_nids", k), f"'{m.group('addr')}' in '{nid}' is not an IPv4 address")
        if not _LNET.fullmatch(lustre.lnet):
            err(("storage", "lustre", "lnet"), f"'{lustre.lnet}' is not an LNet networks string like o2ib0(ib0)")
        if raid is not None and mounts_overlap(lustre.mount, raid.mount):
            err(("storage", "lustre", "mount"), f"{lustre.mount} and the RAID's mount point {raid.mount} are the "
                "same folder or one lies inside the other; give each its own folder")

    # package cache host
    repos = inv.repos
    if repos.cache_host is not None and repos.cache_host not in names:
        err(("repos", "cache_host"), f"'{repos.cache_host}' is not a node of this inventory "
                                     f"(nodes: {', '.join(n.name for n in inv.nodes)})")
    elif repos.cache_host is None and repos.cache_address is not None:
        err(("repos", "cache_address"), "only means something with repos.cache_host (the node that runs the "
                                        "package cache); set cache_host or remove cache_address")
    elif repos.cache_host is not None and repos.cache_address is None and len(inv.nodes) > 1:
        address = inv.node(repos.cache_host).address
        if address == "@local" or _loopback(address):
            err(("repos", "cache_host"), f"'{repos.cache_host}' has the address {address}, which the other nodes "
                                         "cannot reach it on; set repos.cache_address to the address they use "
                                         "(e.g. its VLAN or fabric address)")

    if repos.cache_host is not None and repos.apt_proxy:
        port = urllib.parse.urlsplit(repos.apt_proxy).port
        if port is not None and port > ACNG_MAX_PROXY_PORT:
            err(("repos", "apt_proxy"), f"port {port}: the package cache (apt-cacher-ng) reads an upstream proxy "
                                        f"port above {ACNG_MAX_PROXY_PORT} as a negative number and every cache "
                                        f"miss fails; use a port of at most {ACNG_MAX_PROXY_PORT}")

    # thresholds
    for key in inv.thresholds:
        if key not in THRESHOLD_NAMES:
            import difflib

            near = difflib.get_close_matches(key, THRESHOLD_NAMES, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else f"; known: {', '.join(THRESHOLD_NAMES)}"
            err(("thresholds", key), f"unknown threshold '{key}'{hint}")

    # role knobs
    if inv.role_vars:
        import difflib

        defaults = role_defaults()
        known = list(defaults)
        for key in inv.role_vars:
            value = inv.role_vars[key]
            if key not in defaults:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean '{near[0]}'?" if near else " (see roles/<role>/defaults.yaml)"
                err(("role_vars", key), f"unknown role setting '{key}'{hint}")
            else:
                problem = knob_value_problem(defaults[key], value, flags=key in FLAG_KNOBS)
                if problem:
                    err(("role_vars", key), problem)
                    continue
                for sub, message in knob_problems(key, value):
                    err(("role_vars", key, *sub), message)

    # handover: the customer's accounts and keys are checked now, not at the end of a
    # turnkey run hours later
    _handover_problems(inv, err)

    # CPU memory
    if sku is not None:
        floor = (inv.hardware.min_cpu_memory_gib or sku.min_cpu_memory_gib).value
        for i, n in enumerate(inv.nodes):
            if n.cpu_memory_gib is not None and n.cpu_memory_gib < floor:
                warn(("nodes", i, "cpu_memory_gib"),
                     f"{n.cpu_memory_gib:g} GiB is below the {sku.name} minimum of {floor:g} GiB")
    if inv.preflight.min_free_root_gib is not None and not inv.preflight.source:
        err(("preflight",), "an override needs a source saying why")
    return out


def _handover_problems(inv: Inventory, err: Any) -> None:
    h = inv.handover
    seen: set[str] = set()
    for i, a in enumerate(h.accounts):
        if a.name == "root":
            err(("handover", "accounts", i, "name"), "root is not a customer account (give the customer their own "
                "account with sudo: true)")
        if a.name == inv.ssh.user and a.name != "root":
            err(("handover", "accounts", i, "name"), f"'{a.name}' is the SSH user gpuctl works as (ssh.user): "
                "handing it over would replace its authorized_keys, and the provider's key with them, in the "
                "middle of the run; give the customer an account of their own")
        if a.name in seen:
            err(("handover", "accounts", i, "name"), f"account '{a.name}' is listed twice")
        seen.add(a.name)
        for j, key in enumerate(a.ssh_keys):
            try:
                parse_public_key(key, "key")
            except InputError as exc:
                err(("handover", "accounts", i, "ssh_keys", j), str(exc).removeprefix("key: "))
    if h.remove_provider_key and not any(a.sudo and a.ssh_keys for a in h.accounts):
        err(("handover", "remove_provider_key"), "needs at least one account with sudo: true and a key; removing "
            "the provider key would lock everyone out")


def role_defaults() -> dict[str, Any]:
    """Every knob of every role with its default (roles/*/defaults.yaml)."""
    out: dict[str, Any] = {}
    for path in sorted(roles_dir().glob("*/defaults.yaml")):
        out.update(load_yaml_text(path)[0] or {})
    return out


def known_role_vars() -> list[str]:
    """Every knob of every role (the keys of roles/*/defaults.yaml)."""
    return list(role_defaults())


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a map"
    return type(value).__name__


def knob_value_problem(default: Any, value: Any, flags: bool = False) -> str | None:
    """Why `value` cannot stand in for a role knob whose default is `default`; None when it can.

    The override must have the default's shape: true/false for a flag, a whole number for a
    count, a string for a string (a YAML number there is refused: `1.10` would reach the host
    as `1.1`), a list for a list, and for a per-OS / per-filesystem map a map of some of its
    keys (each value judged the same way; the rest keep their defaults). A flags knob
    (`flags`, gpuctl.knobs.FLAG_KNOBS) also takes a list of options where its default is a
    string. What the strings may hold is judged by `gpuctl.knobs.knob_problems`.
    """
    if default is None:
        return None
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif isinstance(default, str):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return f"{value!r} is a number; this setting is a string: quote it ('{value}')"
        ok = isinstance(value, str) or (flags and isinstance(value, list))
    elif isinstance(default, list):
        ok = isinstance(value, list)
    elif isinstance(default, dict):
        if not isinstance(value, dict):
            return (f"this setting is a map by {' / '.join(map(str, default))}; give the entries to change, "
                    f"e.g. {{{next(iter(default), 'key')}: ...}}, not {_kind(value)}")
        for k, v in value.items():
            if k not in default:
                return f"unknown entry '{k}'; the map has {', '.join(map(str, default))}"
            inner = knob_value_problem(default[k], v, flags)
            if inner:
                return f"{k}: {inner}"
        return None
    else:
        return None
    return None if ok else f"{value!r} is {_kind(value)}; this setting takes {_kind(default)} (default {default!r})"


def validate_inventory_data(data: Any, smap: SourceMap, base_dir: Path) -> LoadedInventory:
    """Schema + semantic validation of already-parsed data (used by tests and lab).

    First the typed boundary (in validate_collecting): a control character in any string of
    the document (any field, any knob, at any depth, keys included) refuses the file before
    any value is interpreted."""
    model, problems = validate_collecting(Inventory, data, smap, "inventory")
    if model is None:
        raise InputError(f"{smap.file}: {len(problems)} problem(s) in this inventory", [str(p) for p in problems])
    inv = model
    sku: Sku | None = None
    try:
        sku = load_sku(inv.cluster.sku)
    except InputError as exc:
        problems.append(Problem(smap.where(("cluster", "sku")), ("cluster", "sku"), str(exc)))
    matrix: LoadedMatrix | None = None
    try:
        matrix = load_matrix(inv.cluster.matrix, relative_to=base_dir)
    except InputError as exc:
        problems.append(Problem(smap.where(("cluster", "matrix")), ("cluster", "matrix"), str(exc)))
    if matrix is not None and inv.cluster.os_family not in matrix.matrix.packages:
        problems.append(Problem(smap.where(("cluster", "os")), ("cluster", "os"),
                                f"matrix {matrix.matrix.name} has no packages for {inv.cluster.os} "
                                f"(has: {', '.join(matrix.matrix.packages)})"))
    problems += _semantic(inv, smap, sku)
    problems.sort(key=lambda p: smap.line_of(p.path) or 0)
    errors = [str(p) for p in problems if not p.warning]
    warnings = [str(p) for p in problems if p.warning]
    if errors:
        raise InputError(f"{smap.file}: {len(errors)} problem(s) in this inventory", errors + warnings)
    assert sku is not None and matrix is not None
    return LoadedInventory(inv, Path(smap.file), smap, sku, matrix, warnings)


def load_inventory(path: str | Path) -> LoadedInventory:
    """Read, validate and resolve an inventory file; InputError lists every problem."""
    p = Path(path)
    data, smap, text = load_yaml_text(p, what="inventory")  # read once: a FIFO or a swapped file cannot differ
    loaded = validate_inventory_data(data, smap, p.resolve().parent)
    loaded.path = p
    loaded.text = text
    return loaded


def load_inventory_text(text: str, name: str = "<inventory>", base_dir: Path | None = None) -> LoadedInventory:
    data, smap = parse_yaml(text, name)
    loaded = validate_inventory_data(data, smap, base_dir or Path.cwd())
    loaded.text = text
    return loaded
