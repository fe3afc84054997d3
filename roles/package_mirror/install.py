"""package_mirror: apt-cacher-ng on the cluster's cache host (inventory repos.cache_host).

Runs on the cache host only (`gpuctl mirror up`, or the turnkey before provisioning), with
the cache host's UPSTREAM repository settings (`gpuctl.mirror.cache_spec`: the cache does
not exist yet): installs apt-cacher-ng — through the inventory's upstream proxy when there
is one — writes gpuctl's drop-in (port, bind address, cache folder, expiry, the upstream
ports the nodes may request (AllowUserPorts: 80 plus the NVIDIA repository's) and the
upstream proxy, which every cache miss goes through — the NVIDIA repository's too, unlike a
node without a cache, which fetches it DIRECT: apt-cacher-ng 3.x has no per-host exception),
restarts the service only when the drop-in changed, and keeps it enabled and running. With
package_mirror_wheels it also serves the training environment's wheelhouse
(package_mirror_wheels_dir/simple, filled by `gpuctl mirror wheels`) with python3's http.server
on package_mirror_wheels_port. Every node — the cache host
itself included, through 127.0.0.1 — is pointed at it by `gpuctl.repocache.apply_cache` (their
NodeSpec's repo settings, applied by the nvidia_repo role); this role changes nothing else.
"""

from __future__ import annotations

import hashlib
import logging
from io import StringIO
from typing import Any

import jinja2
from pyinfra import host
from pyinfra.api import FileUploadCommand, deploy, operation
from pyinfra.operations import systemd

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.facts.system import CommandPaths, FileStates
from gpuctl.operations import and_then, one_line_value, role_knobs, sh, whole_number
from gpuctl.parsers.files import FileState
from gpuctl.paths import templates_dir
from gpuctl.redact import holds_secret
from gpuctl.repocache import user_ports

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
    via = f" -o Acquire::http::Proxy={sh(proxy)}" if proxy else ""
    yield (f"DEBIAN_FRONTEND=noninteractive apt-get{via} update -q && DEBIAN_FRONTEND=noninteractive "
           f"apt-get{via} install -y -q --no-install-recommends {sh(*missing)}")


# apt-cacher-ng's service runs as this user and group (upstream systemd/apt-cacher-ng.service.in:
# User=apt-cacher-ng, Group=apt-cacher-ng): a drop-in holding the upstream proxy's password is
# readable by that group only.
ACNG_GROUP = "apt-cacher-ng"


@operation()
def put_text(path: str, content: str, current: FileState | None):
    """`path` holds `content`, 0644 root:root, or 0640 root:apt-cacher-ng when it holds a
    secret (`gpuctl.redact.holds_secret`); a file with the right content and another mode is
    only chmodded."""
    owner, mode = (f"root:{ACNG_GROUP}", "640") if holds_secret(content) else ("root:root", "644")
    set_mode = and_then(sh("chown", owner, path), sh("chmod", mode, path))
    if current is not None and current.sha256 == hashlib.sha256(content.encode()).hexdigest():
        if current.mode == mode:
            host.noop(f"{path} is up to date")
        else:
            yield set_mode
        return
    yield FileUploadCommand(StringIO(content), path)
    yield set_mode


@deploy("package_mirror")
def install() -> None:
    spec = node_spec()
    k = knobs()
    if spec.package_manager != "apt":
        raise RuntimeError(f"{spec.node}: the package cache (apt-cacher-ng) needs a Debian/Ubuntu cache host")
    packages = [str(p) for p in k["package_mirror_packages"]]
    snapshot = read_packages("apt")  # the listing every role reads (gpuctl.parsers.packages)
    installed = [p for p in packages if p in snapshot.packages]
    install_cache_packages(name=f"Install {', '.join(packages)}", packages=packages, installed=installed,
                           proxy=spec.repo.apt_proxy)
    path = str(k["package_mirror_conf_file"])
    ports = user_ports(spec.repo, always=[whole_number(p, f"package_mirror_user_ports[{i}]")
                                          for i, p in enumerate(k["package_mirror_user_ports"])])
    conf = render_conf(port=whole_number(k["package_mirror_port"], "package_mirror_port"),
                       bind_address=k["package_mirror_bind_address"], cache_dir=k["package_mirror_cache_dir"],
                       expire_days=whole_number(k["package_mirror_expire_days"], "package_mirror_expire_days"),
                       user_ports=ports, upstream_proxy=spec.repo.apt_proxy)
    changed = put_text(name=f"Configure apt-cacher-ng on port {k['package_mirror_port']} ({path})", path=path,
                       content=conf, current=host.get_fact(FileStates, paths=(path,)).get(path))
    service = str(k["package_mirror_service"])
    systemd.service(name=f"Run {service}", service=service, running=True, enabled=True)
    systemd.service(name=f"Restart {service} after its configuration changed", service=service, restarted=True,
                    _if=changed.did_change)
    if k["package_mirror_wheels"] is True:  # a knob: stable during the run
        serve_wheels(k)


WHEELS_UNIT = "/etc/systemd/system/gpuctl-wheels.service"


@operation()
def make_dir(path: str, exists: bool):
    if exists:
        host.noop(f"{path} exists")
        return
    yield and_then(sh("mkdir", "-p", path), sh("chmod", "0755", path))


def serve_wheels(k: dict[str, Any]) -> None:
    """The training environment's wheelhouse: package_mirror_wheels_dir/simple over http."""

    directory = str(k["package_mirror_wheels_dir"])
    port = whole_number(k["package_mirror_wheels_port"], "package_mirror_wheels_port")
    have = host.get_fact(CommandPaths, names=(f"{directory}/simple", "/usr/bin/python3"))
    if not have.get("/usr/bin/python3"):
        install_cache_packages(name="Install python3 (serves the wheelhouse)", packages=["python3"], installed=[],
                               proxy=node_spec().repo.apt_proxy)
    make_dir(name=f"Create the wheelhouse {directory}/simple", path=f"{directory}/simple",
             exists=bool(have.get(f"{directory}/simple")))
    unit = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir() / "package_mirror")),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True).get_template(
        "gpuctl-wheels.service.j2").render(port=port, bind_address=k["package_mirror_bind_address"],
                                           directory=directory)
    changed = put_text(name=f"Write {WHEELS_UNIT} (port {port})", path=WHEELS_UNIT, content=unit,
                       current=host.get_fact(FileStates, paths=(WHEELS_UNIT,)).get(WHEELS_UNIT))
    systemd.daemon_reload(name="Reload systemd units", _if=changed.did_change)
    systemd.service(name="Run gpuctl-wheels", service="gpuctl-wheels", running=True, enabled=True)
    systemd.service(name="Restart gpuctl-wheels after its unit changed", service="gpuctl-wheels", restarted=True,
                    _if=changed.did_change)
