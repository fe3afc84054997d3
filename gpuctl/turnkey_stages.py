"""The real implementations of the turnkey stages, wired to the stage APIs.

Kept apart from `gpuctl.turnkey` (the resumable orchestration) so the orchestration is
tested with stand-in stage functions and the stages are the product's own commands:
preflight (`gpuctl.preflight`), provision (`gpuctl.runner.run.execute`, its run nested
under the turnkey run), verify (`gpuctl.checks.runner.run_verify`), bench (`gpuctl.bench.run`,
acceptance suite), handover (the `handover` role, then lock file and delivery bundle).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rich.console import Console

from gpuctl.bench import suites
from gpuctl.bundle import make_bundle
from gpuctl.handover import handover
from gpuctl.lock.locking import lock
from gpuctl.preflight import run_preflight
from gpuctl.runner.bootstrap import ensure_patched
from gpuctl.turnkey import STAGES, StageFn, StageOutcome, TurnkeyContext
from gpuctl.verdicts import Status

log = logging.getLogger(__name__)


def _first(items: list[str], n: int = 4) -> str:
    more = f" (+{len(items) - n} more)" if len(items) > n else ""
    return "; ".join(items[:n]) + more


def preflight_stage(ctx: TurnkeyContext) -> StageOutcome:
    result = run_preflight(ctx.loaded, ctx.specs, ctx.record)
    problems = [v.message for vs in result.verdicts.values() for v in vs if v.status.value in ("fail", "error")]
    if result.failed:
        return StageOutcome("fail", f"hardware found ≠ hardware ordered: {_first(problems)}")
    return StageOutcome("pass", f"{len(result.verdicts)} node(s) match the order")


def _provision(ctx: TurnkeyContext, verify: bool = False) -> tuple[int, dict[str, Any]]:
    ensure_patched()
    from gpuctl.runner.run import RunRequest, execute

    req = RunRequest(
        inventory=ctx.loaded.path, limit=tuple(s.node for s in ctx.specs),
        allow_wipe=bool(ctx.options.get("allow_wipe")), max_unavailable=ctx.options.get("max_unavailable"),
        strict_host_keys=bool(ctx.options.get("strict_host_keys")), as_json=True, verify=verify,
    )
    console = ctx.options.get("console") or Console(quiet=True)
    summary = execute(req, dry=False, console=console, confirm=None, record_root=ctx.record.path / "runs")
    return int(summary.exit_code()), summary.to_json()


def provision_stage(ctx: TurnkeyContext) -> StageOutcome:
    code, data = _provision(ctx)
    hosts = data.get("hosts", {})
    bad = [f"{n}: {h.get('error') or h.get('status')}" for n, h in hosts.items() if h.get("status") != "ok"]
    if code != 0:
        return StageOutcome("fail", f"provisioning failed on {len(bad)} node(s): {_first(bad)}", data)
    changed = sum(int(h.get("changed", 0)) for h in hosts.values())
    return StageOutcome("pass", f"{len(hosts)} node(s) provisioned, {changed} operation(s) changed", data)


def verify_stage(ctx: TurnkeyContext) -> StageOutcome:
    from gpuctl.checks.runner import run_verify

    result = run_verify(ctx.loaded, ctx.specs, ctx.record)
    failed = [f"{c.host}: {c.message or c.check}" for c in result.all_checks
              if c.status.value in ("fail", "error")]
    if result.status.value != "pass":
        return StageOutcome("fail", f"verification {result.status.value}: {_first(failed)}")
    return StageOutcome("pass", f"{len(result.all_checks)} check(s) passed on {len(result.hosts)} node(s)")


def bench_stage(ctx: TurnkeyContext) -> StageOutcome:
    from gpuctl.bench.run import run_bench

    suite = suites.SUITES[str(ctx.options.get("suite", "acceptance"))]
    result = run_bench(ctx.loaded, ctx.specs, suite, ctx.record)  # the typed result
    status = "fail" if result.status is None else result.status.value
    failed = [f"{r.host or 'cluster'}: {r.message}" for b in [*result.hosts.values(), result.cluster]
              for r in b.results if r.status in (Status.FAIL, Status.ERROR)]
    if status in ("fail", "error"):
        return StageOutcome("fail", f"benchmarks {status}: {_first(failed)}")
    return StageOutcome("pass", f"{suite.name} suite {status}")


def handover_stage(ctx: TurnkeyContext) -> StageOutcome:
    """Lock what is installed, hand the nodes over (customer accounts, sudo, provider key
    removal last — after it, root SSH with the provider key may be gone), then build the
    delivery bundle locally."""

    limit = tuple(s.node for s in ctx.specs)
    locked = lock(ctx.loaded, limit, ctx.record)
    outcome = handover(ctx.loaded, limit, ctx.record)
    if not outcome.ok:
        bad = [f"{n}: {h.get('error') or h.get('status')}" for n, h in outcome.run.get("hosts", {}).items()
               if h.get("status") != "ok"]
        return StageOutcome("fail", f"handover failed: {_first(bad) or outcome.run.get('status')}",
                            outcome.as_dict())
    out = ctx.record.path / f"{ctx.loaded.inventory.cluster.name}-delivery.tar.gz"
    bundle = make_bundle([ctx.record], out, lock_file=locked.path, cluster=ctx.loaded.inventory.cluster.name)
    ctx.record.update_meta(bundle=str(bundle.path))
    return StageOutcome("pass", f"lock {locked.path}; bundle {bundle.path} ({len(bundle.files)} files, "
                                f"report {bundle.report})",
                        {"bundle": str(bundle.path), "lock": str(locked.path)})


def default_stages() -> dict[str, StageFn]:
    fns: dict[str, Callable[[TurnkeyContext], StageOutcome]] = {
        "preflight": preflight_stage, "provision": provision_stage, "verify": verify_stage,
        "bench": bench_stage, "handover": handover_stage,
    }
    assert set(fns) == set(STAGES)
    return fns
