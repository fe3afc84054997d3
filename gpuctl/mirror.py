"""The cluster's package cache and the air-gapped (offline) check.

Cache (`repos.cache_host: <node>`): `roles/package_mirror` installs apt-cacher-ng on that
node (port `package_mirror_port`, 3142), chained to the inventory's upstream proxy
(`repos.apt_proxy`) when there is one — every miss goes through it, the NVIDIA
repository's too (the proxy must reach it); `gpuctl mirror up` runs it with the cache node's
upstream settings (`cache_spec`), since the cache does not exist yet. `apply_cache(loaded,
specs)` then points every node at it — the other nodes at `repos.cache_address` (default:
the cache host's address), the cache node itself at 127.0.0.1, so that its own installs
fill the cache: OS packages through `Acquire::http::Proxy http://<cache>:3142` (the
nvidia_repo role's proxy drop-in) and the NVIDIA repository through apt-cacher-ng's URL
form `http://<cache>:3142/<upstream host[:port]>/<path>` (`HTTPS///<host>/<path>` for
https upstreams), so each .deb crosses the uplink once however many nodes install it. With
`package_mirror_wheels` the cache host also serves the training environment's wheelhouse
(`gpuctl.wheelhouse`, filled by `gpuctl mirror wheels`) and every node's train_env index is
`http://<cache>:<package_mirror_wheels_port>/simple`.

Offline (`repos.offline: true`): `check_offline(specs)` reads the repository's
`Packages` index (over http(s) or file://, from this machine) and raises InputError
naming every pinned package/version of every node that the mirror lacks — before
anything is installed.
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl.components import defaults
from gpuctl.errors import ExecutionError, InputError
from gpuctl.fileio import MAX_INDEX_BYTES, gunzip, read_bytes
from gpuctl.inventory import LoadedInventory
from gpuctl.spec import NodeSpec, RepoSpec

log = logging.getLogger(__name__)

#: Where the cache node reaches its own apt-cacher-ng.
LOOPBACK = "127.0.0.1"
_DEFAULT_PORTS = {"http": 80, "https": 443}


# --------------------------------------------------------------------------- cache


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


def cache_spec(loaded: LoadedInventory) -> NodeSpec | None:
    """The cache host's NodeSpec with its UPSTREAM repository settings (never through the
    cache: roles/package_mirror installs apt-cacher-ng before there is one), or None."""
    name = loaded.inventory.repos.cache_host
    if name is None:
        return None
    from gpuctl.spec import resolve_node

    return resolve_node(loaded, loaded.inventory.node(name))


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
            if base.startswith("file:"):  # a local mirror: the bounded reader (regular files only, no FIFO)
                local = urllib.request.url2pathname(urllib.parse.urlsplit(base + name).path)
                if not Path(local).exists():
                    raise FileNotFoundError(f"no such file {local}")
                data = read_bytes(local, limit=MAX_INDEX_BYTES, what="package index")
            else:
                with urllib.request.urlopen(base + name, timeout=timeout_s) as resp:
                    data = resp.read(MAX_INDEX_BYTES + 1)  # bounded: a mirror that never stops sending is refused
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            errors.append(f"{base + name}: {exc}")
            continue
        if len(data) > MAX_INDEX_BYTES:
            raise InputError(f"{base + name}: over {MAX_INDEX_BYTES} bytes; refusing the package index")
        if name.endswith(".gz"):
            data = gunzip(data, base + name)  # corrupt, truncated or a bomb: InputError naming the URL
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


def fill_cache_wheels(loaded: LoadedInventory, timeout_s: float = 3600, record: Any = None) -> dict[str, Any]:
    """Fill the cache host's wheelhouse (package_mirror_wheels_dir) ON the cache host: it fetches
    the lock's wheels from upstream (through repos.apt_proxy when set) once for the cluster."""
    from gpuctl.bench.remote import run, targets_for
    from gpuctl.wheelhouse import _lock_and_python, parse_remote_report, remote_fill_script

    spec = cache_spec(loaded)
    if spec is None:
        raise InputError(f"{loaded.path}: repos.cache_host names no node; give a folder to fill instead")
    if wheels_port(loaded) is None:
        raise InputError(f"{loaded.path}: the cache host serves no wheelhouse; set role_vars.package_mirror_wheels: "
                         "true and run `gpuctl mirror up` first")
    lock, python, index_url = _lock_and_python(loaded)
    script = remote_fill_script(lock, python, wheels_dir(loaded), index_url, proxy=spec.repo.apt_proxy)
    res = run(targets_for(loaded, [spec])[spec.node], script, timeout_s)
    if record is not None:
        record.raw(spec.node, "mirror-wheels.txt", res.transcript())
    report = parse_remote_report(res.stdout)
    if report is None:
        why = (res.stderr.strip().splitlines() or ["no report"])[-1]
        raise ExecutionError(f"{spec.node}: the wheelhouse fill did not finish: {why}")
    return {"node": spec.node, "dir": wheels_dir(loaded), **report}


def mirror_up(loaded: LoadedInventory, record: Any = None) -> dict[str, Any]:
    """Run roles/package_mirror on the cache host (repos.cache_host)."""
    from gpuctl.rolerun import load_delivery_role, run_deploy

    spec = cache_spec(loaded)  # upstream settings: the cache is what this installs
    if spec is None:
        raise InputError(f"{loaded.path}: repos.cache_host names no node; nothing to set up")
    role = load_delivery_role("package_mirror")
    return run_deploy(loaded, [spec], role.install, command="mirror", record=record).as_dict()
