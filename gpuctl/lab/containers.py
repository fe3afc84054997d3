"""Lightweight lab nodes for scale: systemd-nspawn containers on the lab's cached image.

The QEMU nodes (`gpuctl.lab.nodes`) stay the default for correctness: they have a
kernel of their own (modules, md RAID, VLANs, Soft-RoCE, reboots). Containers are for
scale: dozens of Debian 12 nodes with real systemd, sshd and apt, booted in seconds on
one machine, sharing its kernel — so every role that needs kernel features is not
applicable on them (the inventory says ``lab: {kind: container}``; `gpuctl.spec`
turns that into a visible "not applicable in this node kind" skip reason).

Per node (``gpu-NN``, index i):

- **root**: an overlayfs mount, lowerdir = the image's extracted rootfs
  (`gpuctl.lab.image`, read only), a per-node upper/work dir under
  ``<state>/nodes/<name>/`` (a few MB each), merged at ``<state>/nodes/<name>/root``.
  Per-node files (hostname, hosts, apt proxy, masked units) are written into the
  upper dir before boot.
- **network**: its own network namespace ``gpuctl-c-<name>`` holding ``eth0`` (one
  end of a veth pair, address ``10.251.X.Y/16``); the host end ``gpuctlc<NNN>`` is a
  port of the bridge ``gpuctl-lab0`` in the root namespace, which has 10.251.0.1/16.
  10.251.0.0/16 exists only on this machine: nothing routes it anywhere, there is no
  NAT and no default route inside the namespaces. The apt cache proxy and the stand-in
  repository server listen on 10.251.0.1 only (see `serve`).
- **cgroup**: its own cgroup ``gpuctl-lab-containers/<name>`` in every mounted
  hierarchy (this machine's PID 1 is not systemd; without a cgroup each, units in the
  containers fail with 219/CGROUP); nspawn runs with ``--keep-unit --register=no``
  and is moved into that cgroup before exec.
- **process**: ``systemd-nspawn -b`` started by `up`, recorded by PID and a marker
  (its merged root path) so `down` stops exactly that process.

Host settings: ``fs.inotify.max_user_instances`` is raised to 1024 while the lab runs
(boots fail beyond ~25 containers at the default 128) and restored by `down`.

`down` stops the recorded PIDs, unmounts overlays, deletes the veths, namespaces and
the bridge (if `up` created it), removes the cgroups and restores the sysctl.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.server
import ipaddress
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuctl.errors import ExecutionError, InputError
from gpuctl.fileio import load_json
from gpuctl.lab import check_host_tools as check_lab_host_tools
from gpuctl.lab.image import build_image, load_image
from gpuctl.lab.netcache import CachingProxyHandler, QuietRepoHandler, apt_cache_dir, repo_dir, start_server
from gpuctl.lab.nodes import check_inventory_target
from gpuctl.lab.ssh import ensure_lab_key
from gpuctl.lab.standin.repo import build_lab_repo
from gpuctl.lab.state import ProcessRecord, pid_alive, state_root, stop_process, this_checkout

log = logging.getLogger(__name__)

KIND = "container"
BRIDGE = "gpuctl-lab0"
NETWORK = ipaddress.IPv4Network("10.251.0.0/16")
HOST_ADDRESS = "10.251.0.1"
NETNS_PREFIX = "gpuctl-c-"
VETH_PREFIX = "gpuctlc"
CGROUP_NAME = "gpuctl-lab-containers"
CGROUP_ROOT = Path("/sys/fs/cgroup")
INOTIFY_SYSCTL = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_WANTED = 1024
MAX_NODES = 250
DEFAULT_NODES = 4
DEFAULT_BOOT_TIMEOUT_S = 180.0
DEFAULT_SKU = "hgx-h100-80gb"
DEFAULT_MATRIX = "r580-cuda13.0"
NODES_PER_RACK = 8

#: Units that make no sense in a container on this lab (network is set up from the
#: host; no NVMe-oF, no consoles to log in on) — masked in each node's upper dir.
MASKED_UNITS: tuple[str, ...] = (
    "gpuctl-lab-boot.service", "networking.service", "ifupdown-pre.service",
    "nvmf-autoconnect.service", "console-getty.service", "dpkg-db-backup.timer",
    "systemd-tmpfiles-clean.timer", "apt-daily.timer", "apt-daily-upgrade.timer",
    "apt-daily.service", "apt-daily-upgrade.service", "e2scrub_all.timer", "fstrim.timer",
    "man-db.timer", "mdmonitor.service", "mdcheck_start.timer", "mdcheck_continue.timer",
    "mdmonitor-oneshot.timer",
)

#: Host binaries a container lab needs, and the Debian package that provides each.
REQUIRED_BINARIES: dict[str, str] = {
    "systemd-nspawn": "systemd-container",
    "ip": "iproute2",
    "mount": "mount",
    "ssh": "openssh-client",
}

# ---------------------------------------------------------------------------- planning (pure)


@dataclass(frozen=True)
class ContainerLayout:
    """Deterministic names, paths and addresses of container node `index` (1-based)."""

    index: int
    state_dir: Path

    def __post_init__(self) -> None:
        if not 1 <= self.index <= MAX_NODES:
            raise InputError(f"container node index must be 1..{MAX_NODES}, not {self.index}")

    @property
    def name(self) -> str:
        return f"gpu-{self.index:02d}"

    @property
    def address(self) -> str:
        """10.251.1.1 … 10.251.1.250: inside 10.251.0.0/16, never the bridge's .0.1."""
        return str(NETWORK.network_address + 256 + self.index)

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.name}"

    @property
    def veth(self) -> str:
        return f"{VETH_PREFIX}{self.index:03d}"  # ≤ 15 characters (IFNAMSIZ)

    @property
    def directory(self) -> Path:
        return self.state_dir / "nodes" / self.name

    @property
    def upper(self) -> Path:
        return self.directory / "upper"

    @property
    def work(self) -> Path:
        return self.directory / "work"

    @property
    def merged(self) -> Path:
        return self.directory / "root"

    @property
    def console_log(self) -> Path:
        return self.state_dir / "logs" / f"{self.name}.console.log"


def overlay_mount_argv(lower: Path, layout: ContainerLayout) -> list[str]:
    return ["mount", "-t", "overlay", f"gpuctl-{layout.name}", "-o",
            f"lowerdir={lower},upperdir={layout.upper},workdir={layout.work}", str(layout.merged)]


def bridge_commands() -> list[list[str]]:
    return [
        ["ip", "link", "add", BRIDGE, "type", "bridge"],
        ["ip", "addr", "add", f"{HOST_ADDRESS}/{NETWORK.prefixlen}", "dev", BRIDGE],
        ["ip", "link", "set", BRIDGE, "up"],
    ]


def netns_commands(layout: ContainerLayout) -> list[list[str]]:
    """Namespace, veth pair (host end on the bridge), address inside; no route out."""
    ns = layout.netns
    return [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", layout.veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
        ["ip", "link", "set", layout.veth, "master", BRIDGE, "up"],
        ["ip", "-n", ns, "addr", "add", f"{layout.address}/{NETWORK.prefixlen}", "dev", "eth0"],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
        ["ip", "-n", ns, "link", "set", "eth0", "up"],
    ]


def nspawn_argv(layout: ContainerLayout) -> list[str]:
    return [
        "systemd-nspawn", "--boot", "--register=no", "--keep-unit", "--quiet",
        "--console=read-only", f"--machine={layout.name}", f"--hostname={layout.name}",
        f"--directory={layout.merged}", f"--network-namespace-path=/run/netns/{layout.netns}",
        "--resolv-conf=off", "--timezone=off", "--link-journal=no",
    ]


def cgroup_hierarchies(root: Path = CGROUP_ROOT) -> list[Path]:
    """The cgroup hierarchies a container must be placed in: the unified (v2) root when
    the machine runs cgroup v2 only; else name=systemd (v1) and the unified one if mounted."""
    if (root / "cgroup.controllers").exists():
        return [root]
    found = [root / "systemd"] if (root / "systemd" / "cgroup.procs").exists() else []
    if (root / "unified" / "cgroup.procs").exists():
        found.append(root / "unified")
    return found


def cgroup_dirs(name: str, hierarchies: Sequence[Path]) -> list[Path]:
    return [h / CGROUP_NAME / name for h in hierarchies]


def upper_files(layout: ContainerLayout, proxy_url: str, repo_host: str, public_key: str) -> dict[str, str]:
    """Per-node files written into the overlay's upper dir before boot (path → content;
    content ``"->/dev/null"`` is a symlink, i.e. a masked unit). The lab's public key is
    root's only authorized key (the image holds none)."""
    files = {
        "root/.ssh/authorized_keys": public_key.strip() + "\n",
        "etc/hostname": f"{layout.name}\n",
        "etc/hosts": f"127.0.0.1\tlocalhost\n127.0.1.1\t{layout.name}\n::1\tlocalhost ip6-localhost\n",
        "etc/fstab": "# gpuctl lab container: the root is an overlay set up by the host\n",
        "etc/network/interfaces": "# gpuctl lab container: eth0 is configured from the host\n"
                                  "auto lo\niface lo inet loopback\n",
        "etc/apt/apt.conf.d/00gpuctl-lab-proxy":
            f'Acquire::http::Proxy "{proxy_url}";\nAcquire::http::Proxy::{repo_host} "DIRECT";\n',
        "etc/machine-id": "",
    }
    for unit in MASKED_UNITS:
        files[f"etc/systemd/system/{unit}"] = "->/dev/null"
    return files


def write_upper(layout: ContainerLayout, files: dict[str, str]) -> None:
    for rel, content in files.items():
        path = layout.upper / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            path.unlink()
        if content.startswith("->"):
            path.symlink_to(content[2:])
        else:
            path.write_text(content)
            if rel.startswith("root/.ssh/"):
                path.parent.chmod(0o700)
                path.chmod(0o600)


# ---------------------------------------------------------------------------- state


def containers_state_root() -> Path:
    """``<lab state>/../lab-containers``: separate from the QEMU lab's state."""
    return state_root().parent / "lab-containers"


@dataclass
class ContainerNode:
    name: str
    index: int
    address: str
    netns: str
    veth: str
    directory: str
    merged: str
    cgroups: list[str] = field(default_factory=list)
    mounted: bool = False
    process: ProcessRecord | None = None


@dataclass
class ContainerLabState:
    state_dir: str
    image_root: str
    key_path: str
    known_hosts: str
    inventory_path: str
    sku: str = DEFAULT_SKU
    matrix: str = DEFAULT_MATRIX
    bridge_created: bool = False
    inotify_saved: int | None = None
    inotify_set: int | None = None
    proxy_port: int = 0
    proxy: ProcessRecord | None = None
    repo_port: int = 0
    repo_http: ProcessRecord | None = None
    keyring_file: str = ""
    keyring_sha256: str = ""
    public_key: str = ""
    nodes: list[ContainerNode] = field(default_factory=list)
    kind: str = KIND
    created: float = field(default_factory=time.time)
    checkout: str = field(default_factory=this_checkout)  # who started it (lab down from elsewhere refuses)

    @property
    def proxy_url(self) -> str:
        return f"http://{HOST_ADDRESS}:{self.proxy_port}"

    @property
    def repo_url(self) -> str:
        return f"http://{HOST_ADDRESS}:{self.repo_port}/"

    def node(self, name: str) -> ContainerNode:
        for n in self.nodes:
            if n.name == name:
                return n
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise InputError(f"no container lab node named {name!r} (nodes: {known})")

    def processes(self) -> dict[str, ProcessRecord]:
        found = {f"nspawn:{n.name}": n.process for n in self.nodes if n.process is not None}
        for label, rec in (("apt-proxy", self.proxy), ("repo-http", self.repo_http)):
            if rec is not None:
                found[label] = rec
        return found

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContainerLabState:
        def proc(v: Any) -> ProcessRecord | None:
            return ProcessRecord(**v) if v else None

        nodes = []
        for raw in data.get("nodes", []):
            raw = dict(raw)
            raw["process"] = proc(raw.get("process"))
            nodes.append(ContainerNode(**raw))
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["nodes"] = nodes
        values.setdefault("checkout", "")  # recorded before labs named their checkout: no owner known
        values["proxy"] = proc(values.get("proxy"))
        values["repo_http"] = proc(values.get("repo_http"))
        return cls(**values)


def state_file(sdir: Path | None = None) -> Path:
    return (sdir or containers_state_root()) / "state.json"


def save_state(state: ContainerLabState) -> None:
    target = state_file(Path(state.state_dir))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_dict(), indent=2, sort_keys=True) + "\n")
    tmp.replace(target)


def load_state(sdir: Path | None = None) -> ContainerLabState | None:
    path = state_file(sdir)
    if not path.exists():
        return None
    data = load_json(path, what="container lab state file")
    try:
        return ContainerLabState.from_dict(data)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise InputError(f"{path}: not a container lab state file gpuctl can read ({exc}); stop its "
                         "processes by hand and remove it") from None


# ---------------------------------------------------------------------------- inventory


def render_inventory(state: ContainerLabState) -> str:
    """The inventory for the container lab: the QEMU lab's cluster shape (so the same
    roles are asked for), nodes at their 10.251.x.y addresses, ``lab.kind: container``."""
    repos: dict[str, Any] = {"apt_proxy": state.proxy_url}
    if state.keyring_sha256:
        repos.update(mirror=state.repo_url, keyring_file=state.keyring_file,
                     keyring_sha256=state.keyring_sha256)
    data: dict[str, Any] = {
        "cluster": {"name": "lab-containers", "sku": state.sku, "matrix": state.matrix, "os": "debian-12"},
        "ssh": {"user": "root", "key": state.key_path, "known_hosts": state.known_hosts,
                "strict_host_keys": True},
        "repos": repos,
        "management": {"interface": "eth0", "cidr": str(NETWORK)},
        "fabric": {"type": "roce", "rate_gbps": 400, "hcas_per_node": 1, "hcas": ["rxe0"],
                   "interfaces": ["eth1"], "soft_roce": True,
                   "roce": {"cidr": "192.168.50.0/24", "mtu": 1500}},
        "vlans": [{"id": 100, "parent": "eth1", "name": "storage", "cidr": "10.100.0.0/24"}],
        "storage": {"raid": {"level": 0, "devices": "auto", "fs": "xfs", "mount": "/raid"}},
        "racks": [{"name": f"lab-r{r}", "power_kw": 80, "cooling": "liquid"}
                  for r in sorted({rack_of(n.index) for n in state.nodes})],
        "hardware": {
            "min_cpu_memory_gib": {"value": 1, "source": "lab containers share the host's memory"},
            "nvme_count": {"value": 0, "source": "lab containers have no NVMe drives of their own"},
        },
        "preflight": {"min_free_root_gib": 1, "source": "lab containers: overlay on the host disk"},
        "nodes": [
            {"name": n.name, "address": n.address, "rack": f"lab-r{rack_of(n.index)}",
             "fabric_ips": [f"192.168.50.{10 + n.index}"] if n.index < 240 else [],
             "vlan_ips": {100: f"10.100.0.{10 + n.index}"} if n.index < 240 else {}}
            for n in state.nodes
        ],
        "lab": {"kind": KIND, "state": str(state_file(Path(state.state_dir)))},
    }
    header = ("# Written by `gpuctl lab up --kind container` for the running container lab.\n"
              "# Nodes are systemd-nspawn containers: kernel-feature roles are not applicable.\n")
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110)


def rack_of(index: int) -> int:
    """Eight nodes per (liquid-cooled, 80 kW) rack, as an HGX H100 cluster would be racked."""
    return (index - 1) // NODES_PER_RACK + 1


def known_hosts_lines(host_public_key: str, addresses: Sequence[str]) -> list[str]:
    key = " ".join(host_public_key.split()[:2])
    return [f"{addr} {key}" for addr in addresses]


def ssh_argv(state: ContainerLabState, node: ContainerNode, command: str | None = None,
             tty: bool = False, connect_timeout: int = 5) -> list[str]:
    argv = ["ssh", "-i", state.key_path, "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={state.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={connect_timeout}", "-o", "LogLevel=ERROR"]
    argv += ["-t"] if tty else ["-o", "BatchMode=yes", "-T"]
    argv.append(f"root@{node.address}")
    if command is not None:
        argv.append(command)
    return argv


# ---------------------------------------------------------------------------- host actions


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if check and proc.returncode != 0:
        raise ExecutionError(f"{' '.join(argv)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc


def check_host_tools() -> None:
    check_lab_host_tools(REQUIRED_BINARIES)


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _mounted(path: Path) -> bool:
    target = str(path)
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 1 and parts[1] == target:
                return True
    return False


def _raise_inotify(state: ContainerLabState) -> None:
    current = int(INOTIFY_SYSCTL.read_text().strip())
    if current >= INOTIFY_WANTED:
        return
    INOTIFY_SYSCTL.write_text(f"{INOTIFY_WANTED}\n")
    state.inotify_saved, state.inotify_set = current, INOTIFY_WANTED
    log.info("fs.inotify.max_user_instances %d -> %d while the container lab runs", current, INOTIFY_WANTED)


def _restore_inotify(state: ContainerLabState) -> None:
    if state.inotify_saved is None:
        return
    current = int(INOTIFY_SYSCTL.read_text().strip())
    if current == state.inotify_set:  # nobody else changed it since: put ours back
        INOTIFY_SYSCTL.write_text(f"{state.inotify_saved}\n")
        log.info("fs.inotify.max_user_instances restored to %d", state.inotify_saved)
    else:
        log.warning("fs.inotify.max_user_instances is %d (we set %s): left as it is",
                    current, state.inotify_set)
    state.inotify_saved = state.inotify_set = None


def _enter_cgroups(dirs: Sequence[str]) -> Callable[[], None]:
    def move() -> None:
        pid = str(os.getpid())
        for d in dirs:
            with open(os.path.join(d, "cgroup.procs"), "w") as fh:
                fh.write(pid)
    return move


def access_log_file(state_dir: Path, kind: str) -> Path:
    """The access log of the container lab's `kind` server ("proxy" | "repo"): one JSON line
    per request (`gpuctl.lab.netcache.bytes_served` sums them)."""
    return state_dir / f"access-{kind}.jsonl"


def _start_server(kind: str, directory: Path, run_dir: Path, timeout: float = 20.0) -> tuple[int, ProcessRecord]:
    run_dir.mkdir(parents=True, exist_ok=True)
    port_file = run_dir / f"{kind}.port"
    port_file.unlink(missing_ok=True)
    log_file = run_dir / f"{kind}.log"
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    marker = f"--port-file={port_file}"
    argv = [sys.executable, "-m", "gpuctl.lab.containers", "serve", kind, f"--dir={directory}",
            f"--bind={HOST_ADDRESS}", marker, f"--log={log_file}",
            f"--access-log={access_log_file(run_dir.parent, kind)}"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_file.exists():
            return int(port_file.read_text().strip()), ProcessRecord(proc.pid, marker)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    tail = log_file.read_text()[-2000:] if log_file.exists() else ""
    raise ExecutionError(f"the container lab's {kind} server did not start; log {log_file}:\n{tail}")


def _ensure_image() -> tuple[Path, str]:
    """(rootfs of the cached image, its SSH host public key); builds it once if needed."""
    img = load_image()
    if img is None:
        port, rec = start_server("proxy", apt_cache_dir(), containers_state_root() / "image-run")
        try:
            img = build_image(proxy_port=port)
        finally:
            stop_process(rec, "apt-proxy")
    return img.root, img.host_public_key


def _standin_repo() -> tuple[Path, str, str]:
    """(repo dir, keyring file, keyring sha256) of the stand-in NVIDIA repository, built
    (cached) by the stand-in builder; a failure is an error, as for the QEMU lab."""
    build = build_lab_repo()
    return repo_dir(), build.keyring_file, build.keyring_sha256


def _wait_ssh(state: ContainerLabState, node: ContainerNode, timeout: float) -> float:
    start = time.monotonic()
    argv = ssh_argv(state, node, "systemctl is-active ssh.service >/dev/null", connect_timeout=3)
    while True:
        proc = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, check=False, timeout=30)
        if proc.returncode == 0:
            return time.monotonic() - start
        if node.process is not None and not node.process.alive():
            raise ExecutionError(f"{node.name}: systemd-nspawn (pid {node.process.pid}) exited before SSH "
                                 f"answered; console {Path(state.state_dir) / 'logs' / (node.name + '.console.log')}")
        if time.monotonic() - start > timeout:
            raise ExecutionError(f"{node.name}: no SSH on {node.address} after {timeout:.0f} s")
        time.sleep(1.0)


def up(nodes: int = DEFAULT_NODES, sku: str = DEFAULT_SKU, matrix: str | None = DEFAULT_MATRIX, *,
       inventory_path: Path | None = None, boot_timeout: float = DEFAULT_BOOT_TIMEOUT_S,
       state_dir: Path | None = None) -> ContainerLabState:
    """Start `nodes` container nodes, wait for SSH on all, write the inventory.
    On failure everything started is torn down again before the error is raised."""
    if not 1 <= nodes <= MAX_NODES:
        raise InputError(f"--nodes must be 1..{MAX_NODES} for container nodes, not {nodes}")
    matrix = matrix or DEFAULT_MATRIX
    inventory_path = check_inventory_target(inventory_path) if inventory_path else None
    if os.geteuid() != 0:
        raise ExecutionError("container lab nodes need root (mounts, network namespaces, cgroups)")
    check_host_tools()
    sdir = state_dir or containers_state_root()
    previous = load_state(sdir)
    if previous is not None:
        if any(rec.alive() for rec in previous.processes().values()):
            raise ExecutionError(f"a container lab is already running (state {state_file(sdir)}): "
                                 "run `gpuctl lab down --kind container` first")
        down(previous)
    if _link_exists(BRIDGE):
        raise ExecutionError(f"network interface {BRIDGE} exists but no container lab is recorded: "
                             f"remove it (`ip link del {BRIDGE}`) if it is a leftover")
    hierarchies = cgroup_hierarchies()
    if not hierarchies:
        raise ExecutionError(f"no usable cgroup hierarchy under {CGROUP_ROOT}")
    key = ensure_lab_key()
    lower, host_key = _ensure_image()
    sdir.mkdir(parents=True, exist_ok=True)
    state = ContainerLabState(
        state_dir=str(sdir), image_root=str(lower), key_path=str(key.path),
        known_hosts=str(sdir / "known_hosts"), inventory_path=str(inventory_path or sdir / "inventory.yaml"),
        sku=sku, matrix=matrix, public_key=key.public_key,
    )
    save_state(state)
    started = time.monotonic()
    try:
        _raise_inotify(state)
        for argv in bridge_commands():
            _run(argv)
            state.bridge_created = True
        save_state(state)
        repo, state.keyring_file, state.keyring_sha256 = _standin_repo()
        state.proxy_port, state.proxy = _start_server("proxy", apt_cache_dir(), sdir / "run")
        state.repo_port, state.repo_http = _start_server("repo", repo, sdir / "run")
        save_state(state)
        (sdir / "logs").mkdir(parents=True, exist_ok=True)
        for i in range(1, nodes + 1):
            layout = ContainerLayout(i, sdir)
            node = ContainerNode(name=layout.name, index=i, address=layout.address, netns=layout.netns,
                                 veth=layout.veth, directory=str(layout.directory), merged=str(layout.merged))
            state.nodes.append(node)
            _prepare_node(state, layout, node, lower, hierarchies)
            save_state(state)
        Path(state.known_hosts).write_text(
            "\n".join(known_hosts_lines(host_key, [n.address for n in state.nodes])) + "\n")
        boot_start = time.monotonic()
        for node in state.nodes:
            _start_node(state, node)
        save_state(state)
        with ThreadPoolExecutor(max_workers=min(16, len(state.nodes))) as pool:
            waits = list(pool.map(lambda n: _wait_ssh(state, n, boot_timeout), state.nodes))
        log.info("container lab: %d node(s) up, boot-to-SSH %.1f s (slowest node %.1f s), total %.1f s",
                 len(state.nodes), time.monotonic() - boot_start, max(waits), time.monotonic() - started)
        inventory = Path(state.inventory_path)
        inventory.parent.mkdir(parents=True, exist_ok=True)
        inventory.write_text(render_inventory(state))
        save_state(state)
    except BaseException:
        log.error("container lab up failed; tearing down what was started")
        try:
            down(state)
        except Exception:
            log.exception("cleanup after failed container lab up also failed")
        raise
    return state


def _prepare_node(state: ContainerLabState, layout: ContainerLayout, node: ContainerNode, lower: Path,
                  hierarchies: Sequence[Path]) -> None:
    for path in (layout.upper, layout.work, layout.merged):
        path.mkdir(parents=True, exist_ok=True)
    write_upper(layout, upper_files(layout, state.proxy_url, HOST_ADDRESS, state.public_key))
    _run(overlay_mount_argv(lower, layout))
    node.mounted = True
    for argv in netns_commands(layout):
        _run(argv)
    dirs = cgroup_dirs(layout.name, hierarchies)
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    node.cgroups = [str(d) for d in dirs]


def _start_node(state: ContainerLabState, node: ContainerNode) -> None:
    layout = ContainerLayout(node.index, Path(state.state_dir))
    with layout.console_log.open("ab") as out:
        proc = subprocess.Popen(nspawn_argv(layout), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, preexec_fn=_enter_cgroups(node.cgroups))
    node.process = ProcessRecord(proc.pid, f"--directory={layout.merged}")


def _stop_all(records: dict[str, ProcessRecord], timeout: float = 30.0) -> list[str]:
    """SIGTERM every live recorded process at once, SIGKILL what is left after `timeout`."""
    live = {name: rec for name, rec in records.items() if rec.alive()}
    for rec in live.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(rec.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(r.pid) for r in live.values()):
        time.sleep(0.2)
    for name, rec in live.items():
        if pid_alive(rec.pid):
            log.warning("%s (pid %d) ignored SIGTERM: SIGKILL", name, rec.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(rec.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(pid_alive(r.pid) for r in live.values()):
        time.sleep(0.1)
    return sorted(live)


def _remove_cgroup(path: Path) -> None:
    if not path.exists():
        return
    for _ in range(50):
        try:
            for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                sub.rmdir()
            path.rmdir()
            return
        except OSError:
            time.sleep(0.1)
    log.warning("cgroup %s still busy after lab down", path)


def down(state: ContainerLabState | None = None, state_dir: Path | None = None) -> list[str]:
    """Stop the recorded processes, unmount overlays, delete veths/namespaces/bridge,
    remove cgroups and restore the sysctl. Returns the names of the processes stopped."""
    lab = state or load_state(state_dir)
    if lab is None:
        return []
    stopped = _stop_all(lab.processes())
    for node in lab.nodes:
        merged = Path(node.merged)
        if _mounted(merged):
            proc = _run(["umount", str(merged)], check=False)
            if proc.returncode != 0:
                _run(["umount", "-l", str(merged)], check=False)
        node.mounted = False
        if _link_exists(node.veth):
            _run(["ip", "link", "del", node.veth], check=False)
        if _netns_exists(node.netns):
            _run(["ip", "netns", "del", node.netns], check=False)
        for cg in node.cgroups:
            _remove_cgroup(Path(cg))
    for h in {Path(cg).parent for n in lab.nodes for cg in n.cgroups}:
        with contextlib.suppress(OSError):
            h.rmdir()
    if lab.bridge_created and _link_exists(BRIDGE):
        _run(["ip", "link", "del", BRIDGE], check=False)
    _restore_inotify(lab)
    sdir = Path(lab.state_dir)
    for path in (sdir / "nodes", sdir / "run"):
        if path.exists() and not any(_mounted(Path(n.merged)) for n in lab.nodes):
            shutil.rmtree(path, ignore_errors=True)
    Path(lab.known_hosts).unlink(missing_ok=True)
    if Path(lab.inventory_path) == sdir / "inventory.yaml":
        Path(lab.inventory_path).unlink(missing_ok=True)
    state_file(sdir).unlink(missing_ok=True)
    log.info("container lab down: stopped %d process(es)", len(stopped))
    return stopped


def leftovers(state_dir: Path | None = None) -> dict[str, list[str]]:
    """What a container lab could leave behind on this machine (for `down` checks):
    our veths, namespaces, bridge, overlay mounts, cgroups, nspawn processes."""
    sdir = state_dir or containers_state_root()
    links = sorted(p.name for p in Path("/sys/class/net").iterdir()
                   if p.name.startswith(VETH_PREFIX) or p.name == BRIDGE)
    netns = sorted(p.name for p in Path("/run/netns").glob(f"{NETNS_PREFIX}*")) if Path("/run/netns").exists() else []
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
              if len(line.split()) > 1 and line.split()[1].startswith(str(sdir))]
    cgroups = [str(h / CGROUP_NAME) for h in cgroup_hierarchies() if (h / CGROUP_NAME).exists()]
    procs = []
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if cmd.startswith("systemd-nspawn") and f"--directory={sdir}" in cmd:
                procs.append(pid_dir.name)
    return {"links": links, "netns": netns, "mounts": mounts, "cgroups": cgroups, "processes": procs}


def status(check_ssh: bool = True, state_dir: Path | None = None) -> dict[str, Any]:
    lab = load_state(state_dir)
    if lab is None:
        return {"running": False, "kind": KIND, "state": str(state_file(state_dir)), "nodes": [], "services": []}

    def one(node: ContainerNode) -> dict[str, Any]:
        alive = node.process is not None and node.process.alive()
        ssh = False
        if alive and check_ssh:
            ssh = subprocess.run(ssh_argv(lab, node, "true"), capture_output=True,
                                 stdin=subprocess.DEVNULL, check=False, timeout=30).returncode == 0
        return {"name": node.name, "pid": node.process.pid if node.process else None, "alive": alive,
                "address": node.address, "ssh": ssh, "netns": node.netns}

    with ThreadPoolExecutor(max_workers=16) as pool:
        nodes = list(pool.map(one, lab.nodes))
    services = [{"name": name, "pid": rec.pid if rec else None, "alive": bool(rec and rec.alive()), "port": port}
                for name, rec, port in (("apt-proxy", lab.proxy, lab.proxy_port),
                                        ("repo-http", lab.repo_http, lab.repo_port))]
    return {"running": any(n["alive"] for n in nodes), "kind": KIND, "state": str(state_file(Path(lab.state_dir))),
            "inventory": lab.inventory_path, "key": lab.key_path, "apt_proxy": lab.proxy_url,
            "repo_url": lab.repo_url, "nodes": nodes, "services": services}


# ---------------------------------------------------------------------------- servers on the bridge


def serve(kind: str, directory: Path, bind: str, port_file: Path, access_log: Path | None = None) -> None:
    """The lab's apt cache proxy or stand-in repository (`gpuctl.lab.netcache` handlers),
    bound to the bridge address so that the containers reach it; nothing else; each request
    logged to `access_log` when given."""
    if ipaddress.IPv4Address(bind) not in NETWORK:
        raise ValueError(f"container lab servers bind inside {NETWORK} only, not {bind}")
    directory.mkdir(parents=True, exist_ok=True)
    handler: Any
    if kind == "proxy":
        handler = type("Handler", (CachingProxyHandler,), {"cache_dir": directory, "access_log": access_log})
    else:
        logged = type("Handler", (QuietRepoHandler,), {"access_log": access_log})

        def handler(*args: Any, **kwargs: Any) -> QuietRepoHandler:
            return logged(*args, directory=str(directory), **kwargs)
    server = http.server.ThreadingHTTPServer((bind, 0), handler)
    server.daemon_threads = True
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(f"{server.server_address[1]}\n")
    tmp.replace(port_file)
    log.info("%s serving %s on %s:%d", kind, directory, bind, server.server_address[1])
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpuctl.lab.containers")
    sub = parser.add_subparsers(dest="cmd", required=True)
    srv = sub.add_parser("serve")
    srv.add_argument("kind", choices=["proxy", "repo"])
    srv.add_argument("--dir", required=True, type=Path)
    srv.add_argument("--bind", required=True)
    srv.add_argument("--port-file", required=True, type=Path)
    srv.add_argument("--log", type=Path)
    srv.add_argument("--access-log", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(filename=str(args.log) if args.log else None, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    serve(args.kind, args.dir, args.bind, args.port_file, args.access_log)


if __name__ == "__main__":
    main()

