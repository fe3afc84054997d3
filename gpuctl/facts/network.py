"""Network facts for the network role: the management interface, live links and addresses,
RDMA devices with their GID tables (RoCE v2 GID index discovery), NIC QoS tooling,
and active firewalls (unit states: `gpuctl.facts.system.ServiceStates`).

Each fact's `process` calls a pure parser of `gpuctl.parsers.net` / `gpuctl.parsers.rdma`
(the ones verify's probe uses too), unit-tested on recorded outputs.
"""

from __future__ import annotations

import logging

from pyinfra.api import FactBase

from gpuctl.parsers.net import FirewallState, Interface, parse_firewall, parse_ip_addr, parse_route_dev
from gpuctl.parsers.rdma import RdmaState, parse_rdma, rdma_command
from gpuctl.shellcmd import sh

log = logging.getLogger(__name__)




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
    def default() -> dict[str, Interface]:
        return {}

    def process(self, output: list[str]) -> dict[str, Interface]:
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


class ModulesLoaded(FactBase):
    """Which of the given kernel modules are loaded (/sys/module/<name>; tolerant of built-ins)."""

    def command(self, names: list[str]) -> str:
        return "; ".join(f"[ -d /sys/module/{sh(n)} ] && echo {sh(n)}" for n in names) + "; true"

    @staticmethod
    def default() -> frozenset[str]:
        return frozenset()

    def process(self, output: list[str]) -> frozenset[str]:
        return frozenset(x.strip() for x in output if x.strip())
