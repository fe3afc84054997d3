"""SSH access to lab nodes: the lab key, its known_hosts file, and running commands.

The lab key (ed25519, no passphrase) is generated once per cache under
``<cache>/ssh/`` and baked into the base image. Each lab writes its own known_hosts
(``<state>/known_hosts``) with the image's host key for every node's
``[127.0.0.1]:PORT``, so host keys are checked without prompting.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuctl.errors import ExecutionError
from gpuctl.lab.state import LabState, NodeState, cache_root, load_state

log = logging.getLogger(__name__)

SSH_USER = "root"
SSH_HOST = "127.0.0.1"


@dataclass(frozen=True)
class LabKey:
    path: Path
    public_key: str


def key_dir() -> Path:
    return cache_root() / "ssh"


def ensure_lab_key() -> LabKey:
    """The lab's SSH key pair, generated on first use."""
    directory = key_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    private = directory / "id_ed25519"
    public = directory / "id_ed25519.pub"
    if not private.exists() or not public.exists():
        private.unlink(missing_ok=True)
        public.unlink(missing_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuctl-lab", "-f", str(private)],
            check=True, stdin=subprocess.DEVNULL, capture_output=True,
        )
        log.info("generated lab SSH key %s", private)
    return LabKey(private, public.read_text().strip())


def known_hosts_lines(host_public_key: str, ports: Sequence[int]) -> list[str]:
    """known_hosts entries for the image's host key on each loopback port."""
    key = " ".join(host_public_key.split()[:2])
    return [f"[{SSH_HOST}]:{port} {key}" for port in ports]


def write_known_hosts(path: Path, host_public_key: str, ports: Sequence[int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(known_hosts_lines(host_public_key, ports)) + "\n")


def ssh_argv(
    port: int,
    key_path: str,
    known_hosts: str,
    command: str | Sequence[str] | None = None,
    connect_timeout: int = 10,
    tty: bool = False,
) -> list[str]:
    """The ssh command line for one lab node. A sequence `command` is shell-quoted;
    a string is passed to the remote shell as written."""
    argv = [
        "ssh", "-p", str(port), "-i", key_path,
        "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", f"ConnectTimeout={connect_timeout}",
        "-o", "ServerAliveInterval=15",
        "-o", "LogLevel=ERROR",
    ]
    if not tty:
        argv += ["-o", "BatchMode=yes", "-T"]
    else:
        argv += ["-t"]
    argv.append(f"{SSH_USER}@{SSH_HOST}")
    if command is not None:
        argv.append(command if isinstance(command, str) else shlex.join(command))
    return argv


def _resolve(node: str | NodeState, state: LabState | None) -> tuple[LabState, NodeState]:
    lab = state or load_state()
    if lab is None:
        raise ExecutionError("no lab is running: run `gpuctl lab up` first")
    return lab, (node if isinstance(node, NodeState) else lab.node(node))


def ssh_run(
    node: str | NodeState,
    cmd: str | Sequence[str],
    *,
    state: LabState | None = None,
    timeout: float | None = 600,
    check: bool = False,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `cmd` on a lab node over SSH; returns the completed process (text output).

    With ``check=True`` a non-zero exit raises ExecutionError quoting stderr."""
    lab, target = _resolve(node, state)
    argv = ssh_argv(target.ssh_port, lab.key_path, lab.known_hosts, cmd)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              **({"input": input} if input is not None else {"stdin": subprocess.DEVNULL}))
    except subprocess.TimeoutExpired as exc:
        raise ExecutionError(f"{target.name}: command timed out after {timeout} s: {cmd}") from exc
    if check and proc.returncode != 0:
        raise ExecutionError(
            f"{target.name}: command failed (exit {proc.returncode}): {cmd}\n{proc.stderr.strip()}"
        )
    return proc


def ssh_reachable(node: str | NodeState, state: LabState | None = None, timeout: float = 10) -> bool:
    """True if the node answers `true` over SSH within `timeout` seconds."""
    lab, target = _resolve(node, state)
    argv = ssh_argv(target.ssh_port, lab.key_path, lab.known_hosts, "true",
                    connect_timeout=max(1, int(timeout)))
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout + 5,
                              stdin=subprocess.DEVNULL).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def serial_tail(target: NodeState, lines: int = 40) -> str:
    path = Path(target.serial_log)
    if not path.exists():
        return "(no serial console log)"
    text = path.read_text(errors="replace").replace("\r", "")
    return "\n".join(text.splitlines()[-lines:])


def wait_for_ssh(
    node: str | NodeState,
    timeout: float = 240,
    *,
    state: LabState | None = None,
) -> float:
    """Wait until the node answers over SSH; returns the seconds waited.

    Raises ExecutionError with the tail of the serial console after `timeout`,
    or at once if the node's QEMU process has exited."""
    lab, target = _resolve(node, state)
    start = time.monotonic()
    while True:
        if ssh_reachable(target, lab, timeout=5):
            return time.monotonic() - start
        if target.process is not None and not target.process.alive():
            raise ExecutionError(
                f"{target.name}: QEMU (pid {target.process.pid}) exited before SSH answered; "
                f"serial console {target.serial_log}:\n{serial_tail(target)}"
            )
        if time.monotonic() - start > timeout:
            raise ExecutionError(
                f"{target.name}: no SSH on 127.0.0.1:{target.ssh_port} after {timeout:.0f} s; "
                f"serial console {target.serial_log}:\n{serial_tail(target)}"
            )
        time.sleep(2)
