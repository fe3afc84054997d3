"""Checks of the network role: RDMA fabric ports (state, link layer, rate), their addresses
and RoCE GIDs, VLANs up with their addresses, and the kernel modules the fabric needs.

Port state comes from `rdma -j link` (the kernel's view, the same for mlx5 and Soft-RoCE),
link layer from `ibv_devinfo`, rate from `ibstat`. A Soft-RoCE device (rdma_rxe) has no
line rate of its own: its Ethernet netdev's speed is judged instead, and where the netdev
reports none the rate is "not applicable: soft-roce device", never passed.
"""

from __future__ import annotations

import pytest

from gpuctl import healthpolicy
from gpuctl.checks.api import (
    CouldNotRun,
    Remediation,
    component_checks,
    expect,
    fail,
    for_each,
    judge_firmware_lock,
    judge_health,
    judge_verdicts,
)
from gpuctl.health import load_previous
from gpuctl.parsers.rdma import link_as_ib_port, roce_v2_ipv4_gid_index
from gpuctl.verdicts import Subject, judge_port_rate, judge_port_state

ROLE = "network"


def hca_items(spec):
    return [p.hca for p in spec.fabric.ports] if spec.fabric.type != "none" else []


def addressed_port_items(spec):
    return [p.interface for p in spec.fabric.ports if p.address] if spec.fabric.type != "none" else []


def _port(spec, hca):
    return next(p for p in spec.fabric.ports if p.hca == hca)


globals().update(component_checks(ROLE))  # packages pinned/held, services, modules (declared)


@for_each(hca_items)
def test_fabric_port_state(host, spec, probe, item):
    links = [link for link in probe.rdma_links().values() if link.device == item]
    if not links:
        devices = sorted({link.device for link in probe.rdma_links().values()})
        fail(f"RDMA device {item} does not exist", expected=f"{item} port ACTIVE/LINK_UP",
             found=f"devices: {', '.join(devices) or 'none'}",
             remediation=Remediation.RECONFIGURE if spec.fabric.soft_roce else Remediation.RESEAT_OR_REPLACE)
    # judged by gpuctl.verdicts.judge_port_state, the rule `gpuctl analyze ibstat` applies
    down = [link for link in links if link.state != "ACTIVE" or link.physical_state != "LINK_UP"]
    judge_verdicts([judge_port_state(link_as_ib_port(link), Subject(spec.node, port=f"{link.device}/{link.port}"),
                                     "rdma link") for link in links],
                   expected=lambda v: "ACTIVE/LINK_UP",
                   found=lambda v: ", ".join(f"{d.device}/{d.port} {d.state}/{d.physical_state}" for d in down))


@for_each(hca_items)
def test_fabric_link_layer(host, spec, probe, item):
    ports = [p for p in probe.verbs_ports().ports if p.ca == item]
    if not ports:
        raise CouldNotRun(f"ibv_devinfo lists no {item}; see {ROLE}.fabric_port_state[{item}]")
    want = spec.fabric.link_layer
    wrong = [p for p in ports if p.link_layer != want]
    expect(not wrong, f"{item}: link layer {wrong[0].link_layer if wrong else ''}, the fabric is {spec.fabric.type}",
           expected=want, found=", ".join(f"{p.name} {p.link_layer}" for p in wrong),
           remediation=Remediation.RECONFIGURE)


@for_each(hca_items)
def test_fabric_port_rate(host, spec, probe, item):
    want = spec.fabric.rate_gbps
    if want is None:
        pytest.skip("not applicable: the inventory names no fabric rate")
    if spec.fabric.soft_roce:
        # Soft-RoCE has no line rate of its own (rdma_rxe reports a fixed IB rate): the rate
        # it runs at is its Ethernet netdev's, so that is what is judged.
        netdev = _port(spec, item).interface
        text = probe.file(f"/sys/class/net/{netdev}/speed")
        mbps = int(text.strip()) if text and text.strip().lstrip("-").isdigit() else -1
        if mbps <= 0:
            pytest.skip(f"not applicable: soft-roce device ({item} over {netdev}, whose speed is unknown; the "
                        f"SKU's {want} Gb/s applies to a hardware port)")
        gbps = mbps / 1000
        expect(gbps >= want, f"{item}: soft-roce over {netdev} at {gbps:g} Gb/s, expected {want} Gb/s",
               expected=f"{want} Gb/s", found=f"{netdev} {gbps:g} Gb/s (netdev speed)",
               remediation=Remediation.RESEAT_OR_REPLACE)
        return
    ports = [p for p in probe.ibstat().ports if p.ca == item]
    if not ports:
        raise CouldNotRun(f"ibstat lists no {item}; see {ROLE}.fabric_port_state[{item}]")
    ca_type = next((ca.ca_type for ca in probe.ibstat().cas if ca.name == item), None)
    judge_verdicts([judge_port_rate(p.rate_gbps, want, Subject(spec.node, port=p.name), "inventory fabric.rate_gbps",
                                    ca_type) for p in ports if p.rate_gbps is not None],
                   expected=lambda v: f"{v.threshold:g} Gb/s", found=lambda v: f"{v.subject.port} {v.value:g} Gb/s")


@for_each(addressed_port_items)
def test_fabric_address(host, spec, probe, item):
    port = next(p for p in spec.fabric.ports if p.interface == item)
    iface = probe.interfaces().get(item)
    if iface is None:
        fail(f"fabric interface {item} does not exist", expected=f"{item} with {port.address}", found="missing",
             remediation=Remediation.RECONFIGURE)
    expect(port.address in iface.addresses, f"{item} lacks {port.address}", expected=port.address,
           found=", ".join(iface.addresses) or "no IPv4 address", remediation=Remediation.RECONFIGURE)
    if spec.fabric.mtu:
        expect(iface.mtu == spec.fabric.mtu, f"{item} MTU {iface.mtu}", expected=f"MTU {spec.fabric.mtu}",
               found=f"MTU {iface.mtu}", remediation=Remediation.RECONFIGURE)


@for_each(lambda spec: [p.hca for p in spec.fabric.ports if p.address] if spec.fabric.type == "roce" else [])
def test_roce_gid(host, spec, probe, item):
    """A RoCE v2 GID carrying the port's IPv4 address (what NCCL and perftest use)."""
    port = _port(spec, item)
    address = port.address.split("/")[0]
    dev = probe.gids().devices.get(item)
    gids = dev.gids if dev else ()
    index = roce_v2_ipv4_gid_index(dev, port.interface, address) if dev else None
    expect(index is not None, f"{item}: no RoCE v2 GID for {address} on {port.interface}",
           expected=f"RoCE v2 GID ::ffff:{address}",
           found=", ".join(f"{g.index}:{g.type or '?'}:{g.ipv4 or g.gid}" for g in gids) or "no GIDs",
           remediation=Remediation.RECONFIGURE)


@for_each(lambda spec: [v.interface for v in spec.vlans])
def test_vlan_up(host, spec, probe, item):
    vlan = next(v for v in spec.vlans if v.interface == item)
    iface = probe.interfaces().get(item)
    if iface is None:
        fail(f"VLAN interface {item} does not exist", expected=f"{item}: VLAN {vlan.id} on {vlan.parent}, up",
             found="missing", remediation=Remediation.RECONFIGURE)
    expect(iface.kind == "vlan" and iface.vlan_id == vlan.id and iface.parent == vlan.parent,
           f"{item} is not VLAN {vlan.id} on {vlan.parent}", expected=f"vlan id {vlan.id} on {vlan.parent}",
           found=f"{iface.kind or 'not a vlan'} id {iface.vlan_id} on {iface.parent}",
           remediation=Remediation.RECONFIGURE)
    expect(iface.up, f"{item} is {iface.operstate}", expected="UP,LOWER_UP",
           found=",".join(iface.flags) + f" ({iface.operstate})", remediation=Remediation.RECONFIGURE)


@for_each(lambda spec: [v.interface for v in spec.vlans if v.address])
def test_vlan_address(host, spec, probe, item):
    vlan = next(v for v in spec.vlans if v.interface == item)
    iface = probe.interfaces().get(item)
    if iface is None:
        raise CouldNotRun(f"{item} does not exist; see {ROLE}.vlan_up[{item}]")
    expect(vlan.address in iface.addresses, f"{item} lacks {vlan.address}", expected=vlan.address,
           found=", ".join(iface.addresses) or "no IPv4 address", remediation=Remediation.RECONFIGURE)


def test_health_ib_counters(host, spec, probe):
    """IB port error counters (health.yaml counter_rises.infiniband) as the change since the last
    `gpuctl health` sample (`gpuctl.healthpolicy.judge_ib_counters`, the counter rule of analyze);
    verify reads that sample, never writes it: without one the check is skipped, not passed."""

    if spec.fabric.type == "none":
        pytest.skip("no fabric")
    previous = load_previous(spec.cluster, spec.node) or {}
    judge_health(healthpolicy.judge_ib_counters(probe.pci_sysfs(), previous.get("ib_counters")))


def test_health_hca_firmware(host, spec, probe, locked_firmware):
    """Every HCA's firmware (sysfs fw_ver) as the lock file records it for this node
    (`gpuctl.healthpolicy.judge_firmware`, as `gpuctl health`); skipped without a lock entry."""
    if spec.fabric.type == "none":
        pytest.skip("no fabric")
    judge_firmware_lock(spec, healthpolicy.hca_firmware(probe.pci_sysfs()), locked_firmware)
