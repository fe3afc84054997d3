"""package_mirror's rules for the inventory: the package cache host (`repos.cache_host`) is a
node the others can reach, and the upstream proxy's port is one apt-cacher-ng reads right.
Declared in roles/package_mirror/__init__.py (`Component.validate`)."""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import TYPE_CHECKING

from gpuctl.catalog import Sku
from gpuctl.repocache import ACNG_MAX_PROXY_PORT
from gpuctl.validation import Findings

if TYPE_CHECKING:
    from gpuctl.inventory import Inventory


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def package_cache_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """The package cache host: a node the others reach, an upstream proxy port apt-cacher-ng reads."""
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
