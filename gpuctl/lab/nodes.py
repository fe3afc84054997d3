"""Lab nodes: QEMU (TCG) guests on the cached image, their fabric switch, and the lab's
lifecycle (`up`, `down`, `status`, `kill_node`, `start_node`) and inventory.

Each node gets a qcow2 overlay over the base image, K emulated NVMe drives (sparse
raw files), a management NIC on QEMU user networking (SSH forwarded from a free
127.0.0.1 port) and a fabric NIC (eth1) on a ``vde_switch`` listening on a unix
socket in the state dir (a hub: every port a VLAN trunk). Nothing listens on any
address but 127.0.0.1.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuctl.errors import ExecutionError, InputError
from gpuctl.lab import check_host_tools
from gpuctl.lab.image import Image, build_image, load_image
from gpuctl.lab.netcache import apt_cache_dir, repo_dir, start_server
from gpuctl.lab.ssh import ensure_lab_key, ssh_reachable, wait_for_ssh, write_known_hosts
from gpuctl.lab.standin.profile import push_profile
from gpuctl.lab.standin.repo import build_lab_repo
from gpuctl.lab.state import (
    LabState,
    NodeState,
    ProcessRecord,
    free_port,
    load_state,
    port_listening,
    save_state,
    state_path,
    state_root,
    stop_process,
)
from gpuctl.paths import inventories_dir

log = logging.getLogger(__name__)

DEFAULT_NODES = 2
DEFAULT_NVME = 4
DEFAULT_NVME_SIZE_GB = 2
DEFAULT_SKU = "hgx-h100-80gb"
DEFAULT_MATRIX = "r570-cuda12.8"
#: vCPUs and memory per node; see the lab README figures in the module tests' report.
DEFAULT_SMP = 2
DEFAULT_MEMORY_MB = 1536
#: The emulated CPU. Debian 12's baseline is plain x86-64, and TCG boots a ``qemu64``
#: guest markedly faster than ``max`` (no AVX/AVX-512 or nested SVM to emulate; the
#: guest's crypto and raid6 self-tests pick slow emulated vector paths with ``max``).
DEFAULT_CPU = "qemu64"
DEFAULT_BOOT_TIMEOUT_S = 240.0
MAX_NODES = 32

FABRIC_NETDEV = "eth1"
FABRIC_RATE_GBPS = 400
#: What eth1 reports as its link speed (ethtool, /sys/class/net/eth1/speed, rxe): reporting only.
FABRIC_SPEED_MBPS = FABRIC_RATE_GBPS * 1000
FABRIC_CIDR = "192.168.50.0/24"
VLAN_ID = 100
VLAN_CIDR = "10.100.0.0/24"
HOST_OFFSET = 10  # gpu-01 -> .11


@dataclass(frozen=True)
class NodeLayout:
    """Deterministic per-node names and addresses."""

    index: int

    @property
    def name(self) -> str:
        return f"gpu-{self.index:02d}"

    @property
    def mac_mgmt(self) -> str:
        return f"52:54:00:6c:00:{self.index:02x}"

    @property
    def mac_fabric(self) -> str:
        return f"52:54:00:6c:01:{self.index:02x}"

    @property
    def fabric_ip(self) -> str:
        return f"192.168.50.{HOST_OFFSET + self.index}"

    @property
    def vlan_ip(self) -> str:
        return f"10.100.0.{HOST_OFFSET + self.index}"


def kernel_cmdline(node: NodeState, apt_proxy: str, public_key: str) -> str:
    """Per-node settings read at boot (hostname, apt proxy; the lab key at first boot)."""
    kind, blob = public_key.split()[:2]
    if kind != "ssh-ed25519":
        raise ExecutionError(f"the lab key must be ed25519, not {kind}")
    return " ".join([
        "console=ttyS0", "root=/dev/vda", "rw", "net.ifnames=0", "biosdevname=0",
        f"systemd.hostname={node.name}", f"gpuctl.apt_proxy={apt_proxy}", f"gpuctl.ssh_key={blob}",
    ])


def qemu_argv(node: NodeState, image: Image, state: LabState) -> list[str]:
    """The QEMU command line for one node (no shell involved)."""
    argv = [
        "qemu-system-x86_64",
        "-name", f"gpuctl-lab-{node.name}",
        "-nodefaults", "-no-user-config",
        "-machine", "pc", "-accel", "tcg,thread=multi", "-cpu", state.cpu,
        "-smp", str(state.smp), "-m", str(state.memory_mb),
        "-display", "none", "-monitor", "none",
        "-chardev", f"file,id=serial0,path={node.serial_log}",
        "-serial", "chardev:serial0",
        "-kernel", str(image.kernel), "-initrd", str(image.initrd),
        "-append", kernel_cmdline(node, state.apt_proxy_url, state.public_key),
        "-drive", f"file={node.overlay},if=virtio,format=qcow2,discard=unmap",
        "-device", "virtio-rng-pci",
        "-netdev", f"user,id=mgmt,hostfwd=tcp:127.0.0.1:{node.ssh_port}-:22",
        "-device", f"virtio-net-pci,netdev=mgmt,mac={node.mac_mgmt}",
        "-netdev", f"vde,id=fabric,sock={state.vde_socket}",
        "-device",
        f"virtio-net-pci,netdev=fabric,mac={node.mac_fabric},speed={FABRIC_SPEED_MBPS},duplex=full",
    ]
    for k, path in enumerate(node.nvme):
        argv += [
            "-drive", f"file={path},format=raw,if=none,id=nvme{k}",
            "-device", f"nvme,serial=GPUCTL{node.index:02d}N{k},drive=nvme{k}",
        ]
    return argv


def _node_dir(state: LabState, name: str) -> Path:
    return Path(state.state_dir) / "nodes" / name


def _spawn(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)


def _start_qemu(state: LabState, node: NodeState) -> None:
    log_path = Path(state.state_dir) / "logs" / f"{node.name}.qemu.log"
    Path(node.serial_log).parent.mkdir(parents=True, exist_ok=True)
    Path(node.serial_log).write_bytes(b"")
    proc = _spawn(node.argv, log_path)
    node.process = ProcessRecord(proc.pid, node.overlay)
    try:
        proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        return
    raise ExecutionError(
        f"{node.name}: QEMU exited at once (exit {proc.returncode}); "
        f"{log_path}:\n{log_path.read_text()[-2000:]}"
    )


def _start_vde(state: LabState) -> None:
    sock = Path(state.state_dir) / "fabric.vde"
    pidfile = Path(state.state_dir) / "fabric.pid"
    pidfile.unlink(missing_ok=True)
    if sock.exists():
        shutil.rmtree(sock)
    # --hub: every port a trunk. As a switch, vde_switch drops 802.1Q-tagged frames of a VLAN
    # the port is not a tagged member of (ports are numbered as guests connect, so membership
    # cannot be set up front): the nodes' VLAN interfaces came up with their addresses but could
    # not reach each other (found by the package-cache lab test, over the storage VLAN).
    argv = ["vde_switch", "--hub", "--sock", str(sock), "--daemon", "--pidfile", str(pidfile),
            "--numports", str(MAX_NODES + 4)]
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, capture_output=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if pidfile.exists() and pidfile.read_text().strip():
            state.vde = ProcessRecord(int(pidfile.read_text().strip()), str(sock))
            state.vde_socket = str(sock)
            return
        time.sleep(0.05)
    raise ExecutionError(f"vde_switch did not write its pid file {pidfile}")


def _make_node(state: LabState, image: Image, layout: NodeLayout, taken: set[int],
               nvme: int, nvme_size_gb: int) -> NodeState:
    ndir = _node_dir(state, layout.name)
    ndir.mkdir(parents=True, exist_ok=True)
    overlay = ndir / "root.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image.disk), "-F", "raw",
         str(overlay)],
        check=True, capture_output=True, stdin=subprocess.DEVNULL,
    )
    drives = []
    for k in range(nvme):
        path = ndir / f"nvme{k}.img"
        with path.open("wb") as fh:
            fh.truncate(nvme_size_gb * 1024**3)
        drives.append(str(path))
    port = free_port(avoid=taken)
    taken.add(port)
    node = NodeState(
        name=layout.name, index=layout.index, ssh_port=port, overlay=str(overlay), nvme=drives,
        mac_mgmt=layout.mac_mgmt, mac_fabric=layout.mac_fabric,
        serial_log=str(Path(state.state_dir) / "logs" / f"{layout.name}.serial.log"),
        fabric_ip=layout.fabric_ip, vlan_ips={VLAN_ID: layout.vlan_ip},
    )
    node.argv = qemu_argv(node, image, state)
    return node


def _standin_repo() -> tuple[str, str]:
    """Build (or reuse) the stand-in NVIDIA repository in `repo_dir()`; returns its keyring
    (file name, sha256) for the inventory. A lab without it cannot install the stack, so a
    failure is an error (`gpuctl.lab.standin.repo.build_lab_repo` names the cause)."""
    started = time.monotonic()
    build = build_lab_repo()
    log.info("lab: stand-in repository ready in %.1f s", time.monotonic() - started)
    return build.keyring_file, build.keyring_sha256


def _push_profiles(state: LabState, timeout: float = 60) -> None:
    """Give every node its emulated hardware (profile, fault file, PCI view) — the lab's
    stand-in for the GPUs the guests lack; it persists across reboots."""
    with ThreadPoolExecutor(max_workers=len(state.nodes)) as pool:
        list(pool.map(lambda n: push_profile(n.name, state.sku, n.index, state=state, timeout=timeout),
                      state.nodes))


def _check_args(nodes: int, nvme: int, smp: int, memory_mb: int) -> None:
    problems = []
    if not 1 <= nodes <= MAX_NODES:
        problems.append(f"--nodes must be 1..{MAX_NODES}, not {nodes}")
    if not 0 <= nvme <= 8:
        problems.append(f"--nvme must be 0..8, not {nvme}")
    if not 1 <= smp <= 8:
        problems.append(f"--smp must be 1..8, not {smp}")
    if memory_mb < 512:
        problems.append(f"--memory must be at least 512 MiB, not {memory_mb}")
    if problems:
        raise InputError("invalid lab options", problems)


def up(
    nodes: int = DEFAULT_NODES,
    sku: str = DEFAULT_SKU,
    nvme: int = DEFAULT_NVME,
    *,
    nvme_size_gb: int = DEFAULT_NVME_SIZE_GB,
    smp: int = DEFAULT_SMP,
    memory_mb: int = DEFAULT_MEMORY_MB,
    cpu: str = DEFAULT_CPU,
    matrix: str | None = None,
    inventory_path: Path | None = None,
    boot_timeout: float = DEFAULT_BOOT_TIMEOUT_S,
) -> LabState:
    """Bring the lab up: apt cache, image (built once), repo server, fabric, N nodes;
    wait for SSH on every node and write the lab inventory. On failure, everything
    started is stopped again before the error is raised."""
    _check_args(nodes, nvme, smp, memory_mb)
    target = check_inventory_target(inventory_path or default_inventory_path())
    check_host_tools()
    previous = load_state()
    if previous is not None:
        if any(rec.alive() for rec in previous.processes().values()):
            raise ExecutionError(
                f"a lab is already running (state {state_path()}): run `gpuctl lab down` first"
            )
        down()
    sdir = state_root()
    sdir.mkdir(parents=True, exist_ok=True)
    key = ensure_lab_key()
    state = LabState(
        sku=sku, smp=smp, memory_mb=memory_mb, cpu=cpu, nvme_count=nvme, nvme_size_gb=nvme_size_gb,
        image_dir="", key_path=str(key.path), public_key=key.public_key, known_hosts=str(sdir / "known_hosts"),
        state_dir=str(sdir), repo_dir=str(repo_dir()), profile_dir=str(sdir / "profiles"),
        inventory_path=str(target),
    )
    Path(state.profile_dir).mkdir(parents=True, exist_ok=True)
    save_state(state)
    started = time.monotonic()
    try:
        run_dir = sdir / "run"
        state.proxy_port, state.proxy = start_server("proxy", apt_cache_dir(), run_dir,
                                                     access_log=state.access_log("proxy"), repo=repo_dir())
        save_state(state)
        image = build_image(proxy_port=state.proxy_port)
        state.image_dir = str(image.directory)
        state.repo_port, state.repo_http = start_server("repo", repo_dir(), run_dir,
                                                        access_log=state.access_log("repo"))
        save_state(state)
        _start_vde(state)
        save_state(state)
        taken = {state.proxy_port, state.repo_port}
        for i in range(1, nodes + 1):
            state.nodes.append(_make_node(state, image, NodeLayout(i), taken, nvme, nvme_size_gb))
        write_known_hosts(Path(state.known_hosts), image.host_public_key,
                          [n.ssh_port for n in state.nodes])
        boot_start = time.monotonic()
        for node in state.nodes:
            _start_qemu(state, node)
            save_state(state)
        # The stand-in repository is (re)built while the nodes boot: nothing reads it before
        # provisioning, and both take tens of seconds.
        with ThreadPoolExecutor(max_workers=len(state.nodes) + 1) as pool:
            repo = pool.submit(_standin_repo)
            waits = list(pool.map(lambda n: wait_for_ssh(n, boot_timeout, state=state),
                                  state.nodes))
            state.keyring_file, state.keyring_sha256 = repo.result()
        for node, waited in zip(state.nodes, waits, strict=True):
            log.info("%s: SSH after %.1f s (port %d)", node.name, waited, node.ssh_port)
        # a guest that has just answered SSH is still booting: under TCG on a loaded machine the
        # profile step took over 60 s (3 nodes at load ~28, 2026-12-06), so it gets the boot's limit
        _push_profiles(state, timeout=max(60.0, boot_timeout))
        log.info("lab: %d node(s) up, boot-to-SSH %.1f s, total %.1f s", len(state.nodes),
                 time.monotonic() - boot_start, time.monotonic() - started)
        write_lab_inventory(state, matrix=matrix)
        save_state(state)
    except BaseException:
        log.error("lab up failed; stopping what was started")
        try:
            down(state)
        except Exception:  # the original error matters more
            log.exception("cleanup after failed lab up also failed")
        raise
    return state


def down(state: LabState | None = None) -> list[str]:
    """Stop every process the lab started (by recorded PID), remove overlays and NVMe
    images and the state file. Returns the names of the processes that were running.
    Serial and QEMU logs stay under ``<state>/logs/`` for post-mortems."""
    lab = state or load_state()
    if lab is None:
        return []
    stopped = [name for name, rec in lab.processes().items() if stop_process(rec, name)]
    ports = [n.ssh_port for n in lab.nodes] + [lab.proxy_port, lab.repo_port]
    busy = [p for p in ports if p and port_listening(p)]
    if busy:
        log.warning("ports still answering after lab down: %s", busy)
    sdir = Path(lab.state_dir)
    for path in (sdir / "nodes", sdir / "fabric.vde", sdir / "run"):
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
    for path in (sdir / "fabric.pid", Path(lab.known_hosts), sdir / "state.json"):
        path.unlink(missing_ok=True)
    if lab.inventory_path and Path(lab.inventory_path).resolve() == (sdir / "inventory.yaml").resolve():
        Path(lab.inventory_path).unlink(missing_ok=True)
    log.info("lab down: stopped %s", ", ".join(stopped) or "nothing")
    return stopped


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def status(check_ssh: bool = True) -> dict[str, Any]:
    """The lab as recorded and as found: processes alive, ports, SSH reachable, RSS."""
    lab = load_state()
    if lab is None:
        return {"running": False, "state": str(state_path()), "nodes": [], "services": []}
    nodes = []
    for node in lab.nodes:
        alive = node.process is not None and node.process.alive()
        nodes.append({
            "name": node.name,
            "pid": node.process.pid if node.process else None,
            "alive": alive,
            "ssh_port": node.ssh_port,
            "ssh": bool(alive and check_ssh and ssh_reachable(node, lab, timeout=5)),
            "rss_mb": _rss_mb(node.process.pid) if alive and node.process else None,
            "fabric_ip": node.fabric_ip,
            "serial_log": node.serial_log,
        })
    services = []
    for name, rec, port in (("apt-proxy", lab.proxy, lab.proxy_port),
                            ("repo-http", lab.repo_http, lab.repo_port),
                            ("vde_switch", lab.vde, None)):
        services.append({"name": name, "pid": rec.pid if rec else None,
                         "alive": bool(rec and rec.alive()), "port": port})
    return {
        "running": any(n["alive"] for n in nodes),
        "state": str(state_path()),
        "sku": lab.sku,
        "inventory": lab.inventory_path,
        "key": lab.key_path,
        "apt_proxy": lab.apt_proxy_url,
        "repo_url": lab.repo_url,
        "nodes": nodes,
        "services": services,
    }


def _require_state() -> LabState:
    lab = load_state()
    if lab is None:
        raise ExecutionError("no lab is running: run `gpuctl lab up` first")
    return lab


def kill_node(node: str, state: LabState | None = None) -> None:
    """Hard-kill one node's QEMU (SIGKILL, like pulling the power); its overlay stays.

    Pass the caller's `state` object to keep it current (it is saved too)."""
    lab = state or _require_state()
    target = lab.node(node)
    if target.process is None or not target.process.alive():
        raise ExecutionError(f"{node}: not running")
    stop_process(target.process, f"qemu:{node}", hard=True)
    log.info("%s: killed (pid %d)", node, target.process.pid)


def start_node(node: str, wait: bool = True, timeout: float = DEFAULT_BOOT_TIMEOUT_S,
               state: LabState | None = None) -> float:
    """Start a stopped node again on the same overlay, drives and port.

    Returns the seconds until SSH answered (0.0 if `wait` is False). Pass the
    caller's `state` object to keep its PID record current (it is saved too)."""
    lab = state or _require_state()
    target = lab.node(node)
    if target.process is not None and target.process.alive():
        raise ExecutionError(f"{node}: already running (pid {target.process.pid})")
    # a just-killed QEMU may still be closing its sockets (the kernel releases its memory,
    # which ends the pid check, before its files): give the port a moment to come free
    deadline = time.monotonic() + 15
    while port_listening(target.ssh_port) and time.monotonic() < deadline:
        time.sleep(0.5)
    if port_listening(target.ssh_port):
        raise ExecutionError(f"{node}: port 127.0.0.1:{target.ssh_port} is taken by another process")
    _start_qemu(lab, target)
    save_state(lab)
    return wait_for_ssh(target, timeout, state=lab) if wait else 0.0


def replace_node(node: str, wait: bool = True, timeout: float = DEFAULT_BOOT_TIMEOUT_S,
                 state: LabState | None = None) -> float:
    """Replace a node as a hardware swap would: power it off (SIGKILL if running), give it a
    fresh root disk from the base image and blank NVMe drives, and boot it on the same
    name, port, MACs and emulated GPUs. What a rebuild must restore is then really gone.

    Returns the seconds until SSH answered (0.0 if `wait` is False)."""
    lab = state or _require_state()
    target = lab.node(node)
    if target.process is not None and target.process.alive():
        stop_process(target.process, f"qemu:{node}", hard=True)
    image = image_for(lab)
    overlay = Path(target.overlay)
    overlay.unlink(missing_ok=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image.disk), "-F", "raw", str(overlay)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    for path in target.nvme:
        with Path(path).open("wb") as fh:  # truncate to zero, then back to size: all blocks read as zeros
            fh.truncate(lab.nvme_size_gb * 1024**3)
    target.process = None
    save_state(lab)
    waited = start_node(node, wait=wait, timeout=timeout, state=lab)
    if wait:
        push_profile(target.name, lab.sku, target.index, state=lab, timeout=max(60.0, timeout))
    log.info("%s: replaced (fresh disk, blank NVMe)", node)
    return waited


def lab_inventory_template() -> Path:
    """The checked-in lab inventory whose schema and fixed sections `lab up` keeps."""
    return inventories_dir() / "lab.yaml"


def default_inventory_path() -> Path:
    """Where `gpuctl lab up` writes the generated inventory unless told otherwise: the lab
    state dir (``lab down`` removes it), from a checkout or an installed wheel alike. The
    checked-in ``inventories/lab.yaml`` is its template and is never written."""
    return state_root() / "inventory.yaml"


def check_inventory_target(path: Path) -> Path:
    """`path` resolved, where the generated lab inventory may go: anywhere but under the
    shipped inventories folder (the checkout's tracked ``inventories/``, or the wheel's
    copy), which holds the template. InputError otherwise, before anything starts."""
    target = Path(path).expanduser().resolve()
    shipped = lab_inventory_template().parent.resolve()
    if target.is_relative_to(shipped):
        raise InputError(
            f"--inventory {target}: the lab inventory is generated and may not be written under {shipped}",
            [f"{shipped} holds the checked-in inventories; {lab_inventory_template().name} there is the lab "
             "inventory's template and stays as shipped",
             f"leave --inventory out (it goes to {default_inventory_path()}) or name a path outside it, "
             "e.g. .lab/lab.yaml in a checkout (git-ignored)"],
        )
    return target


def write_lab_inventory(state: LabState, matrix: str | None = None) -> Path:
    """Render the running lab's inventory (`render_lab_inventory`) to ``state.inventory_path``
    and return that path. Refuses a target under the shipped inventories (the template) and a
    lab without the stand-in repository's keyring (its nvidia_repo role could not install the
    stack): both are errors, never a silently different file."""
    target = check_inventory_target(Path(state.inventory_path))
    if not (state.keyring_file and state.keyring_sha256):
        raise ExecutionError("the lab has no stand-in NVIDIA repository keyring: its inventory would not let "
                             f"provisioning install the stack; not writing {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_lab_inventory(state, matrix=matrix))
    state.inventory_path = str(target)
    return target


def _fallback_inventory() -> dict[str, Any]:
    """The fixed sections, used when no lab.yaml template is shipped."""
    return {
        "cluster": {"name": "lab", "sku": DEFAULT_SKU, "matrix": DEFAULT_MATRIX, "os": "debian-12"},
        "ssh": {"user": "root"},
        "management": {"interface": "eth0"},
        "fabric": {"type": "roce", "rate_gbps": FABRIC_RATE_GBPS, "hcas_per_node": 1, "hcas": ["rxe0"],
                   "interfaces": [FABRIC_NETDEV], "soft_roce": True,
                   "roce": {"cidr": FABRIC_CIDR, "mtu": 1500}},
        "vlans": [{"id": VLAN_ID, "parent": FABRIC_NETDEV, "name": "storage", "cidr": VLAN_CIDR}],
        "storage": {"raid": {"level": 0, "devices": "auto", "fs": "xfs", "mount": "/raid"}},
        "racks": [{"name": "lab", "power_kw": 100, "cooling": "liquid"}],
    }


def render_lab_inventory(state: LabState, matrix: str | None = None,
                         template: Path | None = None) -> str:
    """The inventory YAML for the running lab.

    The fixed sections (fabric, VLANs, storage, racks, hardware and preflight
    overrides, …) come from the checked-in ``inventories/lab.yaml`` (the inventory
    model's owner keeps that file valid); this fills in what only the running lab
    knows: SKU, SSH key and known_hosts, repository URLs, NVMe count, nodes and ports."""
    source = template or lab_inventory_template()
    data: dict[str, Any] = (
        yaml.safe_load(source.read_text()) if source.is_file() else None
    ) or _fallback_inventory()
    cluster = dict(data.get("cluster") or {})
    cluster.update({"name": cluster.get("name", "lab"), "sku": state.sku})
    if matrix:
        cluster["matrix"] = matrix
    cluster.setdefault("matrix", DEFAULT_MATRIX)
    cluster.setdefault("os", "debian-12")
    data["cluster"] = cluster
    ssh_section = dict(data.get("ssh") or {})
    ssh_section.update({"user": "root", "key": state.key_path, "known_hosts": state.known_hosts,
                        "strict_host_keys": True})
    data["ssh"] = ssh_section
    repos = dict(data.get("repos") or {})
    repos.update({"mirror": state.repo_url, "apt_proxy": state.apt_proxy_url})
    if state.keyring_sha256:
        repos.update({"keyring_file": state.keyring_file, "keyring_sha256": state.keyring_sha256})
    else:
        repos.pop("keyring_file", None)
        repos.pop("keyring_sha256", None)
    data["repos"] = repos
    hardware = data.get("hardware")
    if isinstance(hardware, dict) and isinstance(hardware.get("nvme_count"), dict):
        hardware["nvme_count"] = {
            "value": state.nvme_count,
            "source": f"lab: {state.nvme_count} emulated NVMe drives per node (gpuctl lab up --nvme)",
        }
    rack = (data.get("racks") or [{"name": "lab"}])[0]["name"]
    data["nodes"] = [
        {"name": n.name, "address": "127.0.0.1", "ssh_port": n.ssh_port, "rack": rack,
         "fabric_ips": [n.fabric_ip], "vlan_ips": dict(n.vlan_ips)}
        for n in state.nodes
    ]
    data["lab"] = {"state": str(Path(state.state_dir) / "state.json"), "profile_dir": state.profile_dir,
                   "nvme_per_node": state.nvme_count, "image": state.image_dir}
    header = ("# Written by `gpuctl lab up` for the running lab (rewritten at every `lab up`);\n"
              "# the fixed sections are kept from the checked-in inventories/lab.yaml.\n")
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110)


def image_for(state: LabState) -> Image:
    image = load_image(Path(state.image_dir))
    if image is None:
        raise ExecutionError(f"the lab image {state.image_dir} is gone: run `gpuctl lab up` again")
    return image
