"""network: fabric ports (IPoIB / RoCE) and 802.1Q VLANs with their addresses, lossless RoCE
settings, Soft-RoCE in the lab, firewall openings and /etc/nccl.conf — all from the NodeSpec.

Never touches the management interface: the interface carrying the SSH session is read
first, and a NodeSpec that would reconfigure it, or the inventory's `management.interface`,
fails the host before anything changes.
Only the interfaces this role manages are brought up (`ifup <if>`, `networkctl reconfigure
<if>`, `nmcli connection up gpuctl-<if>`); nothing runs `netplan apply` or restarts networking.
NIC controls that a device lacks (Soft-RoCE has no DSCP trust, PFC, ECN or RoCE-mode switch)
are reported as "not applicable" operations naming the device, never skipped silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from io import StringIO
from typing import Any

import jinja2
from pyinfra import host, state
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.operations import apt, dnf, files, server

from gpuctl.deploy_context import node_spec
from gpuctl.facts.network import (
    FirewallStatus,
    Links,
    MgmtInterface,
    ModulesLoaded,
    RdmaPorts,
)
from gpuctl.facts.storage import TextFile
from gpuctl.facts.system import ServiceStates
from gpuctl.operations import fail_commands, fail_host, report, role_knobs, sh, template_env
from gpuctl.parsers.rdma import roce_v2_ipv4_gid_index
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)


def defaults() -> dict[str, Any]:
    """defaults.yaml with overrides (host data > --extra > inventory role_vars)."""

    return role_knobs("network")


@cache
def _env() -> jinja2.Environment:
    return template_env("network", trim=False)


def render(template: str, **data: Any) -> str:
    return _env().get_template(template).render(**data)


@dataclass(frozen=True)
class Iface:
    """One interface this role configures."""

    ifname: str
    address: str
    mtu: int | None
    description: str
    nm_type: str  # ethernet | infiniband | vlan
    vlan_id: int | None = None
    vlan_raw_device: str | None = None
    ipoib_mode: str | None = None


def managed_interfaces(spec: NodeSpec) -> list[Iface]:
    """Fabric ports then VLANs, each with an address in the NodeSpec (ports without one are left alone)."""
    f = spec.fabric
    out = []
    for p in f.ports:
        if p.address:
            ib = f.type == "infiniband"
            out.append(Iface(ifname=p.interface, address=p.address, mtu=f.mtu,
                             description=f"{f.type} port of {p.hca}", nm_type="infiniband" if ib else "ethernet",
                             ipoib_mode=f.ipoib_mode if ib else None))
    for v in spec.vlans:
        if v.address:
            out.append(Iface(ifname=v.interface, address=v.address, mtu=v.mtu,
                             description=f"VLAN {v.id} ({v.name}) on {v.parent}", nm_type="vlan",
                             vlan_id=v.id, vlan_raw_device=v.parent))
    return out


# ---------------------------------------------------------------- operations

@operation()
def rendered(path: str, content: str, mode: str = "644") -> Any:
    """PATH holds exactly CONTENT (compared line by line; uploaded when different)."""
    if "\n".join(host.get_fact(TextFile, path=path)).rstrip("\n") == content.rstrip("\n"):
        host.noop(f"{path} is up to date")
        return
    yield from files.put._inner(src=StringIO(content), dest=path, mode=mode)


@operation()
def line_in_file(path: str, line: str) -> Any:
    """LINE present in PATH (appended when missing; nothing else in the file changes)."""
    if line in host.get_fact(TextFile, path=path):
        host.noop(f"{path} has '{line}'")
        return
    yield sh("printf", "%s\\n", line) + " >> " + sh(path)


@operation()
def modules_loaded(names: list[str]) -> Any:
    loaded = host.get_fact(ModulesLoaded, names=names)
    missing = [n for n in names if n not in loaded]
    if not missing:
        host.noop(f"{', '.join(names)} loaded")
        return
    for n in missing:
        yield sh("modprobe", n)


@operation()
def link_up(iface: Iface, command: str) -> Any:
    """IFACE up with its address and MTU; runs COMMAND (which touches IFACE only) when not."""
    link = host.get_fact(Links).get(iface.ifname)
    if link and link.admin_up and iface.address in link.addresses and (not iface.mtu or link.mtu == iface.mtu):
        host.noop(f"{iface.ifname} is up with {iface.address}" + (f", MTU {iface.mtu}" if iface.mtu else ""))
        return
    yield command


@operation()
def unit_running(unit: str) -> Any:
    state = host.get_fact(ServiceStates, names=(unit,)).get(unit.removesuffix(".service"))
    if state is not None and state.enabled == "enabled" and state.active == "active":
        host.noop(f"{unit} is enabled and active")
        return
    yield f"systemctl daemon-reload && {sh('systemctl', 'enable', '--now', unit)}"


@operation()
def firewall_open(ifnames: list[str], udp_port: int | None) -> Any:
    """Let fabric traffic (IPoIB/RoCE, NCCL bootstrap) and RoCE v2 UDP through the active firewall."""
    fw = host.get_fact(FirewallStatus)
    port = f"{udp_port}/udp" if udp_port else None
    if fw.active is None:
        host.noop("firewall rules for the fabric: not applicable (no active firewalld, ufw or nftables)")
        return
    cmds = []
    if fw.active == "firewalld":
        trusted = next((x.split(":", 1)[1].split() for x in fw.rules.splitlines() if "interfaces:" in x), [])
        cmds += [sh("firewall-cmd", "--permanent", "--zone=trusted", f"--add-interface={i}")
                 for i in ifnames if i not in trusted]
        if port and port not in fw.rules:
            cmds.append(f"firewall-cmd --permanent --zone=trusted --add-port={port}")
        if cmds:
            cmds.append("firewall-cmd --reload")
    elif fw.active == "ufw":
        cmds += [sh("ufw", "allow", "in", "on", i, "comment", "gpuctl-fabric") for i in ifnames
                 if f"on {i}" not in fw.rules]
        if port and port not in fw.rules:
            cmds.append(f"ufw allow {port} comment gpuctl-rdma")
    else:  # nftables: runtime rules in the standard inet filter input chain
        cmds += [sh("nft", "insert", "rule", "inet", "filter", "input", "iifname", i, "accept", "comment",
                    "gpuctl-fabric")
                 for i in ifnames if f'iifname "{i}"' not in fw.rules]
        if port and "4791" not in fw.rules:
            cmds.append(f"nft insert rule inet filter input udp dport {udp_port} accept comment gpuctl-rdma")
    if not cmds:
        host.noop(f"{fw.active} already lets the fabric through")
        return
    yield from cmds


def nccl_settings(spec: NodeSpec, index: int | None) -> list[tuple[str, str]]:
    conf = dict(spec.nccl_conf)
    if index is not None:
        conf["NCCL_IB_GID_INDEX"] = str(index)
    return sorted(conf.items())


def discover_gid_index(spec: NodeSpec) -> tuple[int | None, str]:
    """The RoCE v2 IPv4 GID index shared by every fabric port, read now; (None, why) when unknown."""
    ports = [(p.hca, p.interface) for p in spec.fabric.ports]
    rdma = host.get_fact(RdmaPorts, ports=ports)
    found: dict[str, int | None] = {}
    for p in spec.fabric.ports:
        dev = rdma.devices.get(p.hca)
        found[p.hca] = roce_v2_ipv4_gid_index(dev, p.interface, p.address) if dev else None
    missing = [h for h, i in found.items() if i is None]
    if missing:
        return None, f"no RoCE v2 IPv4 GID on {', '.join(missing)} (device absent or no address yet)"
    values = set(found.values())
    if len(values) != 1:
        return None, "the RoCE v2 IPv4 GID index differs between HCAs: " + ", ".join(
            f"{h}={i}" for h, i in found.items()) + "; set fabric.roce.gid_index or fix the GID tables"
    return values.pop(), ""


@operation()
def nccl_conf(spec: NodeSpec, path: str) -> Any:
    """/etc/nccl.conf from the NodeSpec; NCCL_IB_GID_INDEX discovered from the GID table when "auto".

    Decided when the operation runs: on a fresh host the RDMA device (or its address) appears
    earlier in this run, so the index is read at execution time; if it is still unknown then,
    the host fails rather than writing a wrong index.
    """
    note = ""
    index = None
    if spec.fabric.type == "roce" and spec.fabric.roce_gid_index == "auto":
        index, why = discover_gid_index(spec)
        if index is None:
            if state.is_executing:
                yield from fail_commands(f"cannot render {path}: {why}")
            else:
                yield StringCommand(sh(":", f"render {path} once the RoCE v2 GID index is known ({why})"))
            return
        note = f"NCCL_IB_GID_INDEX discovered: RoCE v2 IPv4 GID of {', '.join(p.hca for p in spec.fabric.ports)}"
    content = render("nccl.conf.j2", gid_note=note, settings=nccl_settings(spec, index))
    if "\n".join(host.get_fact(TextFile, path=path)).rstrip("\n") == content.rstrip("\n"):
        host.noop(f"{path} is up to date")
        return
    yield from files.put._inner(src=StringIO(content), dest=path, mode="644")


# ---------------------------------------------------------------- the deploy

def _apply_commands(renderer: str, i: Iface) -> tuple[str, str]:
    """(reload after a config change, bring up when down) — both touch only I."""
    n = sh(i.ifname)
    if renderer == "ifupdown":
        return f"(ifdown --force {n} 2>/dev/null || true) && ifup {n}", f"ifup {n}"
    if renderer == "netplan":
        return f"networkctl reconfigure {n}", f"networkctl reconfigure {n}"
    con = sh(f"gpuctl-{i.ifname}")
    return f"nmcli connection up {con}", f"nmcli connection up {con}"


@deploy("network: install")
def install() -> None:
    """Fabric ports, VLANs, RoCE settings, Soft-RoCE (lab), firewall and nccl.conf from the NodeSpec."""
    spec = node_spec()
    d = defaults()
    fabric = spec.fabric
    if fabric.type == "none" and not spec.vlans:
        return
    renderer = d["network_renderer"].get(spec.os_family)
    ifaces = managed_interfaces(spec)

    # 1. never the management interface: the one carrying this SSH session, nor the one the
    # inventory names (management.interface; gpuctl may reach the node another way)
    mgmt = host.get_fact(MgmtInterface)
    declared = spec.management_interface
    clash = [i.ifname for i in ifaces if i.ifname == mgmt]
    declared_clash = [i.ifname for i in ifaces if declared and i.ifname == declared and i.ifname != mgmt]
    if not mgmt or clash or declared_clash or renderer is None:
        why = (f"no network renderer for OS family {spec.os_family}" if renderer is None else
               "cannot tell which interface carries the SSH session (ip route get $SSH_CONNECTION)" if not mgmt else
               f"{mgmt} carries the SSH session gpuctl is using; the inventory would reconfigure it "
               f"({', '.join(clash)}): gpuctl never touches the management interface" if clash else
               f"{declared} is the management interface the inventory names (management.interface); it would "
               f"be reconfigured ({', '.join(declared_clash)}): gpuctl never touches the management interface")
        fail_host(name="Refuse to reconfigure the network", reason=why, remote=True)
        return
    report(name=f"Leave the management interface {mgmt} alone", message=f"{mgmt} carries SSH: never reconfigured")

    # 2. packages and kernel modules
    pk = d["network_packages"][spec.package_manager]
    pkgs = list(pk["base"])
    if spec.vlans and renderer == "ifupdown":
        pkgs += pk["vlan_ifupdown"]
    if fabric.type != "none":
        pkgs += pk["rdma"]
    pkg_op = apt.packages if spec.package_manager == "apt" else dnf.packages
    pkg_op(name=f"Install {', '.join(pkgs)}", packages=pkgs)
    modules = [m.name for m in spec.kernel_modules if m.component == "network"]
    if fabric.type == "infiniband":
        modules.append("ib_ipoib")
    if modules:
        rendered(name=f"Load {', '.join(modules)} at boot", path=d["network_modules_file"],
                 content=render("modules-load.conf.j2", modules=modules))
        modules_loaded(name=f"Load {', '.join(modules)}", names=modules)

    # 3. interfaces: one renderer per OS family, only managed interfaces brought up
    if renderer == "ifupdown":
        line_in_file(name="Source /etc/network/interfaces.d from /etc/network/interfaces",
                     path="/etc/network/interfaces", line=f"source {d['network_ifupdown_dir']}/*")
        for i in ifaces:
            path = f"{d['network_ifupdown_dir']}/{d['network_ifupdown_prefix']}{i.ifname}"
            changed = rendered(name=f"Configure {i.ifname} ({i.address})", path=path, content=render(
                "ifupdown.j2", ifname=i.ifname, address=i.address, mtu=i.mtu, description=i.description,
                vlan_raw_device=i.vlan_raw_device, ipoib_mode=i.ipoib_mode))
            reload_cmd, up_cmd = _apply_commands(renderer, i)
            server.shell(name=f"Reload {i.ifname}", commands=[reload_cmd], _if=changed.did_change)
            link_up(name=f"Bring up {i.ifname}", iface=i, command=up_cmd)
    elif renderer == "netplan":
        content = render("netplan.yaml.j2", node=spec.node,
                         ethernets=[i for i in ifaces if i.nm_type != "vlan"],
                         vlans=[{"ifname": i.ifname, "id": i.vlan_id, "parent": i.vlan_raw_device,
                                 "address": i.address, "mtu": i.mtu} for i in ifaces if i.nm_type == "vlan"])
        changed = rendered(name=f"Configure {', '.join(i.ifname for i in ifaces)} in netplan",
                           path=d["network_netplan_file"], content=content, mode="600")
        server.shell(name="Generate networkd files from netplan (no netplan apply)",
                     commands=["netplan generate", "networkctl reload"], _if=changed.did_change)
        for i in ifaces:
            reload_cmd, up_cmd = _apply_commands(renderer, i)
            server.shell(name=f"Reconfigure {i.ifname}", commands=[reload_cmd], _if=changed.did_change)
            link_up(name=f"Bring up {i.ifname}", iface=i, command=up_cmd)
    else:
        for i in ifaces:
            path = f"{d['network_nm_dir']}/gpuctl-{i.ifname}.nmconnection"
            changed = rendered(name=f"Configure {i.ifname} ({i.address})", path=path, mode="600", content=render(
                "nm-keyfile.nmconnection.j2", ifname=i.ifname, address=i.address, mtu=i.mtu,
                description=i.description, nm_type=i.nm_type, vlan_id=i.vlan_id, vlan_raw_device=i.vlan_raw_device,
                ipoib_mode=i.ipoib_mode))
            reload_cmd, up_cmd = _apply_commands(renderer, i)
            server.shell(name=f"Reload {i.ifname}", commands=["nmcli connection reload", reload_cmd],
                         _if=changed.did_change)
            link_up(name=f"Bring up {i.ifname}", iface=i, command=up_cmd)

    # 4. lab only: Soft-RoCE devices on the fabric netdevs, persistent
    if fabric.soft_roce:
        for p in fabric.ports:
            unit = f"{d['network_soft_roce_unit_prefix']}{p.hca}.service"
            changed = rendered(name=f"Define Soft-RoCE {p.hca} on {p.interface} (lab)",
                               path=f"/etc/systemd/system/{unit}",
                               content=render("soft-roce.service.j2", hca=p.hca, netdev=p.interface))
            server.shell(name=f"Reload {unit}", commands=["systemctl daemon-reload"], _if=changed.did_change)
            unit_running(name=f"Start {unit}", unit=unit)

    # 5. lossless RoCE on ConnectX; "not applicable" named per device otherwise
    if fabric.type == "roce":
        rdma = host.get_fact(RdmaPorts, ports=[(p.hca, p.interface) for p in fabric.ports])
        qos_ports = []
        for p in fabric.ports:
            dev = rdma.devices.get(p.hca)
            if dev is None or not dev.is_connectx:
                kind = ("Soft-RoCE (rdma_rxe), created by this role" if fabric.soft_roce else
                        "absent" if dev is None else f"driver {dev.driver}, not ConnectX")
                report(name=f"RoCE v2 mode, DSCP trust, PFC, ECN on {p.hca}: not applicable",
                       message=f"not applicable on {p.hca}/{p.interface} ({kind}): cma_roce_mode, mlnx_qos --trust "
                               f"dscp --pfc and ECN sysfs exist only on ConnectX; Soft-RoCE speaks RoCE v2 only")
                continue
            missing = [t for t in ("cma_roce_mode", "mlnx_qos") if t not in rdma.tools]
            if missing:
                report(name=f"{', '.join(missing)} on {p.hca}: not applicable (not installed)",
                       message=f"{', '.join(missing)} not installed (DOCA-OFED / MLNX_OFED provide them): "
                               f"those settings are not applied on {p.hca}")
            if fabric.roce_ecn and not dev.ecn_sysfs:
                report(name=f"ECN on {p.interface}: not applicable (no /sys/class/net/{p.interface}/ecn)",
                       message=f"{p.interface} has no ECN sysfs")
            qos_ports.append({"hca": p.hca, "netdev": p.interface, "cma": "cma_roce_mode" in rdma.tools,
                              "qos": "mlnx_qos" in rdma.tools, "tos": True,
                              "ecn": bool(fabric.roce_ecn and dev.ecn_sysfs)})
        if qos_ports:
            prio = fabric.roce_pfc_priority if fabric.roce_pfc_priority is not None else 3
            pfc = ",".join("1" if k == prio else "0" for k in range(8))
            script = d["network_roce_qos_script"]
            s = rendered(name="Write the lossless RoCE settings script", path=script, mode="755", content=render(
                "roce-qos.sh.j2", ports=qos_ports, pfc=pfc, priority=prio, ecn_value=1,
                traffic_class=fabric.roce_traffic_class))
            unit = d["network_roce_qos_unit"]
            u = rendered(name=f"Define {unit}", path=f"/etc/systemd/system/{unit}", content=render(
                "roce-qos.service.j2", ports=", ".join(p["hca"] for p in qos_ports), script=script))
            unit_running(name=f"Enable {unit}", unit=unit)
            server.shell(name="Apply RoCE v2 mode, DSCP trust, PFC and ECN now",
                         commands=["systemctl daemon-reload", sh("systemctl", "restart", unit)],
                         _if=lambda: bool(s.did_change() or u.did_change()))

    # 6. firewall, 7. nccl.conf
    if fabric.type != "none":
        firewall_open(name="Let fabric traffic through the active firewall",
                      ifnames=[p.interface for p in fabric.ports],
                      udp_port=d["network_roce_udp_port"] if fabric.type == "roce" else None)
        nccl_conf(name=f"Write {d['network_nccl_conf']}", spec=spec, path=d["network_nccl_conf"])
