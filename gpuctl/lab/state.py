"""The lab's on-disk locations and its state file (what runs, where, on which port).

Everything `lab up` starts is recorded here as it starts, so `lab down` (from any
process) stops exactly those processes and removes exactly those files. Process
handling (liveness, stopping by PID) lives here too, because it reads the record.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl.errors import InputError
from gpuctl.fileio import load_json
from gpuctl.paths import share_root

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
STATE_VERSION = 1


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/gpuctl/lab``: images, apt cache, stand-in repo."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuctl" / "lab"


def state_root() -> Path:
    """``${XDG_STATE_HOME:-~/.local/state}/gpuctl/lab``: the running lab's state."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuctl" / "lab"


def state_path() -> Path:
    return state_root() / STATE_FILE


def this_checkout() -> str:
    """The gpuctl checkout (or installed package data) this process runs from, resolved:
    a lab records it, and `lab down` from another one refuses unless forced."""
    return str(share_root().resolve())


def other_owner(recorded: str, what: str) -> str | None:
    """Why this checkout must not stop a lab recorded as started by `recorded` (None: it may).
    A state written before labs recorded their checkout ("") names no owner."""
    here = this_checkout()
    if not recorded or recorded == here:
        return None
    return (f"{what} was started from another checkout, {recorded} (this is {here}); stop it from there, "
            "or pass --force to stop it from here")


@dataclass
class ProcessRecord:
    """A process the lab started: its PID and a string its command line contains,
    so a recycled PID is never mistaken for ours."""

    pid: int
    marker: str

    def alive(self) -> bool:
        return pid_alive(self.pid, self.marker)


@dataclass
class NodeState:
    """One emulated node."""

    name: str
    index: int
    ssh_port: int
    overlay: str
    nvme: list[str]
    mac_mgmt: str
    mac_fabric: str
    serial_log: str
    fabric_ip: str
    vlan_ips: dict[int, str]
    argv: list[str] = field(default_factory=list)
    process: ProcessRecord | None = None


@dataclass
class LabState:
    """The running lab, as written to ``state.json``."""

    sku: str
    smp: int
    memory_mb: int
    nvme_count: int
    nvme_size_gb: int
    image_dir: str
    key_path: str
    known_hosts: str
    state_dir: str
    nodes: list[NodeState] = field(default_factory=list)
    vde_socket: str = ""
    vde: ProcessRecord | None = None
    proxy_port: int = 0
    proxy: ProcessRecord | None = None
    repo_port: int = 0
    repo_http: ProcessRecord | None = None
    repo_dir: str = ""
    inventory_path: str = ""
    profile_dir: str = ""
    public_key: str = ""
    cpu: str = "qemu64"
    keyring_file: str = ""
    keyring_sha256: str = ""
    created: float = field(default_factory=time.time)
    version: int = STATE_VERSION
    checkout: str = field(default_factory=this_checkout)  # who started it (lab down from elsewhere refuses)

    def node(self, name: str) -> NodeState:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise InputError(f"no lab node named {name!r} (lab nodes: {known})")

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def apt_proxy_url(self) -> str:
        """The apt proxy as the guests see it (QEMU user-net maps 10.0.2.2 to host loopback)."""
        return f"http://{GUEST_HOST_ADDRESS}:{self.proxy_port}"

    @property
    def repo_url(self) -> str:
        """The stand-in repository as the guests see it."""
        return f"http://{GUEST_HOST_ADDRESS}:{self.repo_port}/"

    def access_log(self, kind: str) -> Path:
        """The access log of the lab's apt proxy ('proxy') or stand-in repository server
        ('repo'): JSON lines, summed by `gpuctl.lab.netcache.bytes_served`."""
        if kind not in {"proxy", "repo"}:
            raise ValueError(kind)
        return Path(self.state_dir) / f"access-{kind}.jsonl"

    def processes(self) -> dict[str, ProcessRecord]:
        """Every process the lab started, by a readable name."""
        found: dict[str, ProcessRecord] = {}
        for node in self.nodes:
            if node.process is not None:
                found[f"qemu:{node.name}"] = node.process
        for label, rec in (("vde_switch", self.vde), ("apt-proxy", self.proxy),
                           ("repo-http", self.repo_http)):
            if rec is not None:
                found[label] = rec
        return found

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabState:
        def proc(value: Any) -> ProcessRecord | None:
            return ProcessRecord(**value) if value else None

        nodes = []
        for raw in data.get("nodes", []):
            raw = dict(raw)
            raw["process"] = proc(raw.get("process"))
            raw["vlan_ips"] = {int(k): v for k, v in raw.get("vlan_ips", {}).items()}
            nodes.append(NodeState(**raw))
        values = {k: v for k, v in data.items() if k in {f.name for f in dataclasses.fields(cls)}}
        values["nodes"] = nodes
        values.setdefault("checkout", "")  # recorded before labs named their checkout: no owner known
        for key in ("vde", "proxy", "repo_http"):
            values[key] = proc(values.get(key))
        return cls(**values)


GUEST_HOST_ADDRESS = "10.0.2.2"


def save_state(state: LabState, path: Path | None = None) -> Path:
    """Write the state atomically (temp file + rename)."""
    target = path or Path(state.state_dir) / STATE_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_dict(), indent=2, sort_keys=True) + "\n")
    tmp.replace(target)
    return target


def load_state(path: Path | None = None) -> LabState | None:
    """The recorded lab, or None when no lab has been brought up."""
    source = path or state_path()
    if not source.exists():
        return None
    data = load_json(source, what="lab state file")
    try:
        return LabState.from_dict(data)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise InputError(f"{source}: not a lab state file gpuctl can read ({exc}); stop the lab's processes "
                         "by hand and remove it") from None


def _proc_status(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) S ..." — comm may contain spaces and parentheses.
    return text.rsplit(")", 1)[1].split()[0]


def pid_alive(pid: int, marker: str = "") -> bool:
    """True if `pid` runs (not a zombie) and its command line contains `marker`."""
    if pid <= 0:
        return False
    _reap(pid)
    status = _proc_status(pid)
    if status is None or status in {"Z", "X"}:
        return False
    if marker:
        # Right after exec the new command line is not set up yet and reads empty:
        # give it a moment rather than declaring a just-started process dead.
        for _ in range(40):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                return False
            if cmdline.strip():
                return marker.encode() in cmdline
            time.sleep(0.05)
        return False
    return True


def _reap(pid: int) -> None:
    """Collect `pid` if it is our own exited child (tests start and stop in one process)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    except OSError:
        pass


def stop_process(rec: ProcessRecord | None, name: str, timeout: float = 15.0,
                 hard: bool = False) -> bool:
    """SIGTERM the recorded process (SIGKILL at once if `hard`), SIGKILL after
    `timeout`, and wait until it is gone. Returns True if the process had been running."""
    if rec is None or not rec.alive():
        return False
    log.info("stopping %s (pid %d)", name, rec.pid)
    plan = [(signal.SIGKILL, 10.0)] if hard else [(signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)]
    for sig, wait in plan:
        try:
            os.kill(rec.pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_alive(rec.pid):
                return True
            time.sleep(0.1)
    log.warning("%s (pid %d) did not exit after SIGKILL", name, rec.pid)
    return True


def free_port(host: str = "127.0.0.1", avoid: set[int] | None = None) -> int:
    """A TCP port nobody listens on right now on `host` (loopback only)."""
    if not host.startswith("127."):
        raise ValueError(f"lab ports are loopback only, not {host}")
    taken = avoid or set()
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port
    raise RuntimeError("no free port found on loopback")


def port_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0
