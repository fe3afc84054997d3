"""package_mirror: apt-cacher-ng on the cluster's cache host (inventory repos.cache_host).

Runs on the cache host only (`gpuctl mirror up`, or the turnkey before provisioning), with
the cache host's UPSTREAM repository settings (`gpuctl.mirror.cache_spec`: the cache does
not exist yet): installs apt-cacher-ng — through the inventory's upstream proxy when there
is one — writes gpuctl's drop-in (port, bind address, cache folder, expiry, the upstream
ports the nodes may request (AllowUserPorts: 80 plus the NVIDIA repository's) and the
upstream proxy, which every cache miss goes through — the NVIDIA repository's too, unlike a
node without a cache, which fetches it DIRECT: apt-cacher-ng 3.x has no per-host exception),
restarts the service only when the drop-in changed, and keeps it enabled and running. Every node — the cache host
itself included, through 127.0.0.1 — is pointed at it by `gpuctl.mirror.apply_cache` (their
NodeSpec's repo settings, applied by the nvidia_repo role); this role changes nothing else.
"""

from __future__ import annotations

import hashlib
import logging
import shlex
from io import StringIO
from typing import Any

import jinja2
from pyinfra import host
from pyinfra.api import FileUploadCommand, deploy, operation
from pyinfra.facts.files import Sha256File
from pyinfra.facts.server import Command
from pyinfra.operations import systemd

from gpuctl.deploy_context import node_spec
from gpuctl.mirror import user_ports
from gpuctl.operations import one_line_value, role_knobs
from gpuctl.paths import templates_dir

log = logging.getLogger(__name__)


def knobs() -> dict[str, Any]:
    """roles/package_mirror/defaults.yaml, each overridable (host data, inventory role_vars)."""
    return role_knobs("package_mirror")


def render_conf(**values: Any) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "package_mirror")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, finalize=one_line_value)
    return env.get_template("acng.conf.j2").render(**values)


@operation()
def install_cache_packages(packages: list[str], installed: list[str], proxy: str | None):
    missing = [p for p in packages if p not in installed]
    if not missing:
        host.noop(f"{', '.join(packages)} installed")
        return
    via = f" -o Acquire::http::Proxy={shlex.quote(proxy)}" if proxy else ""
    yield (f"DEBIAN_FRONTEND=noninteractive apt-get{via} update -q && DEBIAN_FRONTEND=noninteractive "
           f"apt-get{via} install -y -q --no-install-recommends {' '.join(shlex.quote(p) for p in missing)}")


@operation()
def put_text(path: str, content: str, current_sha256: str | None):
    if current_sha256 == hashlib.sha256(content.encode()).hexdigest():
        host.noop(f"{path} is up to date")
        return
    yield FileUploadCommand(StringIO(content), path)
    yield f"chmod 0644 {shlex.quote(path)}"


@deploy("package_mirror")
def install() -> None:
    spec = node_spec()
    k = knobs()
    if spec.package_manager != "apt":
        raise RuntimeError(f"{spec.node}: the package cache (apt-cacher-ng) needs a Debian/Ubuntu cache host")
    packages = [str(p) for p in k["package_mirror_packages"]]
    query = "dpkg-query -W -f='${Package} ${Status}\\n' " + " ".join(shlex.quote(p) for p in packages)
    lines = host.get_fact(Command, command=f"{query} 2>/dev/null || true") or ""
    installed = [ln.split()[0] for ln in str(lines).splitlines() if ln.endswith(" installed")]
    install_cache_packages(name=f"Install {', '.join(packages)}", packages=packages, installed=installed,
                           proxy=spec.repo.apt_proxy)
    path = str(k["package_mirror_conf_file"])
    ports = user_ports(spec.repo, always=[int(p) for p in k["package_mirror_user_ports"]])
    conf = render_conf(port=int(k["package_mirror_port"]), bind_address=k["package_mirror_bind_address"],
                       cache_dir=k["package_mirror_cache_dir"], expire_days=int(k["package_mirror_expire_days"]),
                       user_ports=ports, upstream_proxy=spec.repo.apt_proxy)
    changed = put_text(name=f"Configure apt-cacher-ng on port {k['package_mirror_port']} ({path})", path=path,
                       content=conf, current_sha256=host.get_fact(Sha256File, path=path))
    service = str(k["package_mirror_service"])
    systemd.service(name=f"Run {service}", service=service, running=True, enabled=True)
    systemd.service(name=f"Restart {service} after its configuration changed", service=service, restarted=True,
                    _if=changed.did_change)
