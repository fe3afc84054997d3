"""Error counters judged by their change between two samples (NVLink, InfiniBand port counters)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuctl.catalog import Sku, load_health
from gpuctl.parsers.ib_counters import IbCountersResult
from gpuctl.parsers.nvlink_errors import NvlinkErrorsResult
from gpuctl.remediation import Remediation
from gpuctl.verdicts.core import NODE, Status, Subject, Verdict, partial_paste

# ---------------------------------------------------------------- error counters: the change between two samples

# a counter sample: (subject, counter name) → value; the subject is a Subject (GPU and link, HCA port)
CounterSample = Mapping[tuple[Subject, str], int]


@dataclass(frozen=True)
class CounterDelta:
    subject: Subject
    counter: str
    before: int
    after: int

    @property
    def rise(self) -> int:
        return self.after - self.before


def counter_deltas(before: CounterSample, after: CounterSample) -> list[CounterDelta]:
    """The change of each counter present in both samples, in `after`'s order."""
    return [CounterDelta(subj, name, before[(subj, name)], value) for (subj, name), value in after.items()
            if (subj, name) in before]


def judge_counter_deltas(check: str, deltas: Sequence[CounterDelta], family: str,
                         subject: Subject = NODE) -> list[Verdict]:
    """The one rule for error counters (health.yaml `counter_rises[family]`): a counter that
    rose between two samples gets its status (warn or fail) per subject and counter; one
    that fell was reset between the samples (reboot, driver reload, counter clear) and is
    not judged (warn); with no rise, one pass naming how many counters were compared.
    Usable by any caller that has two samples (`counter_deltas`)."""
    rules = (load_health().counter_rises or {}).get(family)  # type: ignore[call-overload]
    if rules is None:
        return [Verdict(check, Status.NO_THRESHOLD, subject, None, None, "", "", Remediation.NONE,
                        f"{subject.label()}: {check}: no counter rule for {family} in health.yaml")]
    out = []
    for d in deltas:
        status = rules.counters.get(d.counter)
        if d.rise < 0:
            out.append(Verdict(check, Status.WARN, d.subject, d.rise, 0, "", rules.source, Remediation.RERUN,
                               f"{d.subject.label()}: {d.counter} fell from {d.before} to {d.after}: reset between "
                               "the samples (reboot, driver reload or a counter clear); not judged, sample again"))
        elif d.rise > 0 and status is not None:
            out.append(Verdict(check, Status(status), d.subject, d.rise, 0, "", rules.source,
                               Remediation.RESEAT_OR_REPLACE,
                               f"{d.subject.label()}: {d.counter} rose by {d.rise} ({d.before} → {d.after}) between "
                               "the samples: a marginal or flapping link (cable, transceiver, connector, port)"))
    if not out:
        rose = sorted({f"{d.counter} +{d.rise}" for d in deltas if d.rise > 0})
        out.append(Verdict(check, Status.PASS, subject, 0, 0, "", rules.source, Remediation.NONE,
                           f"{subject.label()}: {check}: none of the {len(deltas)} judged counters rose between "
                           "the samples" + (f" (rose, not judged: {', '.join(rose)})" if rose else "")))
    return out


def judge_counter_samples(check: str, samples: Sequence[CounterSample], family: str,
                          subject: Subject = NODE) -> list[Verdict]:
    """Counters given as samples: one sample is reported, not judged (absolute counts since
    the last reset say nothing of now); two or more are judged first → last
    (`judge_counter_deltas`)."""
    if len(samples) < 2:
        nonzero = sorted(f"{s.label()} {n} = {v}" for (s, n), v in (samples[0] if samples else {}).items() if v)
        return [Verdict(check, Status.NO_THRESHOLD, subject, len(nonzero), None, "counters", "", Remediation.NONE,
                        f"{subject.label()}: {check}: one sample: counts since the last reset are reported, not "
                        "judged; give two samples (the outputs concatenated, or --baseline FILE) to judge the "
                        "change" + (f"; non-zero: {'; '.join(nonzero[:8])}" if nonzero else "; all zero"))]
    return judge_counter_deltas(check, counter_deltas(samples[0], samples[-1]), family, subject)


def judge_nvlink_errors(result: NvlinkErrorsResult, sku: Sku | None = None,
                        subject: Subject = NODE) -> list[Verdict]:
    """NVLink error counters per GPU and link, judged as their change between the first and
    last sample (`judge_counter_samples`, health.yaml counter_rises.nvlink)."""
    samples = [{(Subject(subject.node, gpu=g, port=f"link {link}"), name): v for (g, link, name), v in s.items()}
               for s in result.samples]
    out = [partial_paste(TOOL_NVLINK_ERRORS, result.partial, subject)] if result.partial else []
    return out + judge_counter_samples("nvlink_error_counters", samples, "nvlink", subject)


TOOL_NVLINK_ERRORS = "nvidia-smi nvlink -e"


def judge_ib_counters(result: IbCountersResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """InfiniBand port error counters (perfquery or sysfs), judged as their change between
    the first and last sample (`judge_counter_samples`, health.yaml counter_rises.infiniband)."""
    samples = [{(Subject(subject.node, port=port), name): v for (port, name), v in s.items()}
               for s in result.samples]
    return judge_counter_samples("ib_port_counters", samples, "infiniband", subject)
