"""The inventory's semantic rules: what the schema cannot say, one function per subject.

`semantic_problems(inv, smap, sku)` runs `VALIDATORS` in order; each validator takes the
typed inventory, its SKU (None when the SKU name did not load) and a `Findings` that records
an error or a warning at a field path (`file:line: field: message`, through the source map).
Each validator's docstring ends with the component it belongs to, `core` for the cluster-wide
ones: a validator moves beside its component (roles/<name>/) when components carry their own
declarations, and `VALIDATORS` is then read from them.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuctl.boundary import is_host, mounts_overlap
from gpuctl.catalog import THRESHOLD_NAMES, Sku, load_health
from gpuctl.errors import InputError
from gpuctl.knobs import FLAG_KNOBS, knob_problems
from gpuctl.paths import roles_dir
from gpuctl.pubkey import parse_public_key
from gpuctl.validation import Problem
from gpuctl.yamlsrc import FieldPath, SourceMap, load_yaml_text

if TYPE_CHECKING:  # gpuctl.inventory runs these rules when it loads a file
    from gpuctl.inventory import Inventory

# Lustre NID: "10.0.0.5@o2ib", "10.0.0.5@tcp1", "192.168.1.2@o2ib0"
_NID = re.compile(r"(?P<addr>[0-9.]+)@(?P<net>(tcp|o2ib|kfi|gni)\d*)")
#: apt-cacher-ng 3.7.4 (Debian 12), the cluster package cache, stores its upstream proxy's port
#: signed 16-bit: `Proxy: http://h:42655` reads back as `http://h:-2288…` (`acngtool cfgdump`)
#: and every cache miss fails with "503 Connection refused" (found in the lab, 2026-12-02).
ACNG_MAX_PROXY_PORT = 32767
# LNet networks: "o2ib0(ib0)", "tcp0(eth0),o2ib1(ib1)"
_LNET = re.compile(r"(tcp|o2ib)\d*\([A-Za-z0-9_.-]+\)(,(tcp|o2ib)\d*\([A-Za-z0-9_.-]+\))*")


@dataclass
class Findings:
    """The problems found so far, each at its field path."""

    smap: SourceMap
    problems: list[Problem] = field(default_factory=list)

    def err(self, path: FieldPath, msg: str) -> None:
        self.problems.append(Problem(self.smap.where(path), path, msg))

    def warn(self, path: FieldPath, msg: str) -> None:
        self.problems.append(Problem(self.smap.where(path), path, msg, warning=True))


Validator = Callable[["Inventory", "Sku | None", Findings], None]


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def nodes_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Node names and SSH endpoints unique; addresses are hosts, inside management.cidr; one @local. (core)"""
    names = Counter(n.name for n in inv.nodes)
    endpoints = Counter((n.address, n.ssh_port or inv.ssh.port) for n in inv.nodes)
    seen_names: set[str] = set()
    seen_ep: set[tuple[str, int]] = set()
    for i, n in enumerate(inv.nodes):
        if names[n.name] > 1 and n.name in seen_names:
            found.err(("nodes", i, "name"), f"duplicate node name '{n.name}'")
        seen_names.add(n.name)
        ep = (n.address, n.ssh_port or inv.ssh.port)
        if endpoints[ep] > 1 and ep in seen_ep:
            found.err(("nodes", i, "address"),
                      f"duplicate address {n.address} port {ep[1]} (already used by another node)")
        seen_ep.add(ep)
        if n.address == "@local":
            if sum(1 for m in inv.nodes if m.address == "@local") > 1:
                found.err(("nodes", i, "address"), "only one node can be @local (this machine)")
        elif not is_host(n.address):
            found.err(("nodes", i, "address"), f"'{n.address}' is not a host name or IP address")
        elif inv.management.cidr is not None:
            try:
                ip = ipaddress.IPv4Address(n.address)
            except ValueError:
                ip = None
            if ip is not None and ip not in inv.management.cidr:
                found.err(("nodes", i, "address"),
                    f"{n.address} is outside the management network {inv.management.cidr}")


def racks_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Rack names unique; every node in a defined rack; each rack's power budget holds its nodes. (core)"""
    rack_names = Counter(r.name for r in inv.racks)
    for j, r in enumerate(inv.racks):
        if rack_names[r.name] > 1:
            found.err(("racks", j, "name"), f"duplicate rack name '{r.name}'")
    racks = {r.name: (j, r) for j, r in enumerate(inv.racks)}
    per_rack: dict[str, list[str]] = defaultdict(list)
    for i, n in enumerate(inv.nodes):
        if n.rack is None:
            if inv.racks:
                found.err(("nodes", i), "no rack given; every node needs one of the racks defined under racks")
            continue
        if n.rack not in racks:
            known = ", ".join(racks) or "none defined"
            found.err(("nodes", i, "rack"), f"'{n.rack}' is not a rack defined under racks (known: {known})")
            continue
        per_rack[n.rack].append(n.name)
    if sku is not None:
        kw = sku.node_power_kw.value
        for rack_name, members in per_rack.items():
            j, rack = racks[rack_name]
            total = kw * len(members)
            if total > rack.power_kw + 1e-9:
                fits = int(rack.power_kw // kw)
                found.err(("racks", j, "power_kw"),
                    f"rack '{rack_name}' ({rack.cooling}-cooled, {rack.power_kw:g} kW) holds {len(members)} "
                    f"{sku.name} nodes at {kw:g} kW each = {total:g} kW, over its budget; it fits {fits} "
                    f"({', '.join(members)}) — move nodes to another rack or raise power_kw "
                    f"(node power: {sku.node_power_kw.source})")


def fabric_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """The fabric: a known rate for its type, HCA and interface counts, fabric addresses in its network. (network)"""
    f = inv.fabric
    health = load_health()
    if f.type != "none":
        rates = health.fabric_rates_gbps[f.type].values
        if f.rate_gbps is None:
            found.err(("fabric", "rate_gbps"), f"required for a {f.type} fabric; one of {', '.join(map(str, rates))}")
        elif f.rate_gbps not in rates:
            found.err(("fabric", "rate_gbps"), f"{f.rate_gbps} is not a known {f.type} rate "
                                         f"({', '.join(map(str, rates))} Gb/s)")
        elif sku is not None and (expected := sku.fabric_rate_gbps(f.type)) and f.rate_gbps < expected:
            found.warn(("fabric", "rate_gbps"),
                       f"{f.rate_gbps} Gb/s is below the {sku.name} reference {expected:g} Gb/s")
        if f.hcas_per_node < 1:
            found.err(("fabric", "hcas_per_node"), f"a {f.type} fabric needs at least one HCA per node")
        if f.hcas is not None and len(f.hcas) != f.hcas_per_node:
            found.err(("fabric", "hcas"), f"lists {len(f.hcas)} devices, hcas_per_node is {f.hcas_per_node}")
        if f.interfaces is not None and len(f.interfaces) != f.hcas_per_node:
            found.err(("fabric", "interfaces"),
                      f"lists {len(f.interfaces)} interfaces, hcas_per_node is {f.hcas_per_node}")
        if f.type == "roce" and f.interfaces is None:
            found.err(("fabric", "interfaces"), "RoCE needs the Ethernet interface names (e.g. [ens1f0np0, …])")
        if f.type == "roce" and f.ipoib is not None:
            found.err(("fabric", "ipoib"), "IPoIB settings on a RoCE fabric; use fabric.roce")
        if f.roce is not None and f.roce.dscp is not None and f.roce.dscp != f.roce.traffic_class >> 2:
            found.err(("fabric", "roce", "dscp"),
                      f"{f.roce.dscp} is not the DSCP of traffic_class {f.roce.traffic_class} "
                      f"({f.roce.traffic_class >> 2}): NCCL marks RoCE traffic with NCCL_IB_TC = traffic_class, "
                      f"DSCP in its top 6 bits (RFC 2474, ECN in the low 2: RFC 3168); set traffic_class to "
                      f"{f.roce.dscp * 4 + (f.roce.traffic_class & 3)} or leave dscp out")
        if f.type == "infiniband" and f.roce is not None:
            found.err(("fabric", "roce"), "RoCE settings on an InfiniBand fabric; use fabric.ipoib")
    net = (f.ipoib.cidr if f.ipoib else None) or (f.roce.cidr if f.roce else None)
    fab_seen: dict[ipaddress.IPv4Address, str] = {}
    for i, n in enumerate(inv.nodes):
        if not n.fabric_ips:
            continue
        if net is None:
            found.err(("nodes", i, "fabric_ips"), "fabric addresses given but the fabric defines no ipoib/roce cidr")
            continue
        if len(n.fabric_ips) > max(f.hcas_per_node, 1):
            found.err(("nodes", i, "fabric_ips"), f"{len(n.fabric_ips)} addresses for {f.hcas_per_node} HCAs")
        for k, ip in enumerate(n.fabric_ips):
            if ip not in net:
                found.err(("nodes", i, "fabric_ips", k), f"{ip} is outside the fabric network {net}")
            if ip in fab_seen:
                found.err(("nodes", i, "fabric_ips", k), f"{ip} is already used by {fab_seen[ip]}")
            fab_seen[ip] = n.name


def vlans_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """VLAN ids and names unique; node VLAN addresses in their VLAN, used once. (network)"""
    ids = Counter(v.id for v in inv.vlans)
    vnames = Counter(v.name for v in inv.vlans)
    vlans = {v.id: (j, v) for j, v in enumerate(inv.vlans)}
    for j, v in enumerate(inv.vlans):
        if ids[v.id] > 1:
            found.err(("vlans", j, "id"), f"VLAN id {v.id} is defined more than once")
        if vnames[v.name] > 1:
            found.err(("vlans", j, "name"), f"VLAN name '{v.name}' is defined more than once")
    vlan_seen: dict[ipaddress.IPv4Address, str] = {}
    for i, n in enumerate(inv.nodes):
        for vid, ip in n.vlan_ips.items():
            if vid not in vlans:
                found.err(("nodes", i, "vlan_ips", vid), f"VLAN {vid} is not defined under vlans")
                continue
            cidr = vlans[vid][1].cidr
            if ip not in cidr:
                found.err(("nodes", i, "vlan_ips", vid), f"{ip} is outside VLAN {vid}'s network {cidr}")
            if ip in vlan_seen:
                found.err(("nodes", i, "vlan_ips", vid), f"{ip} is already used by {vlan_seen[ip]}")
            vlan_seen[ip] = n.name
    for j, v in enumerate(inv.vlans):
        missing = [n.name for n in inv.nodes if v.id not in n.vlan_ips]
        if missing and len(missing) < len(inv.nodes):
            found.warn(("vlans", j), f"VLAN {v.id} has no address on {', '.join(missing)}")


def raid_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """The RAID: NVMe device paths, enough devices for the level, wipe only listed devices. (nvme_raid)"""
    raid = inv.storage.raid
    if raid is not None:
        if isinstance(raid.devices, list):
            counts = Counter(raid.devices)
            for k, d in enumerate(raid.devices):
                if not re.fullmatch(r"/dev/(nvme\d+n\d+|disk/by-[a-z-]+/[A-Za-z0-9_.:+@=-]+)", d):
                    found.err(("storage", "raid", "devices", k),
                        f"'{d}' is not an NVMe namespace path (/dev/nvmeXnY or /dev/disk/by-id/…)")
                if counts[d] > 1:
                    found.err(("storage", "raid", "devices", k), f"'{d}' is listed twice")
            n_dev = len(raid.devices)
            need = {0: 1, 1: 2, 10: 4}[raid.level]
            if n_dev < need:
                found.err(("storage", "raid", "devices"),
                          f"RAID{raid.level} needs at least {need} devices, {n_dev} listed")
            if raid.level == 10 and n_dev % 2:
                found.err(("storage", "raid", "devices"), "RAID10 needs an even number of devices")
            for k, w in enumerate(raid.wipe):
                if w not in raid.devices:
                    found.err(("storage", "raid", "wipe", k), f"'{w}' is not one of the RAID devices")
        else:
            for k, w in enumerate(raid.wipe):
                found.err(("storage", "raid", "wipe", k),
                    f"'{w}': wipe needs an explicit device list (devices: auto never wipes anything)")


def lustre_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Lustre: NIDs and the LNet string well formed; its mount apart from the RAID's. (lustre_client)"""
    raid = inv.storage.raid
    lustre = inv.storage.lustre
    if lustre is not None:
        for k, nid in enumerate(lustre.mgs_nids):
            m = _NID.fullmatch(nid)
            if not m:
                found.err(("storage", "lustre", "mgs_nids", k), f"'{nid}' is not a Lustre NID like 10.0.0.5@o2ib")
                continue
            try:
                ipaddress.IPv4Address(m.group("addr"))
            except ValueError:
                found.err(("storage", "lustre", "mgs_nids", k),
                          f"'{m.group('addr')}' in '{nid}' is not an IPv4 address")
        if not _LNET.fullmatch(lustre.lnet):
            found.err(("storage", "lustre", "lnet"), f"'{lustre.lnet}' is not an LNet networks string like o2ib0(ib0)")
        if raid is not None and mounts_overlap(lustre.mount, raid.mount):
            found.err(("storage", "lustre", "mount"), f"{lustre.mount} and the RAID's mount point {raid.mount} are the "
                "same folder or one lies inside the other; give each its own folder")


def package_cache_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """The package cache host: a node the others reach, an upstream proxy port apt-cacher-ng reads.
    (package_mirror)"""
    repos = inv.repos
    names = {n.name for n in inv.nodes}
    if repos.cache_host is not None and repos.cache_host not in names:
        found.err(("repos", "cache_host"), f"'{repos.cache_host}' is not a node of this inventory "
                                     f"(nodes: {', '.join(n.name for n in inv.nodes)})")
    elif repos.cache_host is None and repos.cache_address is not None:
        found.err(("repos", "cache_address"), "only means something with repos.cache_host (the node that runs the "
                                        "package cache); set cache_host or remove cache_address")
    elif repos.cache_host is not None and repos.cache_address is None and len(inv.nodes) > 1:
        address = inv.node(repos.cache_host).address
        if address == "@local" or _loopback(address):
            found.err(("repos", "cache_host"), f"'{repos.cache_host}' has the address {address}, which the other nodes "
                                         "cannot reach it on; set repos.cache_address to the address they use "
                                         "(e.g. its VLAN or fabric address)")

    if repos.cache_host is not None and repos.apt_proxy:
        port = urllib.parse.urlsplit(repos.apt_proxy).port
        if port is not None and port > ACNG_MAX_PROXY_PORT:
            found.err(("repos", "apt_proxy"), f"port {port}: the package cache (apt-cacher-ng) reads an upstream proxy "
                                        f"port above {ACNG_MAX_PROXY_PORT} as a negative number and every cache "
                                        f"miss fails; use a port of at most {ACNG_MAX_PROXY_PORT}")


def thresholds_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Threshold overrides name known thresholds. (core)"""
    for key in inv.thresholds:
        if key not in THRESHOLD_NAMES:
            near = difflib.get_close_matches(key, THRESHOLD_NAMES, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else f"; known: {', '.join(THRESHOLD_NAMES)}"
            found.err(("thresholds", key), f"unknown threshold '{key}'{hint}")


def role_vars_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """role_vars: known knobs, each with its default's shape and what its strings may hold. (core)"""
    if inv.role_vars:
        defaults = role_defaults()
        known = list(defaults)
        for key in inv.role_vars:
            value = inv.role_vars[key]
            if key not in defaults:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean '{near[0]}'?" if near else " (see roles/<role>/defaults.yaml)"
                found.err(("role_vars", key), f"unknown role setting '{key}'{hint}")
            else:
                problem = knob_value_problem(defaults[key], value, flags=key in FLAG_KNOBS)
                if problem:
                    found.err(("role_vars", key), problem)
                    continue
                for sub, message in knob_problems(key, value):
                    found.err(("role_vars", key, *sub), message)


def handover_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """The customer's accounts and keys, checked now, not at the end of a turnkey run hours later. (handover)"""
    h = inv.handover
    seen: set[str] = set()
    for i, a in enumerate(h.accounts):
        if a.name == "root":
            found.err(("handover", "accounts", i, "name"),
                      "root is not a customer account (give the customer their own "
                "account with sudo: true)")
        if a.name == inv.ssh.user and a.name != "root":
            found.err(("handover", "accounts", i, "name"), f"'{a.name}' is the SSH user gpuctl works as (ssh.user): "
                "handing it over would replace its authorized_keys, and the provider's key with them, in the "
                "middle of the run; give the customer an account of their own")
        if a.name in seen:
            found.err(("handover", "accounts", i, "name"), f"account '{a.name}' is listed twice")
        seen.add(a.name)
        for j, key in enumerate(a.ssh_keys):
            try:
                parse_public_key(key, "key")
            except InputError as exc:
                found.err(("handover", "accounts", i, "ssh_keys", j), str(exc).removeprefix("key: "))
    if h.remove_provider_key and not any(a.sudo and a.ssh_keys for a in h.accounts):
        found.err(("handover", "remove_provider_key"), "needs at least one account with sudo: true and a key; removing "
            "the provider key would lock everyone out")


def cpu_memory_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Each node's CPU memory against the SKU's minimum (a warning). (core)"""
    if sku is not None:
        floor = (inv.hardware.min_cpu_memory_gib or sku.min_cpu_memory_gib).value
        for i, n in enumerate(inv.nodes):
            if n.cpu_memory_gib is not None and n.cpu_memory_gib < floor:
                found.warn(("nodes", i, "cpu_memory_gib"),
                     f"{n.cpu_memory_gib:g} GiB is below the {sku.name} minimum of {floor:g} GiB")


def preflight_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """A preflight override says why. (core)"""
    if inv.preflight.min_free_root_gib is not None and not inv.preflight.source:
        found.err(("preflight",), "an override needs a source saying why")


#: every subject's rules, in the order their problems are listed (then sorted by line)
VALIDATORS: tuple[Validator, ...] = (
    nodes_problems,
    racks_problems,
    fabric_problems,
    vlans_problems,
    raid_problems,
    lustre_problems,
    package_cache_problems,
    thresholds_problems,
    role_vars_problems,
    handover_problems,
    cpu_memory_problems,
    preflight_problems,
)


def semantic_problems(inv: Inventory, smap: SourceMap, sku: Sku | None) -> list[Problem]:
    """Every problem (errors and warnings) the semantic rules find in a schema-valid inventory."""
    found = Findings(smap)
    for validate in VALIDATORS:
        validate(inv, sku, found)
    return found.problems


# ---------------------------------------------------------------- role knobs (role_vars)

def role_defaults() -> dict[str, Any]:
    """Every knob of every role with its default (roles/*/defaults.yaml)."""
    out: dict[str, Any] = {}
    for path in sorted(roles_dir().glob("*/defaults.yaml")):
        out.update(load_yaml_text(path)[0] or {})
    return out


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
