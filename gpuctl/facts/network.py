"""Network facts for the network role: the management interface, live links and addresses,
RDMA devices with their GID tables (RoCE v2 GID index discovery), NIC QoS tooling,
active firewalls and unit states.

Each fact's `process` calls a pure parser in this module, unit-tested on recorded outputs.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from pyinfra.api import FactBase

from gpuctl.errors import ParseError
from gpuctl.shellcmd import sh

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- parsers (pure)

_DEV = re.compile(r"\bdev\s+(\S+)")


def parse_route_dev(text: str) -> str:
    """`ip -o route get ADDR` / `ip -o route show default` → the interface ("" if none)."""
    m = _DEV.search(text)
    return m.group(1) if m else ""


@dataclass(frozen=True)
class Link:
    name: str
    operstate: str
    mtu: int
    up: bool
    addresses: tuple[str, ...]  # "192.168.50.11/24"
    kind: str = ""  # "vlan", "ipoib", … (ip -d)
    parent: str | None = None


def parse_ip_addr(text: str) -> dict[str, Link]:
    """`ip -d -j addr show` → {ifname: Link}."""
    try:
        rows = json.loads(text) if text.strip() else []
    except ValueError as e:
        raise ParseError(f"ip -j addr output unreadable ({e}): {text[:200]!r}") from e
    out = {}
    for r in rows:
        info = r.get("linkinfo") or {}
        out[r["ifname"]] = Link(
            name=r["ifname"], operstate=r.get("operstate", ""), mtu=int(r.get("mtu") or 0),
            up="UP" in (r.get("flags") or []),
            addresses=tuple(f"{a['local']}/{a['prefixlen']}" for a in r.get("addr_info") or []
                            if a.get("family") == "inet"),
            kind=info.get("info_kind", ""), parent=r.get("link"),
        )
    return out


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    ndev: str
    type: str  # "RoCE v2", "RoCE v1", "IB"

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
        parts = self.gid.split(":")
        if len(parts) != 8 or any(int(p, 16) for p in parts[:5]) or parts[5].lower() != "ffff":
            return None
        hi, lo = int(parts[6], 16), int(parts[7], 16)
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
            "for g in $p/gids/*; do i=${g##*/}; t=$(cat $p/gid_attrs/types/$i 2>/dev/null) || continue; "
            f"printf 'gid %s %s %s %s %s\\n' {h} \"$i\" \"$(cat $g)\" "
            "\"$(cat $p/gid_attrs/ndevs/$i 2>/dev/null || echo -)\" \"$t\"; done; "
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
            devs[w[1]]["gids"].append(Gid(int(w[2]), w[3], w[4], " ".join(w[5:])))
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


@dataclass(frozen=True)
class FirewallState:
    active: str | None  # "firewalld" | "ufw" | "nftables" | None
    rules: str = ""  # the listing used to tell whether our rules are present


def parse_firewall(text: str) -> FirewallState:
    """Output of `FirewallStatus`: `svc <name> <is-active>` lines, `ufw <Status: …>`, then `rules` and the listing."""
    state: dict[str, str] = {}
    ufw_enabled = False
    rules: list[str] = []
    in_rules = False
    for line in text.splitlines():
        if in_rules:
            rules.append(line)
            continue
        w = line.split()
        if line.strip() == "rules":
            in_rules = True
        elif len(w) >= 3 and w[0] == "svc":
            state[w[1]] = w[2]
        elif w[:1] == ["ufw"]:
            ufw_enabled = "Status: active" in line
    if state.get("firewalld") == "active":
        active: str | None = "firewalld"
    elif state.get("ufw") == "active" and ufw_enabled:
        active = "ufw"
    elif state.get("nftables") == "active":
        active = "nftables"
    else:
        active = None
    return FirewallState(active=active, rules="\n".join(rules))


# ---------------------------------------------------------------- pyinfra facts

class MgmtInterface(FactBase):
    """The interface carrying this SSH session (route to $SSH_CONNECTION's client), else the default route's."""

    def command(self) -> str:
        return ('c="${SSH_CONNECTION%% *}"; if [ -n "$c" ]; then ip -o route get "$c"; '
                'else ip -o route show default; fi')

    @staticmethod
    def default() -> str:
        return ""

    def process(self, output: list[str]) -> str:
        return parse_route_dev("\n".join(output))


class Links(FactBase):
    """Every link with its IPv4 addresses (`ip -d -j addr show`)."""

    def command(self) -> str:
        return "ip -d -j addr show"

    @staticmethod
    def default() -> dict[str, Link]:
        return {}

    def process(self, output: list[str]) -> dict[str, Link]:
        return parse_ip_addr("\n".join(output))


class RdmaPorts(FactBase):
    """RDMA devices of the given (hca, netdev) ports: driver, GID table, ECN sysfs; QoS tools present."""

    def command(self, ports: list[tuple[str, str]]) -> str:
        return rdma_command(ports)

    @staticmethod
    def default() -> RdmaState:
        return RdmaState()

    def process(self, output: list[str]) -> RdmaState:
        return parse_rdma("\n".join(output))


class FirewallStatus(FactBase):
    """Which firewall is active (firewalld, ufw, nftables) and its rule listing."""

    def command(self) -> str:
        return (
            "for s in firewalld ufw nftables; do echo \"svc $s $(systemctl is-active $s 2>/dev/null || true)\"; done; "
            "echo \"ufw $(ufw status 2>/dev/null | head -n1)\"; echo rules; "
            "(firewall-cmd --permanent --zone=trusted --list-all 2>/dev/null; ufw status 2>/dev/null; "
            "nft list ruleset 2>/dev/null) | grep -i 'gpuctl\\|interfaces:\\|4791' || true"
        )

    @staticmethod
    def default() -> FirewallState:
        return FirewallState(active=None)

    def process(self, output: list[str]) -> FirewallState:
        return parse_firewall("\n".join(output))


class UnitState(FactBase):
    """(`systemctl is-enabled`, `systemctl is-active`) of UNIT."""

    def command(self, unit: str) -> str:
        u = sh(unit)
        return (f"echo \"$(systemctl is-enabled {u} 2>/dev/null || true) "
                f"$(systemctl is-active {u} 2>/dev/null || true)\"")

    @staticmethod
    def default() -> tuple[str, str]:
        return ("", "")

    def process(self, output: list[str]) -> tuple[str, str]:
        w = " ".join(output).split()
        return (w[0] if w else "", w[1] if len(w) > 1 else "")


class ModulesLoaded(FactBase):
    """Which of the given kernel modules are loaded (/sys/module/<name>; tolerant of built-ins)."""

    def command(self, names: list[str]) -> str:
        return "; ".join(f"[ -d /sys/module/{sh(n)} ] && echo {sh(n)}" for n in names) + "; true"

    @staticmethod
    def default() -> frozenset[str]:
        return frozenset()

    def process(self, output: list[str]) -> frozenset[str]:
        return frozenset(x.strip() for x in output if x.strip())
