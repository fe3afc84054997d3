"""Running one deploy over given NodeSpecs through the runner's engine (delivery commands).

`gpuctl provision` runs the roles of ROLE_ORDER on NodeSpecs resolved from the
inventory. The delivery commands need two things it does not offer: a role outside
ROLE_ORDER (`roles/handover`, `roles/package_mirror`), and provisioning with NodeSpecs
transformed after resolution (`gpuctl rebuild`: package pins from the lock). Both go
through the same `gpuctl.runner.engine.Engine` (same SSH settings, host data, per-host
failure handling); this module only loads the deploy and records the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuctl.components import delivery_roles
from gpuctl.deploy_context import RunOptions
from gpuctl.errors import InputError
from gpuctl.inventory import LoadedInventory
from gpuctl.runner.bootstrap import ensure_patched, raise_nofile_limit
from gpuctl.runner.logroute import engine_logs_to
from gpuctl.runner.roles import load_role
from gpuctl.runrecord import RunRecord, redact
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)


def load_delivery_role(name: str, base: Path | None = None) -> ModuleType:
    """Load `roles/<name>/install.py` for a role outside ROLE_ORDER (handover, mirror: the
    components declared `delivery=True`)."""
    return load_role(name, base, known=delivery_roles())


@dataclass
class DeployRun:
    """Per node: status (ok | failed | unreachable), error, operations that changed/failed."""

    command: str
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    run_id: str | None = None

    @property
    def failed(self) -> list[str]:
        return [n for n, h in self.hosts.items() if h["status"] != "ok"]

    @property
    def ok(self) -> bool:
        return bool(self.hosts) and not self.failed

    def as_dict(self) -> dict[str, Any]:
        return {"command": self.command, "status": "ok" if self.ok else "failed", "run": self.run_id,
                "seconds": round(self.seconds, 2), "hosts": self.hosts}


def run_deploy(loaded: LoadedInventory, specs: Sequence[NodeSpec], deploy: Callable[..., Any], *,
               command: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None,
               record: RunRecord | None = None, options: RunOptions | None = None,
               compose: bool = False, strict_host_keys: bool = False) -> DeployRun:
    """Connect → prepare → execute `deploy(*args, **kwargs)` on the nodes of `specs`.

    `compose=True` passes `on_role=engine.mark_role` (deploy/provision.py's `provision`).
    Writes `stages/<command>.json` and `raw/<node>/<command>-commands.log` into `record`,
    pyinfra's and paramiko's logs to its `pyinfra.log` (never the terminal)."""

    ensure_patched()
    from gpuctl.runner.engine import Engine
    from gpuctl.runner.inventory import SshSettings, ssh_targets

    specs = list(specs)
    if not specs:
        raise InputError(f"{command}: no node selected")
    raise_nofile_limit(len(specs))
    targets = ssh_targets(specs, SshSettings.from_loaded(loaded, strict_host_keys=strict_host_keys))
    opts = options or RunOptions(lab=loaded.inventory.lab is not None)
    engine = Engine(targets, opts, connect_timeout_s=loaded.inventory.ssh.connect_timeout_s)
    kw = dict(kwargs or {})
    if compose:
        kw.setdefault("on_role", engine.mark_role)
    started = time.monotonic()
    with engine_logs_to(record.path / "pyinfra.log" if record is not None else None):
        try:
            engine.connect()
            if engine.connected():
                engine.prepare(deploy, *args, **kw)
                engine.execute()
        finally:
            engine.disconnect()
    out = DeployRun(command, seconds=time.monotonic() - started, run_id=record.id if record else None)
    for node, res in engine.results().items():
        out.hosts[node] = {
            "status": res.status, "error": redact(res.error),
            "changed": [o.name for o in res.ops if o.status == "changed"],
            "failed": [o.name for o in res.ops if o.status == "failed"],
            "operations": len(res.ops),
        }
    if record is not None:
        for node, recs in engine.commands.items():
            lines = []
            for r in recs:
                lines.append(f"$ [{r.stage}{' · ' + r.op if r.op else ''}] {r.command}")
                lines.append(f"  exit={'0' if r.success else 'error'} time={r.seconds:.2f}s")
                lines.extend(f"  stdout: {x}" for x in r.stdout)
                lines.extend(f"  stderr: {x}" for x in r.stderr)
            if lines:
                record.raw(node, f"{command}-commands.log", "\n".join(lines) + "\n")
        record.stage(command, out.as_dict())
    return out
