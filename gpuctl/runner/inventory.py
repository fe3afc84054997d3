"""pyinfra inventory from NodeSpecs: SSH settings, host data, the shared reboot gate.

Host names in pyinfra are the node names (`gpu-01`); the SSH connector gets the address
through `ssh_hostname`. Host data carries the NodeSpec (`SPEC_KEY`), the RunOptions
(`OPTIONS_KEY`) and the run's RebootGate (`REBOOT_GATE_KEY`), so roles read them through
`gpuctl.deploy_context` and `gpuctl.runner.reboot`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl import hostkeys
from gpuctl.deploy_context import OPTIONS_KEY, SPEC_KEY, RunOptions
from gpuctl.errors import ExecutionError
from gpuctl.inventory import LoadedInventory
from gpuctl.runner.reboot import REBOOT_GATE_KEY
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)

# Connection attempts beyond the first: small, so unreachable hosts fail in seconds.
SSH_CONNECT_RETRIES = 1


@dataclass(frozen=True)
class SshSettings:
    """The inventory's `ssh:` block, resolved (paths expanded)."""

    user: str = "root"
    key: str | None = None
    known_hosts: str | None = None
    strict_host_keys: bool = False
    connect_timeout_s: int = 10

    @classmethod
    def from_loaded(cls, loaded: LoadedInventory, strict_host_keys: bool = False) -> SshSettings:
        ssh = loaded.inventory.ssh
        base = Path(loaded.path).parent if getattr(loaded, "path", None) else Path.cwd()
        return cls(
            user=ssh.user,
            key=expand_path(ssh.key, base),
            known_hosts=expand_path(ssh.known_hosts, base),
            strict_host_keys=strict_host_keys or ssh.strict_host_keys,
            connect_timeout_s=ssh.connect_timeout_s,
        )


def expand_path(value: str | None, base: Path) -> str | None:
    """Expand ~ and $VARS; a relative path is relative to the inventory's folder."""
    if not value:
        return None
    p = Path(os.path.expandvars(os.path.expanduser(value)))
    return str(p if p.is_absolute() else (base / p).resolve())


@dataclass
class Target:
    """One pyinfra host: its name (connector prefix included), NodeSpec and connector data."""

    name: str
    spec: NodeSpec
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def node(self) -> str:
        return self.spec.node


def ssh_host_data(spec: NodeSpec, ssh: SshSettings) -> dict[str, Any]:
    """pyinfra SSH connector data for one node."""
    data: dict[str, Any] = {
        "ssh_hostname": spec.address,
        "ssh_port": spec.ssh_port,
        "ssh_user": spec.ssh_user or ssh.user,
        "ssh_strict_host_key_checking": "yes" if ssh.strict_host_keys else "accept-new",
        "ssh_connect_retries": SSH_CONNECT_RETRIES,
        "ssh_connect_retry_min_delay": 0.2,
        "ssh_connect_retry_max_delay": 0.5,
        # paramiko waits 15 s for the SSH banner by default; a port that accepts and never
        # answers must fail within the inventory's connect timeout.
        "ssh_paramiko_connect_kwargs": {
            "banner_timeout": ssh.connect_timeout_s,
            "auth_timeout": ssh.connect_timeout_s,
        },
        # Never look for keys in ~/.ssh or an agent behind the inventory's back.
        "ssh_allow_agent": False,
        "ssh_look_for_keys": False,
    }
    if ssh.key:
        data["ssh_key"] = ssh.key
    # Always one file (pyinfra's default would append to ~/.ssh/known_hosts): the
    # inventory's, or gpuctl's own seeded from the user's (gpuctl.hostkeys, see ssh_targets).
    data["ssh_known_hosts_file"] = host_key_policy(ssh).record
    if spec.ssh_user and spec.ssh_user != "root":
        data["_sudo"] = True
    return data


LOCAL_ADDRESS = "@local"


def host_key_policy(ssh: SshSettings) -> hostkeys.Policy:
    return hostkeys.Policy.for_inventory(ssh.known_hosts, ssh.strict_host_keys)


def ssh_targets(specs: Sequence[NodeSpec], ssh: SshSettings) -> list[Target]:
    """One pyinfra host per node: SSH, or pyinfra's local connector for the node whose
    address is `@local` (the machine gpuctl runs on — the hardware tier). The user's
    known_hosts entries for these nodes are written into the file pyinfra reads, as exact
    lines (`hostkeys.Policy.seed`); a node that file could not describe safely (files that
    disagree, a revoked key, a certificate authority only) stops the run before any
    connection (ExecutionError)."""
    remote = [s for s in specs if s.address != LOCAL_ADDRESS]
    errors = host_key_policy(ssh).seed(hostkeys.host_name(s.address, s.ssh_port) for s in remote)
    if errors:
        raise ExecutionError("host keys refused before connecting:\n" + "\n".join(f"  {e}" for e in errors.values()))
    return [Target(name=LOCAL_ADDRESS, spec=s, data={}) if s.address == LOCAL_ADDRESS
            else Target(name=s.node, spec=s, data=ssh_host_data(s, ssh)) for s in specs]


def build_inventory(targets: Sequence[Target], options: RunOptions, gate: Any = None) -> Any:
    """A pyinfra `Inventory` with one host per target and the gpuctl host data."""
    from pyinfra.api import Inventory

    names: list[tuple[str, dict[str, Any]]] = []
    for t in targets:
        data = dict(t.data)
        data[SPEC_KEY] = t.spec
        data[OPTIONS_KEY] = options
        if gate is not None:
            data[REBOOT_GATE_KEY] = gate
        names.append((t.name, data))
    return Inventory((names, {}))
