"""Verdicts: a parsed measurement judged against a threshold from the SKU catalog.

`judge()` is the one pure rule for numbers: a missing threshold is never a pass
(``no-threshold``), a SKU that marks a measurement as not applicable gives
``not-applicable`` with the catalog's reason, a measurement that could not be taken
gives ``error`` ("could not run", distinct from ``fail``). `judge_fact()` records a
yes/no finding (GPU model, link state) with the same fields.

The `judge_<tool>(result, sku)` helpers turn a parsed result into verdicts, one per GPU,
pair or port, so each failure names its subject. With `sku=None` they give only the
verdicts that need no SKU (nccl wrong = 0, topo symmetric, ECC health, Xid, ...).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gpuctl.catalog import Measured, Sku, Threshold, outside_workload
from gpuctl.remediation import Remediation


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    NO_THRESHOLD = "no-threshold"
    NOT_APPLICABLE = "not-applicable"
    ERROR = "error"  # the measurement could not be taken ("could not run")


@dataclass(frozen=True)
class Subject:
    """What a verdict is about: a node, a GPU (index + bus id), a GPU pair, a port."""

    node: str | None = None
    gpu: int | None = None
    bus_id: str | None = None
    peer: int | None = None
    port: str | None = None

    def label(self) -> str:
        parts = []
        if self.node:
            parts.append(self.node)
        if self.gpu is not None:
            gpu = f"GPU {self.gpu}" + (f" ({self.bus_id})" if self.bus_id else "")
            parts.append(gpu if self.peer is None else f"GPU {self.gpu} ↔ GPU {self.peer}")
        elif self.bus_id:
            parts.append(self.bus_id)
        if self.port:
            parts.append(self.port)
        return " ".join(parts) if parts else "node"


NODE = Subject()

Value = float | int | str | bool | None


@dataclass(frozen=True)
class Verdict:
    check: str
    status: Status
    subject: Subject
    value: Value
    threshold: Value
    unit: str
    source: str
    remediation: Remediation
    message: str

    def as_dict(self) -> dict[str, object]:
        return {
            "check": self.check,
            "status": self.status.value,
            "subject": self.subject.label(),
            "value": self.value,
            "threshold": self.threshold,
            "unit": self.unit,
            "source": self.source,
            "remediation": self.remediation.value,
            "message": self.message,
        }


def _fmt(value: Value, unit: str) -> str:
    if not isinstance(value, float):
        return f"{value} {unit}".strip()
    text = f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def _non_finite(value: object) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _invalid(name: str, value: float, expected: Value, unit: str, subject: Subject, source: str) -> Verdict:
    """A figure that is not a finite number (inf, nan in the tool's output) is no measurement:
    never a pass, and no non-finite value is kept (JSON has none)."""
    return Verdict(name, Status.ERROR, subject, None, expected, unit, source, Remediation.RERUN,
                   f"{subject.label()}: {name} = {value} is not a finite number: not a valid measurement")


def judge(
    name: str,
    value: float | None,
    threshold: Threshold | None,
    unit: str,
    subject: Subject = NODE,
    *,
    remediation: Remediation = Remediation.RERUN,
    measured: Measured | None = None,
) -> Verdict:
    """Judge one number against one threshold (see the module docstring). `measured` is
    what the output says of its workload: outside the threshold's `applies_to`
    (`gpuctl.catalog.outside_workload`) the figure is reported, not judged
    (not-applicable, with the reason and the threshold it was not held to)."""
    where = subject.label()
    if threshold is None:
        return Verdict(name, Status.NO_THRESHOLD, subject, value, None, unit, "", Remediation.NONE,
                       f"{where}: {name} = {_fmt(value, unit)}; no threshold defined, not judged")
    if threshold.not_applicable:
        return Verdict(name, Status.NOT_APPLICABLE, subject, value, None, unit, threshold.source, Remediation.NONE,
                       f"{where}: {name} not applicable: {threshold.source}")
    if (why := outside_workload(threshold.applies_to, measured)) is not None:
        assert threshold.applies_to is not None
        limit = threshold.min if threshold.min is not None else threshold.max
        return Verdict(name, Status.NOT_APPLICABLE, subject, value, limit, unit,
                       f"{threshold.source}; workload: {threshold.applies_to.source}", Remediation.NONE,
                       f"{where}: {name} = {_fmt(value, unit)}, not judged: {why} (the {_fmt(limit, unit)} "
                       f"threshold is for {threshold.applies_to.describe()})")
    limit = threshold.min if threshold.min is not None else threshold.max
    if value is None:
        return Verdict(name, Status.ERROR, subject, None, limit, unit, threshold.source, Remediation.RERUN,
                       f"{where}: {name} was not measured")
    if _non_finite(value):
        return _invalid(name, value, limit, unit, subject, threshold.source)
    if threshold.min is not None:
        if value < threshold.min:
            status, rel = Status.FAIL, f"below the minimum {_fmt(threshold.min, unit)}"
        elif threshold.warn_below is not None and value < threshold.warn_below:
            status, rel = Status.WARN, f"above the minimum {_fmt(threshold.min, unit)} but below " \
                                       f"{_fmt(threshold.warn_below, unit)}"
        else:
            status, rel = Status.PASS, f">= {_fmt(threshold.min, unit)}"
    else:
        assert threshold.max is not None
        if value > threshold.max:
            status, rel = Status.FAIL, f"above the maximum {_fmt(threshold.max, unit)}"
        elif threshold.warn_above is not None and value > threshold.warn_above:
            status, rel = Status.WARN, f"within the maximum {_fmt(threshold.max, unit)} but above " \
                                       f"{_fmt(threshold.warn_above, unit)}"
        else:
            status, rel = Status.PASS, f"<= {_fmt(threshold.max, unit)}"
    return Verdict(name, status, subject, value, limit, unit, threshold.source,
                   Remediation.NONE if status is Status.PASS else remediation,
                   f"{where}: {name} = {_fmt(value, unit)}, {rel}")


def judge_fact(
    check: str,
    ok: bool,
    *,
    value: Value,
    expected: Value,
    subject: Subject = NODE,
    unit: str = "",
    source: str,
    remediation: Remediation,
    message: str,
    warn_only: bool = False,
) -> Verdict:
    """A yes/no finding ('model is X', 'port is Active'); `message` explains a failure.
    A non-finite measured value is an invalid measurement whatever `ok` says."""
    if _non_finite(value):
        return _invalid(check, value, expected, unit, subject, source)  # type: ignore[arg-type]
    if ok:
        status, rem, text = Status.PASS, Remediation.NONE, f"{subject.label()}: {check} = {_fmt(value, unit)}"
    else:
        status = Status.WARN if warn_only else Status.FAIL
        rem, text = remediation, f"{subject.label()}: {message}"
    return Verdict(check, status, subject, value, expected, unit, source, rem, text)


def could_not_run(check: str, reason: str, subject: Subject = NODE,
                  remediation: Remediation = Remediation.RERUN, source: str = "") -> Verdict:
    """The tool did not produce a measurement (distinct from a failed measurement)."""
    return Verdict(check, Status.ERROR, subject, None, None, "", source, remediation,
                   f"{subject.label()}: {check} could not run: {reason}")


def overall(verdicts: Iterable[Verdict]) -> Status:
    """fail > error > warn > pass; only no-threshold/not-applicable verdicts → no-threshold."""
    statuses = {v.status for v in verdicts}
    for s in (Status.FAIL, Status.ERROR, Status.WARN, Status.PASS):
        if s in statuses:
            return s
    return Status.NOT_APPLICABLE if statuses == {Status.NOT_APPLICABLE} else Status.NO_THRESHOLD


PARTIAL_SOURCE = ("gpuctl rule: a paste cut short (an elision line, a table without its end, fewer GPU sections "
                  "than the tool says it has) is judged for what it shows, so a fault in it is still reported; "
                  "what it does not show was not validated, so the paste is at best a warning, never a pass")


def partial_paste(tool: str, reason: str, subject: Subject = NODE) -> Verdict:
    """The warning every judge adds for a partial paste (see `PARTIAL_SOURCE`)."""
    return Verdict("partial_paste", Status.WARN, subject, reason, "the whole output", "", PARTIAL_SOURCE,
                   Remediation.RERUN, f"{subject.label()}: partial {tool} output ({reason}): what it shows is judged, "
                   "the rest is not validated; give the whole output")


def _threshold(sku: Sku | None, name: str) -> Threshold | None:
    return sku.thresholds.get(name) if sku is not None else None
