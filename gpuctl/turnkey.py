"""Turnkey delivery: preflight → provision → verify → bench → handover, resumable.

One run folder holds the whole delivery (`runs/<id>-turnkey/`): each stage writes its own
`stages/<stage>.json` through the stage APIs, and `stages/turnkey.json` records, per
stage, its status, times and a one-line detail. On a failure the flow stops and says how
to resume; `--resume RUN` reuses that folder and skips the stages that already passed —
unless the inventory or the matrix changed since (their sha256 are in `run.json`), in
which case every stage runs again and the reason is recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl.errors import InputError
from gpuctl.inventory import LoadedInventory, load_inventory
from gpuctl.runrecord import RunRecord, inventory_sha256, now_iso, sha256_file
from gpuctl.spec import NodeSpec, resolve

log = logging.getLogger(__name__)

STAGES: tuple[str, ...] = ("preflight", "provision", "verify", "bench", "handover")


@dataclass
class StageOutcome:
    """What one stage reported: `status` is pass, fail or skipped (already passed)."""

    status: str
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class TurnkeyContext:
    loaded: LoadedInventory
    specs: list[NodeSpec]
    record: RunRecord
    options: dict[str, Any]


StageFn = Callable[[TurnkeyContext], StageOutcome]


@dataclass
class TurnkeyResult:
    record: RunRecord
    stages: dict[str, dict[str, Any]]
    failed_stage: str | None

    @property
    def ok(self) -> bool:
        return self.failed_stage is None

    def resume_hint(self, inventory: str | Path) -> str:
        return f"gpuctl turnkey {inventory} --resume {self.record.id}"


def _hashes(loaded: LoadedInventory) -> dict[str, str]:
    return {"inventory": inventory_sha256(loaded), "matrix": sha256_file(loaded.matrix.path)}


def _previous(record: RunRecord, loaded: LoadedInventory) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Stage statuses of a run being resumed, and why they are void (or None)."""
    meta = record.meta()
    if meta.get("command") != "turnkey":
        raise InputError(f"{record.path}: not a turnkey run (command {meta.get('command')!r})")
    before = {"inventory": meta.get("inventory", {}).get("sha256"), "matrix": meta.get("matrix", {}).get("sha256")}
    now = _hashes(loaded)
    changed = [k for k in ("inventory", "matrix") if before[k] != now[k]]
    stages = (record.read_stage("turnkey") or {}).get("stages", {})
    if changed:
        return stages, f"the {' and '.join(changed)} changed since run {record.id}: every stage runs again"
    return stages, None


def run_turnkey(
    inventory: str | Path,
    stage_fns: Mapping[str, StageFn],
    *,
    resume: str | None = None,
    limit: tuple[str, ...] = (),
    options: dict[str, Any] | None = None,
    on_stage: Callable[[str, str], None] | None = None,
    confirm: Callable[[LoadedInventory, list[NodeSpec]], None] | None = None,
) -> TurnkeyResult:
    """Run the stages in order; stop at the first failure. `stage_fns` maps each stage
    name to its implementation (`default_stages()` wires the real ones). `confirm` is
    called once the inventory is valid, before any run folder, lock or node is touched
    (the CLI asks for consent there; it raises or exits to stop)."""
    loaded = load_inventory(inventory)
    specs = resolve(loaded, limit)
    if confirm is not None:
        confirm(loaded, specs)
    missing = [s for s in STAGES if s not in stage_fns]
    if missing:
        raise InputError(f"turnkey: no implementation for stage(s) {', '.join(missing)}")
    previous: dict[str, dict[str, Any]] = {}
    void_reason = None
    if resume:
        record = RunRecord.open(resume)
        record.claim("turnkey", loaded.path, loaded.inventory.cluster.name)  # one run per cluster, resumed or not
        previous, void_reason = _previous(record, loaded)
        record.update_meta(status="running", resumed=now_iso(), inventory={"path": str(loaded.path),
                           "sha256": _hashes(loaded)["inventory"]},
                           matrix={"path": str(loaded.matrix.path), "sha256": _hashes(loaded)["matrix"]})
    else:
        record = RunRecord.create("turnkey", loaded.path, loaded.matrix.path, cluster=loaded.inventory.cluster.name,
                                  inventory_text=loaded.text)
    ctx = TurnkeyContext(loaded, specs, record, dict(options or {}))
    stages: dict[str, dict[str, Any]] = {}
    history = (record.read_stage("turnkey") or {}).get("history", [])
    if void_reason:
        history.append({"at": now_iso(), "note": void_reason})
    failed: str | None = None
    for name in STAGES:
        before = previous.get(name, {})
        if not void_reason and before.get("status") in ("pass", "skipped"):
            stages[name] = {**before, "status": "skipped", "detail": f"passed in an earlier attempt: "
                                                                     f"{before.get('detail', '')}".strip()}
            if on_stage:
                on_stage(name, "skipped")
            continue
        if on_stage:
            on_stage(name, "running")
        started = time.monotonic()
        stamp = now_iso()
        try:
            outcome = stage_fns[name](ctx)
        except Exception as exc:  # a stage that crashes is a failed stage, recorded
            log.exception("turnkey stage %s crashed", name)
            outcome = StageOutcome("fail", f"{type(exc).__name__}: {exc}")
        stages[name] = {"status": outcome.status, "detail": outcome.detail, "started": stamp,
                        "seconds": round(time.monotonic() - started, 1), **({"data": outcome.data}
                                                                            if outcome.data else {})}
        history.append({"at": now_iso(), "stage": name, "status": outcome.status})
        record.stage("turnkey", {"stages": stages, "history": history})
        if on_stage:
            on_stage(name, outcome.status)
        if outcome.status != "pass":
            failed = name
            break
    record.stage("turnkey", {"stages": stages, "history": history})
    record.finish("pass" if failed is None else f"failed at {failed}")
    return TurnkeyResult(record, stages, failed)
