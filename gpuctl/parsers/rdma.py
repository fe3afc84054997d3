"""RDMA devices: the GID tables (RoCE v2 GID index discovery) and `rdma -j link` (`ibv_devinfo`
is read by `gpuctl.parsers.ibv_devinfo`, into ibstat's types).

One `Gid` type and one reading of the GID table (`rdma_command` → `parse_rdma`) for the
network role's install side (`gpuctl.facts.network.RdmaPorts`, NCCL_IB_GID_INDEX) and
verify's probe (`network.roce_gid`); one rule finds the RoCE v2 GID of a port
(`roce_v2_ipv4_gid_index`). Pure functions apart from the command builder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.parsers.ibstat import IbPort
from gpuctl.shellcmd import sh

# ---------------------------------------------------------------- GID tables


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str  # "RoCE v2", "IB/RoCE v1", "" when unset
    ndev: str = "-"  # the netdev the GID belongs to ("-" when sysfs does not say)

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID (0000:…:ffff:c0a8:320b → 192.168.50.11), else None."""
        parts = self.gid.split(":")
        try:
            if len(parts) != 8 or any(int(p, 16) for p in parts[:5]) or parts[5].lower() != "ffff":
                return None
            hi, lo = int(parts[6], 16), int(parts[7], 16)
        except ValueError:
            return None
        return f"{hi >> 8}.{hi & 255}.{lo >> 8}.{lo & 255}"


@dataclass(frozen=True)
class RdmaDev:
    name: str
    driver: str  # "mlx5_core", "none" (Soft-RoCE rxe has no PCI device)
    gids: tuple[Gid, ...] = ()
    ecn_sysfs: bool = False  # /sys/class/net/<netdev>/ecn/roce_np exists
    netdev: str = ""

    @property
    def is_connectx(self) -> bool:
        return self.driver.startswith("mlx5")


@dataclass(frozen=True)
class RdmaState:
    devices: dict[str, RdmaDev] = field(default_factory=dict)
    tools: frozenset[str] = frozenset()  # of mlnx_qos, cma_roce_mode present


def rdma_command(ports: list[tuple[str, str]]) -> str:
    """Shell that prints the GID table and driver of each (hca, netdev) port 1."""
    parts = ["for t in mlnx_qos cma_roce_mode; do command -v $t >/dev/null 2>&1 && echo \"tool $t\"; done"]
    for hca, netdev in ports:
        h, n = sh(hca), sh(netdev)
        parts.append(
            f"p=/sys/class/infiniband/{h}/ports/1; if [ -d $p ]; then "
            f"drv=$(basename \"$(readlink -f /sys/class/infiniband/{h}/device/driver 2>/dev/null)\" 2>/dev/null); "
            # names go to printf as separate quoted words: inside "..." a shlex-quoted name would run
            f"printf 'dev %s %s %s\\n' {h} \"${{drv:-none}}\" {n}; "
            f"[ -d /sys/class/net/{n}/ecn/roce_np ] && printf 'ecn %s\\n' {h}; "
            # the shell's own `read`, no process per entry (Soft-RoCE's table has 1024 entries,
            # ConnectX's 255); an unused entry's type cannot be read (EINVAL) and is skipped
            "for g in $p/gids/*; do i=${g##*/}; t=; read -r t 2>/dev/null <\"$p/gid_attrs/types/$i\"; "
            "[ -n \"$t\" ] || continue; v=; read -r v 2>/dev/null <\"$g\"; "
            "d=; read -r d 2>/dev/null <\"$p/gid_attrs/ndevs/$i\"; "
            f"printf 'gid %s %s %s %s %s\\n' {h} \"$i\" \"$v\" \"${{d:--}}\" \"$t\"; done; "
            f"else printf 'absent %s\\n' {h}; fi"
        )
    return "; ".join(parts)


def parse_rdma(text: str) -> RdmaState:
    """Output of `rdma_command` → RdmaState."""
    tools: set[str] = set()
    devs: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        w = line.split()
        if not w:
            continue
        if w[0] == "tool" and len(w) == 2:
            tools.add(w[1])
        elif w[0] == "dev" and len(w) == 4:
            devs[w[1]] = {"name": w[1], "driver": w[2], "netdev": w[3], "gids": [], "ecn_sysfs": False}
        elif w[0] == "ecn" and len(w) == 2 and w[1] in devs:
            devs[w[1]]["ecn_sysfs"] = True
        elif w[0] == "gid" and len(w) >= 6 and w[1] in devs:
            if not w[2].isdigit():
                raise ParseError(f"GID line with a bad index: {line!r}")
            devs[w[1]]["gids"].append(Gid(int(w[2]), w[3], " ".join(w[5:]), w[4]))
        elif w[0] == "absent":
            continue
        else:
            raise ParseError(f"unexpected line in the RDMA device listing: {line!r}")
    return RdmaState(
        devices={k: RdmaDev(name=v["name"], driver=v["driver"], gids=tuple(v["gids"]), ecn_sysfs=v["ecn_sysfs"],
                            netdev=v["netdev"]) for k, v in devs.items()},
        tools=frozenset(tools),
    )


_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def roce_v2_ipv4_gid_index(dev: RdmaDev, netdev: str, address: str | None = None) -> int | None:
    """The GID index NCCL must use: RoCE v2, IPv4-mapped, on NETDEV (and ADDRESS when given).

    Lowest such index; None when the table has none (no address yet, or not RoCE).
    """
    want = address.split("/")[0] if address else None
    hits = sorted(
        g.index for g in dev.gids
        if g.type == "RoCE v2" and g.gid != _ZERO_GID and g.ipv4 and g.ndev in (netdev, "-")
        and (want is None or g.ipv4 == want)
    )
    return hits[0] if hits else None


# ---------------------------------------------------------------- rdma link


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


# `rdma link` words → ibstat's (rdma-core's enum names, as parsers.ibv_devinfo maps them)
_LINK_STATE = {"ACTIVE": "Active", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed",
               "ACTIVE_DEFER": "ActiveDefer", "NOP": "Nop"}
_LINK_PHYS = {"LINK_UP": "LinkUp", "POLLING": "Polling", "DISABLED": "Disabled", "SLEEP": "Sleep",
              "LINK_ERROR_RECOVERY": "LinkErrorRecovery", "PHY_TEST": "PhyTest"}


def link_as_ib_port(link: RdmaLink) -> IbPort:
    """An `rdma link` port as ibstat's `IbPort` (state words mapped; no rate, link layer unknown),
    so one rule (`gpuctl.verdicts.judge_port_state`) judges both."""
    return IbPort(ca=link.device, number=link.port, state=_LINK_STATE.get(link.state, link.state),
                  physical_state=_LINK_PHYS.get(link.physical_state, link.physical_state), rate_gbps=None,
                  link_layer="unknown", base_lid=None, sm_lid=None, port_guid=None)
