"""testinfra backend ``gpuctl://NODE``: one in-process paramiko connection per host, with
the host keys checked like OpenSSH would.

Why: testinfra's ``ssh://`` backend starts one ``ssh`` client process per command (plus
a ControlMaster per host). At 64 container nodes on two cores that cost verify ~3× the
CPU and ~1.6× the wall time of the same commands over paramiko (measured for issue 8),
the way pyinfra runs them. testinfra's own ``paramiko://`` backend does not read
known_hosts at all (it warns and accepts any key), so it is not used as is.

The backend reads the run's generated ssh_config (`gpuctl.checks.sshconfig`) for
HostName, Port, User, IdentityFile, UserKnownHostsFile, StrictHostKeyChecking and
ConnectTimeout:

- host keys follow `gpuctl.hostkeys` (one policy for every command): ``StrictHostKeyChecking
  yes`` refuses an unknown host, ``accept-new`` records it; a *changed* key is always refused.
  Without UserKnownHostsFile: gpuctl's own known_hosts plus the user's ~/.ssh/known_hosts.
- Connection and protocol errors raise ``RuntimeError`` with an object carrying
  ``stderr``, as the ssh backend does for exit 255, so `gpuctl.checks.probe` reports the
  host unreachable with the reason.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

import paramiko
from testinfra.backend import base
from testinfra.backend.paramiko import ParamikoBackend

from gpuctl import hostkeys

log = logging.getLogger(__name__)

NAME = "gpuctl"
_OPEN: list[paramiko.SSHClient] = []


class _Failure:
    """What `Probe` reads from a failed connection: ``exc.args[0].stderr``."""

    def __init__(self, stderr: str) -> None:
        self.stderr = stderr
        self.rc = 255

    def __repr__(self) -> str:
        return f"ssh failed: {self.stderr}"


@functools.lru_cache(maxsize=8)
def _plain_blocks(path: str, mtime: float) -> dict[str, dict[str, Any]] | None:
    """gpuctl's generated ssh_config (`Host <one name>` blocks, no patterns, Match or
    Include) as {host: {lowercased key: value}}; None for anything else. paramiko's
    lookup scans every block per host (and calls getpass per block): quadratic in nodes."""
    blocks: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    with open(path) as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition(" ")
            key, value = key.lower(), value.strip().strip('"')
            if key == "host":
                if any(c in value for c in "*?! ,"):
                    return None
                current = blocks.setdefault(value, {})
            elif key in ("match", "include") or current is None:
                return None
            elif key == "identityfile":
                current.setdefault(key, []).append(value)
            else:
                current.setdefault(key, value)
    return blocks


def _host_config(path: str, host: str) -> dict[str, Any]:
    blocks = _plain_blocks(path, os.path.getmtime(path))
    if blocks is not None:
        return dict(blocks.get(host, {}))
    return dict(paramiko.SSHConfig.from_path(path).lookup(host))


def _first(value: Any) -> str | None:
    if isinstance(value, list):
        return str(value[0]) if value else None
    return None if value is None else str(value)


class CheckedParamikoBackend(ParamikoBackend):
    NAME = NAME

    @functools.cached_property
    def client(self) -> paramiko.SSHClient:
        cfg: dict[str, Any] = {}
        if self.ssh_config:
            cfg = _host_config(self.ssh_config, self.host.name)
        hostname = cfg.get("hostname", self.host.name)
        port = int(self.host.port or cfg.get("port", 22))
        known_hosts = _first(cfg.get("userknownhostsfile"))
        known_hosts = os.path.expanduser(known_hosts) if known_hosts else None
        strict = str(cfg.get("stricthostkeychecking", "yes")).lower()
        client = paramiko.SSHClient()
        # No keys loaded: paramiko hands every offered key to the shared gpuctl policy
        # (gpuctl.hostkeys), which accepts known keys, records new ones and refuses changed ones.
        policy = hostkeys.Policy.for_inventory(known_hosts, strict == "yes")
        client.set_missing_host_key_policy(policy.paramiko_policy())
        # ask for the key types known_hosts holds for the host (as OpenSSH does), else the
        # server's other key (the type paramiko prefers) would be judged a changed key
        disabled = policy.disabled_key_algorithms(hostkeys.host_name(hostname, port))
        key = _first(cfg.get("identityfile"))
        timeout = float(cfg.get("connecttimeout", self.timeout))
        try:
            client.connect(hostname=hostname, port=port, username=self.host.user or cfg.get("user"),
                           key_filename=os.path.expanduser(key) if key else None,
                           look_for_keys=key is None, allow_agent=key is None,
                           timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                           disabled_algorithms={"keys": disabled} if disabled else None)
        except BaseException:
            # paramiko leaves the transport thread of a refused connection (a changed host
            # key, failed auth) running; one per retry and host adds up over a cluster.
            client.close()
            raise
        _OPEN.append(client)
        return client

    def run(self, command: str, *args: str, **kwargs: Any) -> base.CommandResult:
        try:
            return super().run(command, *args, **kwargs)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.__dict__.pop("client", None)  # reconnect on the next command
            raise RuntimeError(_Failure(f"{type(exc).__name__}: {exc}")) from exc


def close_all() -> None:
    """Close every connection this backend opened (end of a verify run)."""
    while _OPEN:
        client = _OPEN.pop()
        try:
            client.close()
        except Exception as exc:  # a connection already gone must not hide the results
            log.debug("closing a paramiko client: %r", exc)


def register() -> None:
    """Make ``gpuctl://`` known to testinfra (idempotent)."""
    from testinfra import backend

    backend.BACKENDS.setdefault(NAME, f"{__name__}.CheckedParamikoBackend")
