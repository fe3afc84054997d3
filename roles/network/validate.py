"""network's rules for the inventory: the fabric (its rate, HCAs, interfaces, RoCE/IPoIB
settings, each node's fabric addresses) and the VLANs (ids, names, each node's VLAN
addresses). Declared in roles/network/__init__.py (`Component.validate`)."""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import TYPE_CHECKING

from gpuctl.catalog import Sku, load_health
from gpuctl.validation import Findings

if TYPE_CHECKING:
    from gpuctl.inventory import Inventory


def fabric_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """The fabric: a known rate for its type, HCA and interface counts, fabric addresses in its network."""
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
    """VLAN ids and names unique; node VLAN addresses in their VLAN, used once."""
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
