"""The cluster's package cache and the air-gapped (offline) check.

Cache (`repos.cache_host: <node>`): `roles/package_mirror` installs apt-cacher-ng on that
node (port `package_mirror_port`, 3142), chained to the inventory's upstream proxy
(`repos.apt_proxy`) when there is one. `apply_cache(loaded, specs)` points every other
node at it: OS packages through `Acquire::http::Proxy http://<cache>:3142` (the
nvidia_repo role's proxy drop-in) and the NVIDIA repository through apt-cacher-ng's URL
form `http://<cache>:3142/<upstream host>/<path>` (`HTTPS///<host>/<path>` for https
upstreams), so each .deb crosses the uplink once however many nodes install it. The
cache node itself keeps the upstream settings.

Offline (`repos.offline: true`): `check_offline(specs)` reads the repository's
`Packages` index (over http(s) or file://, from this machine) and raises InputError
naming every pinned package/version of every node that the mirror lacks — before
anything is installed.
"""

from __future__ import annotations

import gzip
import logging
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuctl.errors import ExecutionError, InputError
from gpuctl.inventory import LoadedInventory
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)

CACHE_PORT = 3142


# --------------------------------------------------------------------------- cache


def cache_spec(loaded: LoadedInventory, specs: Sequence[NodeSpec]) -> NodeSpec | None:
    name = loaded.inventory.repos.cache_host
    if name is None:
        return None
    for s in specs:
        if s.node == name:
            return s
    from gpuctl.spec import resolve_node

    return resolve_node(loaded, loaded.inventory.node(name))


def via_cache(url: str, cache: str) -> str:
    """An upstream repository URL in apt-cacher-ng's form: http://cache:3142/host/path
    (https upstreams: http://cache:3142/HTTPS///host/path)."""
    scheme, _, rest = url.partition("://")
    if scheme == "http":
        return f"{cache.rstrip('/')}/{rest}"
    if scheme == "https":
        return f"{cache.rstrip('/')}/HTTPS///{rest}"
    raise InputError(f"{url}: only http(s) repositories can go through the package cache")


def cache_url(address: str, port: int = CACHE_PORT) -> str:
    return f"http://{address}:{port}"


def apply_cache(loaded: LoadedInventory, specs: Sequence[NodeSpec], port: int = CACHE_PORT) -> list[NodeSpec]:
    """NodeSpecs whose repository settings go through the cache host (unchanged without one)."""
    name = loaded.inventory.repos.cache_host
    if name is None:
        return list(specs)
    host = loaded.inventory.node(name)
    cache = cache_url(host.address, port)
    out = []
    for s in specs:
        if s.node == name or s.repo.url.startswith("file://"):
            out.append(s)
            continue
        repo = s.repo.model_copy(update={
            "url": via_cache(s.repo.url, cache), "keyring_url": via_cache(s.repo.keyring_url, cache),
            "origin": host.address, "apt_proxy": cache,
        })
        out.append(s.model_copy(update={"repo": repo}))
    return out


# ------------------------------------------------------------------------- offline


def parse_packages_index(text: str) -> dict[str, set[str]]:
    """A Debian `Packages` index → {package: {versions}}."""
    out: dict[str, set[str]] = {}
    name = version = None
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if name and version:
                out.setdefault(name, set()).add(version)
            name = version = None
        elif line.startswith("Package:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:"):
            version = line.split(":", 1)[1].strip()
    return out


def fetch_index(repo_url: str, timeout_s: float = 30) -> dict[str, set[str]]:
    """The repository's Packages index (flat repository: <url>/Packages[.gz])."""
    base = repo_url.rstrip("/") + "/"
    errors = []
    for name in ("Packages.gz", "Packages"):
        try:
            with urllib.request.urlopen(base + name, timeout=timeout_s) as resp:
                data = resp.read()
        except (urllib.error.URLError, OSError) as exc:
            errors.append(f"{base + name}: {exc}")
            continue
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        return parse_packages_index(data.decode("utf-8", errors="replace"))
    raise ExecutionError(f"cannot read the mirror's package index: {'; '.join(errors)}")


@dataclass
class OfflineReport:
    repo_url: str
    checked: int = 0
    missing: list[dict[str, Any]] = field(default_factory=list)  # {package, version, nodes, available}

    @property
    def ok(self) -> bool:
        return not self.missing

    def lines(self) -> list[str]:
        out = []
        for m in self.missing:
            have = ", ".join(sorted(m["available"])) or "no version at all"
            out.append(f"{m['package']}={m['version']} (needed by {', '.join(m['nodes'])}; the mirror has {have})")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"repo_url": self.repo_url, "checked": self.checked, "ok": self.ok,
                "missing": [{**m, "available": sorted(m["available"])} for m in self.missing]}


def missing_packages(specs: Sequence[NodeSpec], index: dict[str, set[str]], repo_url: str = "") -> OfflineReport:
    """Every pinned package/version of every node that `index` lacks (pure)."""
    need: dict[tuple[str, str], list[str]] = {}
    for s in specs:
        for p in s.all_packages():
            need.setdefault((p.name, p.version), []).append(s.node)
    report = OfflineReport(repo_url, checked=len(need))
    for (name, version), nodes in sorted(need.items()):
        if version not in index.get(name, set()):
            report.missing.append({"package": name, "version": version, "nodes": nodes,
                                   "available": index.get(name, set())})
    return report


def check_offline(specs: Sequence[NodeSpec], index: dict[str, set[str]] | None = None) -> OfflineReport:
    """Offline mode: InputError naming every pinned package the mirror lacks (nothing installed)."""
    if not specs:
        return OfflineReport("")
    if any(s.package_manager != "apt" for s in specs):
        raise InputError("repos.offline: the mirror check reads apt Packages indexes; dnf repositories "
                         "(repodata) are not supported yet")
    url = specs[0].repo.url
    report = missing_packages(specs, index if index is not None else fetch_index(url), url)
    if not report.ok:
        raise InputError(f"offline mode: the mirror {url} lacks {len(report.missing)} of the {report.checked} "
                         "pinned package versions; nothing was installed", report.lines())
    return report


# ----------------------------------------------------------------------- command


def mirror_up(loaded: LoadedInventory, record: Any = None) -> dict[str, Any]:
    """Run roles/package_mirror on the cache host (repos.cache_host)."""
    from gpuctl.rolerun import load_delivery_role, run_deploy

    spec = cache_spec(loaded, [])
    if spec is None:
        raise InputError(f"{loaded.path}: repos.cache_host names no node; nothing to set up")
    role = load_delivery_role("package_mirror")
    return run_deploy(loaded, [spec], role.install, command="mirror", record=record).as_dict()
