"""Links and addresses (`ip -d -j addr show`, `ip -o route`) and the firewall listing.

One `Interface` type for the network role's facts (`gpuctl.facts.network`) and verify's
probe. Pure functions: text in, data out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gpuctl.errors import ParseError

_DEV = re.compile(r"\bdev\s+(\S+)")


def parse_route_dev(text: str) -> str:
    """`ip -o route get ADDR` / `ip -o route show default` → the interface ("" if none)."""
    m = _DEV.search(text)
    return m.group(1) if m else ""


@dataclass(frozen=True)
class Interface:
    name: str
    operstate: str
    flags: tuple[str, ...]
    mtu: int | None
    kind: str | None  # "vlan" for 802.1Q, "ipoib", … (ip -d); None for a plain device
    vlan_id: int | None
    parent: str | None
    addresses: tuple[str, ...]  # "10.100.0.11/24"

    @property
    def admin_up(self) -> bool:
        """Set up (`ip link set … up`), carrier or not."""
        return "UP" in self.flags

    @property
    def up(self) -> bool:
        """Up with a carrier (UP and LOWER_UP)."""
        return "UP" in self.flags and "LOWER_UP" in self.flags


def parse_ip_addr(text: str) -> dict[str, Interface]:
    """`ip -d -j addr show` → name → interface (empty output: no interfaces)."""
    try:
        data = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as exc:
        raise ParseError(f"ip -j addr: not JSON ({exc}): {text[:200]!r}") from None
    out = {}
    for item in data:
        if not isinstance(item, dict) or "ifname" not in item:
            continue
        info = item.get("linkinfo") or {}
        data_ = info.get("info_data") or {}
        addrs = tuple(f"{a['local']}/{a['prefixlen']}" for a in item.get("addr_info") or []
                      if a.get("family") == "inet" and "local" in a)
        mtu = item.get("mtu")
        out[item["ifname"]] = Interface(
            item["ifname"], item.get("operstate", ""), tuple(item.get("flags") or []),
            int(mtu) if mtu is not None else None, info.get("info_kind"), data_.get("id"), item.get("link"), addrs)
    return out


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

