"""Running benchmark commands on the nodes: a small parallel SSH executor.

Each command runs through the system `ssh` client with options generated from the
inventory (user, key, port, known_hosts, host key policy, connect timeout) and
`BatchMode=yes`, wrapped in a remote `timeout` so nothing outlives its budget on the
node. Hosts run in parallel threads; every call returns stdout, stderr, the exit status
and the time taken per host — never raises for a failing command. A node whose address
is `@local` runs its commands on this machine through `bash` (the hardware tier).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpuctl import hostkeys
from gpuctl.inventory import LoadedInventory
from gpuctl.shellcmd import sh
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)

LOCAL_ADDRESS = "@local"
SSH_UNREACHABLE = 255
TIMEOUT_EXIT = 124


@dataclass(frozen=True)
class SshTarget:
    """How to reach one node."""

    name: str
    address: str
    port: int = 22
    user: str = "root"
    key: str | None = None
    known_hosts: str | None = None
    strict_host_keys: bool = False
    connect_timeout_s: int = 10

    @property
    def local(self) -> bool:
        return self.address == LOCAL_ADDRESS

    def ssh_options(self) -> list[str]:
        """`-o` options (and -p/-i) for ssh, from the inventory's ssh settings."""
        opts = ["-p", str(self.port)]
        if self.key:
            opts += ["-i", os.path.expanduser(self.key), "-o", "IdentitiesOnly=yes"]
        opts += hostkeys.Policy.for_inventory(self.known_hosts, self.strict_host_keys).ssh_options()
        opts += [
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={self.connect_timeout_s}",
            "-o", "ServerAliveInterval=15",
            "-o", "LogLevel=ERROR",
        ]
        return opts

    def argv(self, script: str, timeout_s: float) -> list[str]:
        """The local argv that runs `script` (a bash script) on the node within `timeout_s`."""
        remote = sh("timeout", "-k", "5", int(timeout_s), "bash", "-c", script)
        if self.local:
            return ["bash", "-c", remote]
        return ["ssh", *self.ssh_options(), "-T", f"{self.user}@{self.address}", remote]


def targets_for(loaded: LoadedInventory, specs: Sequence[NodeSpec]) -> dict[str, SshTarget]:
    """One SshTarget per NodeSpec, with the inventory's ssh settings."""
    ssh = loaded.inventory.ssh
    return {
        s.node: SshTarget(
            name=s.node, address=s.address, port=s.ssh_port, user=s.ssh_user, key=ssh.key,
            known_hosts=ssh.known_hosts, strict_host_keys=ssh.strict_host_keys,
            connect_timeout_s=ssh.connect_timeout_s,
        )
        for s in specs
    }


@dataclass(frozen=True)
class CmdResult:
    host: str
    script: str
    exit_status: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    stopped: str | None = None  # why the watchdog stopped it (`run_parallel_watched`)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out

    @property
    def unreachable(self) -> bool:
        return self.exit_status == SSH_UNREACHABLE and not self.stdout

    def reason(self) -> str:
        """The last line a failed command said, or its exit status (or its timeout)."""
        if self.timed_out:
            return f"timed out after {self.duration_s:.0f} s"
        return (self.stderr.strip().splitlines() or self.stdout.strip().splitlines()
                or [f"exit {self.exit_status}"])[-1]

    def transcript(self) -> str:
        """What is kept in the run record: the command, its exit status, stdout and stderr."""
        state = "timed out" if self.timed_out else f"exit {self.exit_status}"
        if self.stopped:
            state = f"stopped: {self.stopped}"
        return (f"$ {self.script}\n# {state} after {self.duration_s:.1f} s\n"
                f"{self.stdout}" + (f"\n# stderr:\n{self.stderr}" if self.stderr.strip() else ""))


def run(target: SshTarget, script: str, timeout_s: float, stdin: str | None = None) -> CmdResult:
    """Run one script on one node; a local timeout backs up the remote one."""
    start = time.monotonic()
    argv = target.argv(script, timeout_s)
    log.debug("%s: %s", target.name, script)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 30,
                              **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}))
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return CmdResult(target.name, script, TIMEOUT_EXIT, out, err, time.monotonic() - start, True)
    except OSError as exc:
        return CmdResult(target.name, script, 127, "", f"cannot start {argv[0]}: {exc}", time.monotonic() - start)
    timed_out = proc.returncode == TIMEOUT_EXIT
    return CmdResult(target.name, script, proc.returncode, proc.stdout, proc.stderr,
                     time.monotonic() - start, timed_out)


def run_parallel(jobs: Mapping[str, tuple[SshTarget, str]], timeout_s: float,
                 stdin: Mapping[str, str] | None = None, max_workers: int = 64) -> dict[str, CmdResult]:
    """Run `jobs` (key → (target, script)) at once; key → result, in the order given."""
    if not jobs:
        return {}
    stdin = stdin or {}
    with ThreadPoolExecutor(max_workers=min(max_workers, len(jobs))) as pool:
        futures = {key: pool.submit(run, target, script, timeout_s, stdin.get(key))
                   for key, (target, script) in jobs.items()}
        return {key: fut.result() for key, fut in futures.items()}


def run_parallel_watched(jobs: Mapping[str, tuple[SshTarget, str]], timeout_s: float,
                         stdin: Mapping[str, str] | None = None, grace_s: float = 60.0) -> dict[str, CmdResult]:
    """Run `jobs` at once, for jobs that only succeed together (the launchers of one
    distributed run): each is bounded by `timeout_s` as in `run`, and once one has failed
    the others get `grace_s` more to finish (and report their own error), then are stopped:
    SIGTERM to the local ssh client or `@local` shell (its process group), SIGKILL 10 s later.
    A stopped job's result has `timed_out` and `stopped` naming the job that failed first.
    On an SSH node the remote `timeout` still ends what the closed session leaves running."""
    if not jobs:
        return {}
    stdin = stdin or {}
    lock = threading.Lock()
    first_failure: dict[str, float | str] = {}

    def failed(key: str) -> None:
        with lock:
            if not first_failure:
                first_failure.update(key=key, at=time.monotonic())

    def one(key: str, target: SshTarget, script: str) -> CmdResult:
        start = time.monotonic()
        argv = target.argv(script, timeout_s)
        text = stdin.get(key)
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if text is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
        except OSError as exc:
            failed(key)
            return CmdResult(target.name, script, 127, "", f"cannot start {argv[0]}: {exc}", time.monotonic() - start)
        pending = text
        while True:
            try:
                out, err = proc.communicate(input=pending, timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pending = None
            now = time.monotonic()
            with lock:
                other = first_failure.get("key")
                since = float(first_failure.get("at", now))
            reason = None
            if now - start > timeout_s + 30:
                reason = f"no answer {timeout_s + 30:.0f} s after it started"
            elif other is not None and other != key and now - since > grace_s:
                reason = f"{other} failed {now - since:.0f} s earlier"
            if reason is not None:
                out, err = _stop(proc)
                return CmdResult(target.name, script, TIMEOUT_EXIT, out, err, time.monotonic() - start, True, reason)
        res = CmdResult(target.name, script, proc.returncode, out, err, time.monotonic() - start,
                        proc.returncode == TIMEOUT_EXIT)
        if not res.ok:
            failed(key)
        return res

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {key: pool.submit(one, key, target, script) for key, (target, script) in jobs.items()}
        return {key: fut.result() for key, fut in futures.items()}


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM the process group, SIGKILL after 10 s; what it wrote until then."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            return proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return "", "gpuctl: the process did not end after SIGKILL"


def run_server_client(server: SshTarget, server_script: str, client: SshTarget, client_script: str,
                      timeout_s: float, start_delay_s: float = 2.0,
                      client_retries: int = 3) -> tuple[CmdResult, CmdResult]:
    """Start a server on one node, then the client on another (retrying while the server
    is not yet listening); both results once the server has exited."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        server_future = pool.submit(run, server, server_script, timeout_s)
        time.sleep(start_delay_s)
        client_result = run(client, client_script, timeout_s)
        for _ in range(client_retries - 1):
            if client_result.ok or client_result.unreachable or server_future.done():
                break
            time.sleep(start_delay_s)
            client_result = run(client, client_script, timeout_s)
        return server_future.result(), client_result
