"""The cluster's package cache as the nodes see it: where it listens and how each node's
repository (and training-environment index) URLs go through it.

Part of resolving the model (`gpuctl.spec.resolve` applies `apply_cache` when the inventory
names `repos.cache_host`): it reads the inventory and the package_mirror role's defaults,
never a host. The workflows around the cache (`gpuctl mirror up`, the wheelhouse, the
offline check) are `gpuctl.mirror`'s. Forms and ports: see that module's docstring.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gpuctl.components import defaults
from gpuctl.errors import InputError

if TYPE_CHECKING:  # NodeSpec's module imports this one (spec.resolve applies the cache); the
    # inventory's, through package_mirror's rules (roles/package_mirror/validate.py), this one's limit
    from gpuctl.inventory import LoadedInventory
    from gpuctl.spec import NodeSpec, RepoSpec

#: Where the cache node reaches its own apt-cacher-ng.
LOOPBACK = "127.0.0.1"
#: apt-cacher-ng 3.7.4 (Debian 12), the cluster package cache, stores its upstream proxy's port
#: signed 16-bit: `Proxy: http://h:42655` reads back as `http://h:-2288…` (`acngtool cfgdump`)
#: and every cache miss fails with "503 Connection refused" (found in the lab, 2026-12-02).
#: The inventory refuses a larger `repos.apt_proxy` port (roles/package_mirror/validate.py).
ACNG_MAX_PROXY_PORT = 32767
_DEFAULT_PORTS = {"http": 80, "https": 443}


def cache_port(loaded: LoadedInventory) -> int:
    """The cache's port: the inventory's `role_vars.package_mirror_port`, else the role's default."""
    override = loaded.inventory.role_vars.get("package_mirror_port")
    return int(override if override is not None else defaults("package_mirror")["package_mirror_port"])


def _knob(loaded: LoadedInventory, key: str) -> Any:
    override = loaded.inventory.role_vars.get(key)
    return override if override is not None else defaults("package_mirror")[key]


def wheels_port(loaded: LoadedInventory) -> int | None:
    """The port the cache host serves the training environment's wheelhouse on, or None when
    it serves none (`package_mirror_wheels` false, or no repos.cache_host)."""
    if loaded.inventory.repos.cache_host is None or _knob(loaded, "package_mirror_wheels") is not True:
        return None
    return int(_knob(loaded, "package_mirror_wheels_port"))


def wheels_dir(loaded: LoadedInventory) -> str:
    return str(_knob(loaded, "package_mirror_wheels_dir"))


def cache_address(loaded: LoadedInventory) -> str | None:
    """How the other nodes reach the cache host: `repos.cache_address`, else its `address`."""
    repos = loaded.inventory.repos
    if repos.cache_host is None:
        return None
    return repos.cache_address or loaded.inventory.node(repos.cache_host).address


def via_cache(url: str, cache: str) -> str:
    """An upstream repository URL in apt-cacher-ng's form: http://cache:3142/host[:port]/path
    (https upstreams: http://cache:3142/HTTPS///host[:port]/path); the upstream's port stays
    in the host part, where apt-cacher-ng reads it (AllowUserPorts must list it)."""
    scheme, _, rest = url.partition("://")
    if scheme == "http":
        return f"{cache.rstrip('/')}/{rest}"
    if scheme == "https":
        return f"{cache.rstrip('/')}/HTTPS///{rest}"
    raise InputError(f"{url}: only http(s) repositories can go through the package cache")


def cache_url(address: str, port: int) -> str:
    try:
        bracket = ipaddress.ip_address(address).version == 6
    except ValueError:
        bracket = False
    return f"http://[{address}]:{port}" if bracket else f"http://{address}:{port}"


def apply_cache(loaded: LoadedInventory, specs: Sequence[NodeSpec], port: int | None = None) -> list[NodeSpec]:
    """NodeSpecs whose repository settings go through the cache host (unchanged without one):
    the cache node through 127.0.0.1, every other node through `cache_address(loaded)`."""
    name = loaded.inventory.repos.cache_host
    remote = cache_address(loaded)
    if name is None or remote is None:
        return list(specs)
    port = cache_port(loaded) if port is None else port
    wheels = wheels_port(loaded)
    out = []
    for s in specs:
        if wheels is not None and s.train_env is not None:  # the training environment from the wheelhouse
            at = LOOPBACK if s.node == name else remote
            te = s.train_env.model_copy(update={"index_url": f"http://{at}:{wheels}/simple"})
            s = s.model_copy(update={"train_env": te})
        if s.repo.url.startswith("file://"):
            out.append(s)
            continue
        address = LOOPBACK if s.node == name else remote
        cache = cache_url(address, port)
        repo = s.repo.model_copy(update={
            "url": via_cache(s.repo.url, cache), "keyring_url": via_cache(s.repo.keyring_url, cache),
            "origin": address, "apt_proxy": cache,
        })
        out.append(s.model_copy(update={"repo": repo}))
    return out


def url_port(url: str) -> int | None:
    """The TCP port of an http(s) URL (its scheme's default when none is given); None otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS:
        return None
    return parts.port or _DEFAULT_PORTS[parts.scheme]


def user_ports(repo: RepoSpec, always: Iterable[int] = (80,)) -> list[int]:
    """apt-cacher-ng's AllowUserPorts for a cache serving `repo` (UPSTREAM settings): `always`
    (the distribution archives' plain http) plus the port of every NVIDIA repository URL the
    nodes request through the cache (443 for https, the mirror's own port, e.g. :8080)."""
    ports = {int(p) for p in always}
    ports.update(p for p in (url_port(repo.url), url_port(repo.keyring_url)) if p is not None)
    return sorted(ports)
