"""Judge a tool output that came from anywhere: parse it, list its figures, judge it.

`analyze_text(kind, text, sku)` is what `gpuctl analyze KIND FILE` calls; bench and
report code can call it too. `detect_kind(text)` tells the kind of an output given
without one (`gpuctl analyze FILE`) from the marks each tool prints, and refuses when
none or several kinds' marks are in it. The kinds, their parsers, judging rules, figures and
marks are the one registry `gpuctl.kinds`; the verdicts come from `gpuctl.kinds.judge_text`,
the path the bench's judging takes too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuctl import verdicts as v
from gpuctl.catalog import Sku
from gpuctl.errors import ParseError
from gpuctl.kinds import KINDS, Figure, counter_kinds, get, judge_text
from gpuctl.parsers._common import drop_noise, noise_lines, strip_ansi
from gpuctl.parsers.nvidia_smi.model import NvidiaSmiFailure
from gpuctl.parsers.xid import KERNEL_LINE

__all__ = ["KINDS", "MAX_INPUT_BYTES", "Analysis", "Figure", "analyze_text", "detect_kind"]

# The largest input `gpuctl analyze` reads. A whole-boot `dmesg` or a full nccl-tests sweep
# with NCCL_DEBUG=INFO on 64 ranks is a few MiB; 64 MiB leaves room for that tenfold while
# refusing a wrong file (a core dump, a disk image) before it is read into memory.
MAX_INPUT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Analysis:
    kind: str
    figures: tuple[Figure, ...]
    verdicts: tuple[v.Verdict, ...]
    emulated: str | None = None  # why the figures are not real hardware's (gpuctl.provenance)
    detected: str | None = None  # how the kind was told when it was not given (`detect_kind`)

    @property
    def status(self) -> v.Status:
        return v.overall(self.verdicts)

    @property
    def failed(self) -> bool:
        """True when any verdict failed or could not be judged (exit code 1)."""
        return self.status in (v.Status.FAIL, v.Status.ERROR)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **({"detected": self.detected} if self.detected else {}),
            "status": self.status.value,
            "figures": {f.name: {"value": f.value, "unit": f.unit} for f in self.figures},
            "verdicts": [x.as_dict() for x in self.verdicts],
            "emulated": self.emulated,
        }


def detect_kind(text: str) -> tuple[str, str]:
    """(kind, what it was told by) for a tool output whose kind was not given, from the marks
    each kind's registry entry lists (`ToolKind.signs`); ParseError when no kind's marks are in
    it, or more than one kind's (the file holds several tools' outputs, or one gpuctl cannot
    tell apart): the message lists them."""
    clean = drop_noise(strip_ansi(text).replace("\r\n", "\n"))
    found: dict[str, str] = {}
    for kind in KINDS.values():
        for sign in kind.signs:
            if m := sign.search(clean):
                found[kind.name] = m.group(0).strip().splitlines()[0][:80]
                break
    kernel = next((ln for ln in clean.splitlines() if KERNEL_LINE.match(ln.lstrip())), None)
    if not found and kernel is not None:
        # a kernel log without any GPU event (the healthy case): the weakest mark, used alone
        found["xid"] = kernel.strip()[:80]
    if not found:
        raise ParseError("cannot tell which tool printed this: none of the kinds' marks is in it; give the kind: "
                         f"gpuctl analyze KIND FILE (KIND: {', '.join(KINDS)})")
    for kind in list(found):
        # an nccl-tests run with NET/IB errors in its log: the nccl kind judges both (`ToolKind.also_reads`)
        if (other := KINDS[kind].also_reads) is not None:
            found.pop(other, None)
    if len(found) > 1:
        listed = "; ".join(f"{k} ({e!r})" for k, e in found.items())
        raise ParseError(f"ambiguous: marks of {len(found)} kinds in it: {listed}; give the kind: "
                         "gpuctl analyze KIND FILE, or split the file")
    ((kind, evidence),) = found.items()
    return kind, f"detected as {kind} from the line {evidence!r}"


def analyze_text(kind: str, text: str, sku: Sku | None = None, *, source: str = "<input>",
                 subject: v.Subject = v.NODE, baseline: str | None = None) -> Analysis:
    """Parse `text` as `kind` and judge it (against `sku` when given), through the one path
    the bench takes too (`gpuctl.kinds.judge_text`), and list its figures. `baseline`: an
    earlier output of a counter kind (`ToolKind.counters`), the first sample the change is
    judged from.

    A ParseError is re-raised naming `source`; nvidia-smi's driver failures keep their
    type (`DriverLibraryMismatch`, ...) so callers can still tell them apart."""
    k = get(kind)
    if baseline is not None:
        if not k.counters:
            raise ParseError(f"--baseline is for the counter kinds ({', '.join(counter_kinds())}), not {kind}")
        text = baseline.rstrip("\n") + "\n" + text
    if len(text) > MAX_INPUT_BYTES:
        raise ParseError(f"{source}: input too large ({len(text)} characters, the bound is "
                         f"{MAX_INPUT_BYTES // (1024 * 1024)} MiB)")
    try:
        judged = judge_text(kind, text, sku, subject)
    except NvidiaSmiFailure as exc:
        raise type(exc)(f"{source}: {exc}") from None
    except ParseError as exc:
        raise ParseError(f"{source}: {exc}") from None
    figures = get(judged.kind).figures(judged.parsed)
    if judged.note is not None:
        # read as another kind (a run that died on a network fault: its NET/IB errors are the finding)
        figures.insert(0, Figure(f"{kind.replace('-', '_')}_not_read", judged.note))
    if skipped := noise_lines(text):
        # what was skipped as paste noise, so a reader can check nothing of the output was
        figures.append(Figure("paste_noise_skipped",
                              [f"line {n}: {what} {line[:60]!r}" for n, what, line in skipped]))
    return Analysis(kind, tuple(figures), judged.verdicts, judged.emulated)
