"""Turning one benchmark's raw output into verdicts (no parsing here).

`judge_output(kind, text, sku, subject)` parses and judges `text` through the one registry
of tool kinds (`gpuctl.kinds.judge_text`, the path `gpuctl analyze` takes too); unusable
output (a ParseError) becomes a "could not run" verdict quoting the parser's reason, never
a pass. `result_dict` is the one shape every result has in `stages/bench.json` and in
`gpuctl bench --json` (its typed model: `gpuctl.results.BenchResult`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuctl import kinds
from gpuctl.catalog import Sku
from gpuctl.errors import ParseError
from gpuctl.parsers.nccl import NcclResult
from gpuctl.parsers.training import TrainingResult
from gpuctl.remediation import Remediation
from gpuctl.spec import NodeSpec
from gpuctl.verdicts import Status, Subject, Verdict, could_not_run


def effective_sku(sku: Sku, spec: NodeSpec) -> Sku:
    """The SKU with the node's effective thresholds (SKU + inventory overrides)."""
    return sku.model_copy(update={"thresholds": dict(spec.thresholds)})


@dataclass(frozen=True)
class Judged:
    verdicts: list[Verdict]
    parsed: Any = None
    skipped: str | None = None
    emulated: str | None = None  # why the figures are not real hardware's (gpuctl.provenance)


def judge_output(kind: str, text: str, sku: Sku | None, subject: Subject, exit_status: int = 0,
                 stderr: str = "") -> Judged:
    """Parse and judge one tool output; a ParseError becomes a could-not-run verdict. The
    figures of an output from a lab stand-in or an emulated device carry why (`emulated`)."""
    k = kinds.get(kind)
    try:
        judged = kinds.judge_text(kind, text, sku, subject, stderr)
    except ParseError as exc:
        reason = str(exc)
        if exit_status == 127 or "command not found" in stderr:
            reason = f"tool not installed ({_last_line(stderr) or 'exit 127'})"
        elif exit_status != 0:
            reason = f"exit {exit_status}: {_last_line(stderr) or reason}"
        return Judged([could_not_run(k.check, reason, subject, Remediation.RERUN)])
    # judged as another kind (`ToolKind.also_reads`): no result of this kind to chart
    parsed = judged.parsed if judged.kind == kind else None
    skipped = parsed.skipped if isinstance(parsed, TrainingResult) else None
    return Judged(list(judged.verdicts), parsed, skipped, judged.emulated)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def not_applicable(check: str, reason: str, subject: Subject) -> Verdict:
    return Verdict(check, Status.NOT_APPLICABLE, subject, None, None, "", reason, Remediation.NONE,
                   f"{subject.label()}: {check} not applicable: {reason}")


def result_dict(v: Verdict, test: str, host: str | None, raw: str | None, skipped: str | None = None,
                emulated: str | None = None) -> dict[str, Any]:
    """One judged result: the verdict's fields plus the test, the host, the raw output path and
    `emulated` (why the figure is not real hardware's, None when nothing says so)."""
    d = v.as_dict()
    d.update(test=test, host=host, raw=raw, emulated=emulated)
    if skipped is not None:
        d["skipped"] = skipped
        d["message"] = f"{v.subject.label()}: skipped: {skipped}"
    return d


def nccl_series(result: NcclResult, label: str, test: str, emulated: str | None = None) -> dict[str, Any]:
    """Bus bandwidth against message size, for the report's chart."""
    return {"label": label, "test": result.test or test, "gpus": result.gpus, "emulated": emulated,
            "points": [[r.size_bytes, round(r.busbw_gb_s, 3)] for r in sorted(result.rows, key=lambda r: r.size_bytes)]}
