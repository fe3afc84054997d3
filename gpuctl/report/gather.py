"""Gather the acceptance report's data from run records; every value is computed here.

Which runs a report covers: `gpuctl report RUN` opens RUN (a run id, a run folder or
`latest`). Its `run.json` names the inventory's sha256 — the exact cluster
configuration. For each stage the report shows (verify, bench, and provision for the
run list) it takes RUN's own stage when RUN has it, else the stage of the newest run
under the same runs root whose inventory has the same sha256. So `gpuctl report latest`
after `provision`, `verify`, `bench` reports all three, and a report never mixes in a
run made with a different inventory. Runs without an inventory hash only report their
own stages.

The cluster summary and the exact matrix come from the bench stage's snapshot
(`inventory`, `matrix`); without one (a verify-only run, an older record) from the inventory
file while it still has the recorded sha256 (`gpuctl.results.snapshot_from_inventory`).

The stages are read through their typed models only (`gpuctl.results`: `VerifyStage` for
`stages/verify.json`, `BenchStage` for `stages/bench.json`); the report imports no workflow
(bench, checks) and resolves no inventory itself. Sections: `verify_section`,
`bench_section`; the bench's `training` (the run across nodes) and the cluster results of
the tests `training_launchers` / `training_multi_node` make the training section
(`training_section`); its `localisation` the fault-finding section (`fault_finding_section`).
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from gpuctl import __version__
from gpuctl.errors import InputError
from gpuctl.report.chart import ThresholdLine, loss_chart, nccl_chart, size_label
from gpuctl.results import (
    BenchResult,
    BenchStage,
    InventoryRecord,
    LocalisationRecord,
    MatrixRecord,
    ThresholdRecord,
    TrainingRecord,
    VerifyStage,
    read_bench,
    read_verify,
    snapshot_from_inventory,
)
from gpuctl.runrecord import RunRecord, now_iso, runs_root

log = logging.getLogger(__name__)

STAGES = ("provision", "verify", "bench")
_RANK = {"fail": 0, "unreachable": 1, "error": 2, "warn": 3, "pass": 4, "no-threshold": 5, "not-applicable": 6,
         "skip": 6}


def worst(statuses: list[str]) -> str:
    """fail > unreachable/error > warn > pass; 'none' when nothing ran."""
    known = [s for s in statuses if s in _RANK]
    if not known:
        return "none"
    w = min(known, key=lambda s: _RANK[s])
    if w == "unreachable":
        return "error"
    return "pass" if w in ("no-threshold", "not-applicable", "skip") else w


# ---------------------------------------------------------------- finding the runs


def _runs(root: Path) -> list[RunRecord]:
    return sorted((RunRecord(p) for p in root.glob("*") if (p / "run.json").is_file()), key=lambda r: r.id)


def _inventory_sha(rec: RunRecord) -> str | None:
    inv = rec.meta().get("inventory") or {}
    return inv.get("sha256")


def find_stages(run: RunRecord, root: Path) -> dict[str, RunRecord]:
    """stage → the run record it is taken from (see the module docstring)."""
    chosen: dict[str, RunRecord] = {}
    own = set(run.stages())
    sha = _inventory_sha(run)
    others = [r for r in reversed(_runs(root)) if r.path != run.path] if sha else []
    for stage in STAGES:
        if stage in own:
            chosen[stage] = run
            continue
        for rec in others:
            if _inventory_sha(rec) == sha and stage in rec.stages():
                chosen[stage] = rec
                break
    return chosen


# ---------------------------------------------------------------- formatting


def fmt_number(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v != 0 and abs(v) < 0.01:
            return f"{v:.3g}"
        return f"{v:,.0f}" if abs(v) >= 10000 else f"{v:,.4g}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10000 else str(v)
    return str(v)


def fmt_value(v: Any, unit: str) -> str:
    text = fmt_number(v)
    return f"{text} {unit}".strip() if text else ""


def fmt_threshold(check: str, value: Any, unit: str, thresholds: dict[str, ThresholdRecord]) -> str:
    """'≥ 460 GB/s (warn below 480)' from the recorded threshold, else the bare limit."""
    t = thresholds.get(check)
    if t is not None and t.not_applicable:
        return "n/a"
    if t is not None and t.min is not None:
        warn = f" (warn below {fmt_number(t.warn_below)})" if t.warn_below is not None else ""
        return f"≥ {fmt_value(t.min, unit)}{warn}"
    if t is not None and t.max is not None:
        warn = f" (warn above {fmt_number(t.warn_above)})" if t.warn_above is not None else ""
        return f"≤ {fmt_value(t.max, unit)}{warn}"
    if value is None:
        return ""
    return f"= {fmt_value(value, unit)}" if not isinstance(value, (int, float)) or isinstance(value, bool) \
        else fmt_value(value, unit)


# ---------------------------------------------------------------- sections


def _text(value: str | None) -> str:
    return "" if value is None else value


def _status(value: Any, default: str = "none") -> str:
    return default if value is None else str(value)


def verify_section(stage: VerifyStage | None, rec: RunRecord | None) -> dict[str, Any]:
    """The per-node check table: one row per node, one column per role."""
    if stage is None or not stage.dump():
        return {"available": False, "run_id": None, "status": "none", "roles": [], "rows": [], "failures": []}
    hosts = stage.hosts
    roles = sorted({c.role or "other" for h in hosts.values() for c in h.checks})
    rows, failures = [], []
    for name in sorted(hosts):
        h = hosts[name]
        cells = []
        for role in roles:
            mine = [c for c in h.checks if (c.role or "other") == role]
            c = Counter(str(x.status) for x in mine)
            total = len(mine) - c.get("skip", 0)
            if not mine:
                cells.append({"role": role, "status": "none", "text": "—"})
            elif c.get("fail"):
                cells.append({"role": role, "status": "fail", "text": f"{c['fail']} of {total} failed"})
            elif c.get("error"):
                cells.append({"role": role, "status": "error", "text": f"{c['error']} of {total} could not run"})
            elif total == 0:
                cells.append({"role": role, "status": "skip", "text": "skipped"})
            else:
                cells.append({"role": role, "status": "pass", "text": f"{c.get('pass', 0)}/{total} pass"})
        counts = h.counts or dict(Counter(str(x.status) for x in h.checks))
        reason = _text(h.unreachable_reason)
        rows.append({"node": name, "status": str(h.status), "cells": cells,
                     "passed": counts.get("pass", 0), "failed": counts.get("fail", 0),
                     "could_not_run": counts.get("error", 0), "skipped": counts.get("skip", 0),
                     "unreachable_reason": reason})
        if reason:
            failures.append({"source": "verify", "node": name, "check": "ssh", "status": "error",
                             "message": reason, "expected": "", "found": "",
                             "remediation": "rerun", "emulated": ""})
        for status, briefs in (("fail", h.failed), ("error", h.could_not_run)):
            for f in briefs:
                failures.append({"source": "verify", "node": name, "check": f.check, "status": status,
                                 "message": f.message, "expected": f.expected, "found": f.found,
                                 "remediation": f.remediation, "emulated": ""})
    return {"available": True, "run_id": rec.id if rec else None, "status": _status(stage.status),
            "roles": roles, "rows": rows, "failures": failures}


def _bench_row(r: BenchResult, thresholds: dict[str, ThresholdRecord]) -> dict[str, Any]:
    value, unit = r.value, _text(r.unit)
    return {
        "subject": r.subject, "test": _text(r.test), "check": r.check,
        "node": r.host or "cluster",
        "status": "skipped" if r.skipped else str(r.status),
        "value": fmt_value(value, unit),
        "number": float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None,
        "unit": unit,
        "threshold": fmt_threshold(r.check, r.threshold, unit, thresholds),
        "source": _text(r.source), "remediation": _text(r.remediation),
        "message": _text(r.message), "raw": r.raw or "",
        "emulated": r.emulated or "",
    }


def _worst_row(rows: list[dict[str, Any]], thresholds: dict[str, ThresholdRecord]) -> dict[str, Any]:
    """The row with the worst status; among equals the furthest from passing (the lowest value
    under a minimum, the highest under a maximum)."""
    rank = min(_RANK.get(r["status"], len(_RANK)) for r in rows)
    tied = [r for r in rows if _RANK.get(r["status"], len(_RANK)) == rank]
    numeric = [r for r in tied if r["number"] is not None]
    t = thresholds.get(rows[0]["check"])
    if numeric and t is not None and t.max is not None:
        return max(numeric, key=lambda r: r["number"])
    if numeric:
        return min(numeric, key=lambda r: r["number"])
    return tied[0]


def _summary_status(statuses: list[str]) -> str:
    """The worst judged status (fail > error > warn > pass); when nothing was judged, what the
    rows say instead (no-threshold, not-applicable, skipped): nothing validated is never a pass."""
    judged = [s for s in statuses if s in ("fail", "error", "unreachable", "warn", "pass")]
    if judged:
        return worst(judged)
    for s in ("no-threshold", "skipped", "not-applicable", "skip"):
        if s in statuses:
            return s
    return "none"


def check_summary(rows: list[dict[str, Any]], thresholds: dict[str, ThresholdRecord]) -> list[dict[str, Any]]:
    """One line per (test, check) across its subjects: worst status, worst subject, min /
    median / max of the figures, how many subjects and how many of them are emulated."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["test"], r["check"]), []).append(r)
    out = []
    for (test, check), group in groups.items():
        numbers = sorted(r["number"] for r in group if r["number"] is not None)
        unit = group[0]["unit"]
        worst_row = _worst_row(group, thresholds)
        stats = ({"min": numbers[0], "median": statistics.median(numbers), "max": numbers[-1]} if numbers
                 else {"min": None, "median": None, "max": None})
        out.append({
            "test": test, "check": check, "status": _summary_status([r["status"] for r in group]),
            "worst_subject": worst_row["subject"], "worst_value": worst_row["value"], "subjects": len(group),
            **stats,
            **{f"{k}_text": fmt_value(v, unit) for k, v in stats.items()},
            "unit": unit, "threshold": "; ".join(dict.fromkeys(r["threshold"] for r in group if r["threshold"])),
            "emulated": sum(1 for r in group if r["emulated"]),
        })
    return out


def bench_section(stage: BenchStage | None, rec: RunRecord | None) -> dict[str, Any]:
    if stage is None or not stage.dump():
        return {"available": False, "run_id": None, "suite": "", "status": "none", "nodes": [], "results": [],
                "cluster_results": [], "failures": [], "series": [], "summary": [], "details": []}
    thresholds = stage.thresholds
    nodes, results, failures = [], [], []
    for name in sorted(stage.hosts):
        nodes.append({"node": name, "status": _status(stage.hosts[name].status)})
        # each node's rows against its own thresholds (records before issue 18: the first node's)
        results += [_bench_row(r, stage.thresholds_of(name)) for r in stage.hosts[name].results]
    cluster = [_bench_row(r, thresholds) for r in stage.cluster.results]
    for r in results + cluster:
        if r["status"] in ("fail", "error", "warn", "skipped"):
            failures.append({"source": "bench", "node": r["subject"], "check": r["check"], "status": r["status"],
                             "message": r["message"], "expected": r["threshold"], "found": r["value"],
                             "remediation": r["remediation"], "emulated": r["emulated"]})
    # the series as recorded (its fields passed through), with the text the tables show
    series = [{**s.dump(), "emulated": s.emulated or "",
               "points_text": "; ".join(f"{size_label(p[0])} → {fmt_number(float(p[1]))}"
                                        for p in s.points if p[0] > 0)}
              for s in stage.nccl_series]
    # the per-subject rows, by node (then the cluster's pairs and multi-node run), for <details>
    details = [{"node": n["node"], "status": n["status"], "rows": [r for r in results if r["node"] == n["node"]]}
               for n in nodes]
    if cluster:
        details.append({"node": "cluster", "status": _status(stage.cluster.status), "rows": cluster})
    for d in details:
        d["emulated"] = sum(1 for r in d["rows"] if r["emulated"])
    return {"available": True, "run_id": rec.id if rec else stage.run_id, "suite": stage.suite,
            "status": _status(stage.status), "nodes": nodes, "results": results, "cluster_results": cluster,
            "failures": failures, "series": series, "summary": check_summary(results + cluster, thresholds),
            "details": details}


TRAINING_TESTS = ("training_launchers", "training_multi_node")


NOT_JUDGED = "reported, not judged"


def _verdict(rows: list[dict[str, Any]], *checks: str) -> dict[str, Any] | None:
    """The first row of the first of `checks` that is there: status, figure, threshold, source,
    and `detail` (its message without the subject's label in front); `note` says why a figure
    was not judged."""
    for check in checks:
        for r in rows:
            if r["check"] == check:
                judged = r["status"] in ("pass", "warn", "fail")
                detail = r["message"].removeprefix(f"{r['subject']}: ")
                reason = r["source"].removesuffix(f"; {NOT_JUDGED}")
                # a figure the bench did not judge (gloo on CPU): say so and why; no figure: what it said
                figure = r["status"] == "not-applicable" and r["number"] is not None and reason
                note = "" if judged else (f"{NOT_JUDGED}: {reason}" if figure else detail)
                return {"check": r["check"], "status": r["status"], "value": r["value"], "number": r["number"],
                        "unit": r["unit"], "threshold": r["threshold"], "source": r["source"],
                        "message": r["message"], "detail": detail, "note": note, "emulated": r["emulated"],
                        "judged": judged}
    return None


def training_section(stage: BenchStage | None) -> dict[str, Any]:
    """The training run across nodes: bench.json's `training` (loss per step, ranks, tokens/s,
    versions) beside the verdicts the bench made on it (loss falls, ranks agree, tokens/s per
    GPU, scaling efficiency, MFU, each launcher). Nothing is judged here: statuses, thresholds
    and sources are the bench's."""
    stage = stage or BenchStage()
    t: TrainingRecord = stage.training
    rows = [_bench_row(r, stage.thresholds) for r in stage.cluster.results if r.test in TRAINING_TESTS]
    if not t.started and not rows:
        return {"available": False}
    nodes = list(t.nodes)
    loss = [[p[0], p[1]] for p in t.loss or []]
    emulated = next((r["emulated"] for r in rows if r["emulated"]), "")
    series = []
    if loss:
        series.append({"label": f"{len(nodes)} nodes (torchrun)", "points": loss, "emulated": emulated})
    series += [{"label": f"{node} alone", "points": [[p[0], p[1]] for p in pts], "emulated": emulated}
               for node, pts in t.single_node_loss.items() if pts]
    for s in series:
        pts = s["points"]
        s["text"] = (f"{fmt_number(float(pts[0][1]))} → {fmt_number(float(pts[-1][1]))} over {len(pts)} steps"
                     if pts else "")
    per_rank = _verdict(rows, "train_tokens_per_s_per_gpu")
    per_node = [{"node": node, "python": v.python, "torch": v.torch, "cuda": v.cuda, "nccl": v.nccl, "gpus": v.gpus}
                for node, v in t.versions.items()]
    distinct = {(v["torch"], v["cuda"], v["nccl"]) for v in per_node}
    ran = t.ran if t.ran is not None and t.ran.dump() else None
    return {
        "available": True,
        "status": _summary_status([r["status"] for r in rows]),
        "subject": f"{len(nodes)} nodes" if nodes else "",
        "nodes": nodes, "head": t.head, "endpoint": t.endpoint,
        "rank0_node": t.rank0_node, "backend": _text(t.backend), "model": _text(t.model),
        "world_size": t.world_size,
        "finished": "loss" in t.model_fields_set,
        "series": series,
        "loss": _verdict(rows, "train_loss_falls"),
        "ranks_agree": _verdict(rows, "train_ranks_agree"),
        "ranks": [{"rank": r.rank, "node": _text(r.node), "host": _text(r.host), "checksum": _text(r.checksum),
                   "differs": r.differs} for r in t.ranks],
        "tokens_per_s": fmt_value(t.tokens_per_s, "tokens/s"),
        "tokens_per_s_per_gpu": fmt_value(t.tokens_per_s_per_rank, per_rank["unit"] if per_rank else
                                          "tokens/s per rank"),
        "single_node": [{"node": n, "tokens_per_s": fmt_value(v, "tokens/s")}
                        for n, v in t.single_node_tokens_per_s.items()],
        "scaling": _verdict(rows, "train_scaling_efficiency"),
        "mfu": _verdict(rows, "train_mfu_fraction", "train_tflops"),
        "launchers": [{"node": r["subject"], "status": r["status"], "message": r["message"]}
                      for r in rows if r["check"] == "train_launcher"],
        "problems": [{"status": r["status"], "message": r["message"]} for r in rows if r["check"] == "training"],
        "ran": {"torch": ran.torch or "", "cuda": ran.cuda or "none", "nccl": ran.nccl or "none"} if ran else None,
        "versions": per_node,
        "versions_differ": len(distinct) > 1,
        "emulated": emulated,
    }


def fault_finding_section(stage: BenchStage | None) -> dict[str, Any]:
    """The fault finding (bench.json's `localisation`, gpuctl.bench.localise): why it started,
    the suspects named (node, HCA and interface, or the link), each with its evidence chain
    (the figures, each beside what it was judged against), what it could not tell apart, and
    the rounds used against the bound. Nothing is judged here."""
    loc: LocalisationRecord = (stage or BenchStage()).localisation
    if not loc.ran:
        return {"available": False}
    steps = [{"text": _text(s.text), "slow": s.slow, "raw": _text(s.raw)} for s in loc.steps]

    def chain(idx: list[int]) -> list[dict[str, Any]]:
        return [steps[i] for i in idx if 0 <= i < len(steps)]

    findings = [{"kind": f.kind, "nodes": ", ".join(f.nodes), "message": f.message,
                 "hcas": ", ".join(f"{h} ({i})" for h, i in zip(f.hcas, f.interfaces, strict=False)),
                 "named": f.kind in ("node", "link"), "evidence": chain(f.evidence)}
                for f in loc.findings]
    return {
        "available": True,
        "trigger": _text(loc.trigger),
        "nodes": len(loc.nodes),
        "rounds": loc.rounds,
        "bound": loc.bound,
        "within_bound": loc.rounds is not None and loc.bound is not None and loc.rounds <= loc.bound,
        "measurements": len(steps),
        "suspects": [f for f in findings if f["named"]],
        "others": [f for f in findings if not f["named"]],
        "limits": list(loc.limits),
        "slow_fraction": f"{loc.slow_fraction:.0%}" if loc.slow_fraction is not None else "?",
        "slow_fraction_source": _text(loc.slow_fraction_source),
        "steps": [dict(s) for s in steps],
    }


def emulated_summary(bench: dict[str, Any]) -> dict[str, Any] | None:
    """How many bench figures came from lab stand-ins or emulated devices, and why (None: none)."""
    rows = bench["results"] + bench["cluster_results"]
    marked = [r for r in rows if r["emulated"]]
    if not marked and not any(s["emulated"] for s in bench["series"]):
        return None
    return {"count": len(marked), "total": len(rows),
            "reasons": sorted({r["emulated"] for r in marked} | {s["emulated"] for s in bench["series"]} - {""})}


def _chart(bench: dict[str, Any], thresholds: dict[str, ThresholdRecord]) -> str:
    t = thresholds.get("all_reduce_busbw_gb_s")
    single = [s for s in bench["series"] if "all_reduce" in (s.get("test") or "")]
    line = None
    if t is not None and t.min is not None and single:
        line = ThresholdLine(float(t.min), f"single-node floor {fmt_number(float(t.min))} GB/s")
    return nccl_chart(bench["series"], line)


def build_report(ref: str = "latest", root: Path | None = None, now: str | None = None) -> dict[str, Any]:
    """All the report's data for run `ref` (see the module docstring)."""
    root = root or runs_root()
    run = RunRecord.open(ref, root)
    meta = run.meta()
    chosen = find_stages(run, root)
    if "verify" not in chosen and "bench" not in chosen:
        raise InputError(f"run {run.id} has no verify or bench results, and no run of the same inventory has: "
                         "run `gpuctl verify` or `gpuctl bench` first")
    verify_stage = read_verify(chosen["verify"]) if "verify" in chosen else None
    bench_stage = read_bench(chosen["bench"]) if "bench" in chosen else None
    inventory = bench_stage.inventory if bench_stage is not None else None
    matrix = bench_stage.matrix if bench_stage is not None else None
    if inventory is None or matrix is None:
        snapshot = snapshot_from_inventory(meta.get("inventory") or {})
        inventory, matrix = snapshot if snapshot else (InventoryRecord(), MatrixRecord())
    verify = verify_section(verify_stage, chosen.get("verify"))
    bench = bench_section(bench_stage, chosen.get("bench"))
    training = training_section(bench_stage)
    fault_finding = fault_finding_section(bench_stage)
    thresholds = bench_stage.thresholds if bench_stage is not None else {}
    nodes = sorted(set(inventory.nodes) | {r["node"] for r in verify["rows"]}
                   | {n["node"] for n in bench["nodes"]})
    runs = []
    for stage, rec in sorted(chosen.items(), key=lambda kv: STAGES.index(kv[0])):
        m = rec.meta()
        runs.append({"stage": stage, "run_id": rec.id, "command": m.get("command", ""),
                     "started": m.get("started", ""), "finished": m.get("finished", ""),
                     "status": m.get("status", ""), "gpuctl_version": m.get("gpuctl_version", "")})
    failures = verify["failures"] + bench["failures"]
    status = worst([s for s in (verify["status"], bench["status"]) if s != "none"])
    cluster_name = inventory.cluster or "unknown cluster"
    emulated = emulated_summary(bench)
    kind = "Lab report (emulated figures, not an acceptance)" if emulated else "Acceptance report"
    return {
        "title": f"{kind} — {cluster_name}",
        "status": status,
        "emulated": emulated,
        "cluster": {
            "name": cluster_name, "sku": inventory.sku, "gpu_model": inventory.gpu_model,
            "gpus_per_node": inventory.gpus_per_node, "os": inventory.os,
            "matrix": inventory.matrix if "matrix" in inventory.model_fields_set else matrix.name,
            "node_count": len(nodes), "nodes": nodes,
        },
        "matrix": {
            "name": matrix.name,
            "driver": matrix.driver.dump(),
            # each component as recorded (its fields passed through), with its pins as one text
            "components": [{**c.dump(), "packages_text": ", ".join(p.pin for p in c.packages)}
                           for c in matrix.components],
        },
        "verify": verify,
        "bench": bench,
        "chart_svg": _chart(bench, thresholds),
        "training": training,
        "training_chart_svg": loss_chart(training["series"]) if training["available"] else "",
        "fault_finding": fault_finding,
        "failures": failures,
        "remediation_counts": dict(sorted(Counter(f["remediation"] for f in failures if f["remediation"]).items())),
        "meta": {
            "gpuctl_version": __version__,
            "generated": now or now_iso(),
            "report_run": run.id,
            "inventory_path": (meta.get("inventory") or {}).get("path", inventory.path),
            "inventory_sha256": (meta.get("inventory") or {}).get("sha256", inventory.sha256),
            "runs": runs,
        },
    }
