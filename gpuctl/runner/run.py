"""`plan` and `provision`: validate, connect, prepare, (confirm, execute,) summarize, record.

Call `gpuctl.runner.bootstrap.ensure_patched()` before importing this module (the CLI
does), so pyinfra runs hosts in parallel.

Nothing is touched before the inventory and its matrix rules validate (`spec.resolve`)
and the role selection is consistent. Every run writes a run record:
  run.json, pyinfra.log (pyinfra's own log), raw/<host>/commands.log (every remote
  command with its output), stages/plan.json or stages/provision.json (per host: status,
  error, op counts, every operation with its status, rebooted, time).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console

from gpuctl.deploy_context import RunOptions
from gpuctl.errors import InputError
from gpuctl.inventory import LoadedInventory, load_inventory
from gpuctl.paths import deploy_dir
from gpuctl.runner.bootstrap import raise_nofile_limit
from gpuctl.runner.engine import Engine, HostResult
from gpuctl.runner.inventory import SshSettings, Target, ssh_targets
from gpuctl.runner.logroute import engine_logs_to
from gpuctl.runner.progress import ProgressCallback, make_display
from gpuctl.runner.reboot import RebootGate, default_max_unavailable
from gpuctl.runner.roles import RoleChoice, select_roles
from gpuctl.runner.summary import RunSummary
from gpuctl.runrecord import RunRecord
from gpuctl.spec import NodeSpec, resolve

log = logging.getLogger(__name__)


@dataclass
class RunRequest:
    """Everything `plan` / `provision` were asked to do."""

    inventory: Path
    limit: Sequence[str] = ()
    only: Sequence[str] = ()
    skip: Sequence[str] = ()
    parallel: int = 0
    max_unavailable: int | None = None
    allow_wipe: bool = False
    strict_host_keys: bool = False
    reboot_timeout_s: int = 600
    as_json: bool = False
    verify: bool = True
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class Prepared:
    loaded: LoadedInventory
    specs: list[NodeSpec]
    roles: list[RoleChoice]
    options: RunOptions
    targets: list[Target]


def load_provision_deploy() -> ModuleType:
    """deploy/provision.py, loaded by path (checkout or wheel)."""
    import importlib.util
    import sys

    path = deploy_dir() / "provision.py"
    name = "gpuctl_deploy.provision"
    mod = sys.modules.get(name)
    if mod is not None and getattr(mod, "__file__", None) == str(path):
        return mod
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path}: cannot load the provision deploy")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def validate(req: RunRequest, dry: bool = False) -> Prepared:
    """Inventory + matrix rules + role selection; raises InputError, touches no host.

    A role whose install.py does not exist fails provision (InputError: skip it
    explicitly) but is only reported as skipped by plan (dry)."""
    if req.parallel < 0:
        raise InputError("--parallel must be 0 (automatic) or more")
    if req.max_unavailable is not None and req.max_unavailable < 1:
        raise InputError("--max-unavailable must be at least 1")
    loaded = load_inventory(req.inventory)
    specs = resolve(loaded, tuple(req.limit))
    if not specs:
        raise InputError(f"--limit {' '.join(req.limit)} selects no node of {req.inventory}")
    roles = select_roles(specs, req.only, req.skip, require_available=not dry)
    options = RunOptions(
        allow_wipe=req.allow_wipe,
        max_unavailable=req.max_unavailable or default_max_unavailable(len(specs)),
        reboot_timeout_s=req.reboot_timeout_s,
        lab=loaded.inventory.lab is not None,
        extra=dict(req.extra),
    )
    ssh = SshSettings.from_loaded(loaded, strict_host_keys=req.strict_host_keys)
    return Prepared(loaded, specs, roles, options, ssh_targets(specs, ssh))


def _write_commands(record: RunRecord, engine: Engine) -> None:
    for node, recs in engine.commands.items():
        if not recs:
            continue
        lines: list[str] = []
        for r in recs:
            lines.append(f"$ [{r.stage}{' · ' + r.op if r.op else ''}] {r.command}")
            lines.append(f"  exit={'0' if r.success else 'error'} time={r.seconds:.2f}s")
            lines.extend(f"  stdout: {x}" for x in r.stdout)
            lines.extend(f"  stderr: {x}" for x in r.stderr)
        record.raw(node, "commands.log", "\n".join(lines) + "\n")


def _stage_json(summary: RunSummary, results: dict[str, HostResult], engine: Engine) -> dict[str, Any]:
    data = summary.to_json()
    for node, res in results.items():
        data["hosts"][node]["operations_detail"] = [
            {"operation": o.name, "role": o.role, "status": o.status, "commands": o.commands,
             "stdout": o.stdout, "stderr": o.stderr}
            for o in res.ops
        ]
    gate = engine.gate
    data["reboots"] = {
        "max_unavailable": gate.max_unavailable,
        "peak_down": gate.peak_down,
        "hosts": {h: {"ok": r.ok, "seconds": r.seconds, "error": r.error} for h, r in gate.records.items()},
    }
    return data


def _run_verify(prepared: Prepared, record: RunRecord, req: RunRequest) -> dict[str, Any]:
    """Verification after provisioning, recorded in this run (pytest and testinfra load only here)."""
    from gpuctl.checks.runner import run_verify

    roles = tuple(c.name for c in prepared.roles if c.runs)
    return run_verify(prepared.loaded, prepared.specs, record, tuple(req.limit), req.parallel or None,
                      roles=roles).to_json()


ConfirmFn = Callable[[RunSummary], bool]


def execute(req: RunRequest, *, dry: bool, console: Console, confirm: ConfirmFn | None = None,
            record_root: Path | None = None) -> RunSummary:
    """Run `plan` (dry=True) or `provision`; returns the summary (the caller prints it)."""
    command = "plan" if dry else "provision"
    prepared = validate(req, dry=dry)
    raise_nofile_limit(len(prepared.targets))
    _ensure_known_hosts(prepared.targets)
    record = RunRecord.create(command, prepared.loaded.path, prepared.loaded.matrix.path, root=record_root,
                              cluster=prepared.loaded.inventory.cluster.name, inventory_text=prepared.loaded.text)
    deploy = load_provision_deploy()
    started = time.monotonic()
    display = make_display(console, req.as_json)
    node_of = {t.name: t.node for t in prepared.targets}
    tracker = ProgressCallback(node_of, display)
    gate = RebootGate(prepared.options.max_unavailable)
    engine = Engine(prepared.targets, prepared.options, parallel=req.parallel,
                    connect_timeout_s=prepared.loaded.inventory.ssh.connect_timeout_s, gate=gate,
                    callbacks=[tracker])
    tracker.op_role = engine.op_role
    status = "failed"
    summary: RunSummary | None = None
    with engine_logs_to(record.path / "pyinfra.log"):
        display.start(tracker)
        try:
            tracker.stage(f"connecting to {len(prepared.targets)} host(s)")
            engine.connect()
            for node_name, err in _errors_by_node(engine).items():
                tracker.fail(node_name, err)
            connected = engine.connected()
            if connected:
                tracker.stage(f"gathering facts on {len(connected)} host(s)")
                engine.prepare(deploy.provision, prepared.roles, on_role=engine.mark_role)
                for node_name, err in _errors_by_node(engine).items():
                    tracker.fail(node_name, err)
            host_ops = sum(len(engine.state.ops.get(h, {})) for h in engine.connected())
            tracker.set_total(host_ops, len(engine.state.op_meta))
            go = not dry and bool(engine.connected())
            if go and confirm is not None:
                plan_summary = RunSummary("plan", engine.results(), prepared.roles, dry=True, run_id=record.id)
                display.stop(tracker)
                go = confirm(plan_summary)
                if not go:
                    status = "cancelled"
                display.start(tracker)
            if go:
                tracker.stage(f"running {len(engine.state.op_meta)} operation(s) on {len(engine.connected())} host(s)")
                engine.execute()
                for node_name, err in _errors_by_node(engine).items():
                    tracker.fail(node_name, err)
        finally:
            engine.disconnect()
            tracker.finish()
            _write_commands(record, engine)
    results = engine.results(with_commands=dry)
    summary = RunSummary(command, results, prepared.roles, seconds=time.monotonic() - started,
                         run_id=record.id, dry=dry or status == "cancelled")
    if status == "cancelled":
        summary.extra["cancelled"] = True
    record.stage(command, _stage_json(summary, results, engine))
    if not dry and status != "cancelled" and req.verify and summary.reachable and not summary.failed_hosts:
        summary.verify = _run_verify(prepared, record, req)
    if status != "cancelled":
        status = "ok" if int(summary.exit_code()) == 0 else "failed"
    record.finish(status)
    return summary


def _ensure_known_hosts(targets: Sequence[Target]) -> None:
    """Create the inventory's known_hosts file (empty) so accept-new can record keys in it."""
    for path in {t.data.get("ssh_known_hosts_file") for t in targets} - {None}:
        p = Path(path)
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch(mode=0o600)


def _errors_by_node(engine: Engine) -> dict[str, str]:
    return {engine.node_of[h]: e for h, e in engine.errors.items()}
