"""Storage: fio (disk throughput and IOPS, with what makes a figure no disk measurement) and gdsio."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuctl.catalog import Measured, Sku
from gpuctl.parsers.fio import RW_INFERRED, FioJob, FioResult
from gpuctl.parsers.gdsio import GdsioResult
from gpuctl.remediation import Remediation
from gpuctl.verdicts.core import NODE, Status, Subject, Verdict, _fmt, _threshold, judge

# ---------------------------------------------------------------- fio

_RANDREAD = {"randread", "randrw"}
_SEQWRITE = {"write"}
# fio engines that move no data to or from a local disk: their figure is no disk throughput
_NO_DISK_DATA_ENGINES = frozenset({
    "null", "falloc", "ftruncate", "filecreate", "filestat", "filedelete", "dircreate", "dirstat", "dirdelete",
    "cpuio", "e4defrag", "exec", "net", "netsplice", "rdma", "http",
})
# engines that reach the device without the page cache whatever direct= says (NVMe/SCSI passthrough, SPDK)
_NO_PAGE_CACHE_ENGINES = frozenset({"io_uring_cmd", "sg", "spdk", "spdk_bdev"})


def _not_a_disk_measurement(jobs: Sequence[FioJob]) -> str | None:
    """Why these jobs' figures do not measure the disk, or None."""
    for j in jobs:
        if (j.ioengine or "").lower() in _NO_DISK_DATA_ENGINES:
            return f"job {j.name!r} ran with ioengine={j.ioengine}, which moves no data to or from the disk"
    for j in jobs:
        if j.direct is False and (j.ioengine or "").lower() not in _NO_PAGE_CACHE_ENGINES:
            return (f"job {j.name!r} ran buffered (no direct=1; fio's default is direct=0), so the figure "
                    "includes the page cache, not only the disk")
    return None


def _judge_fio_figure(name: str, value: float, unit: str, jobs: Sequence[FioJob], sku: Sku | None,
                      subject: Subject) -> Verdict:
    rw = tuple(dict.fromkeys(j.rw for j in jobs if j.rw))
    v = judge(name, value, _threshold(sku, name), unit, subject, remediation=Remediation.RECONFIGURE,
              measured=Measured(fio_rw=rw or None))
    inferred = "; ".join(f"rw={j.rw} of job {j.name!r} inferred from the {j.rw_source}: no job definition line"
                         for j in jobs if j.rw_source in RW_INFERRED)
    if inferred:
        v = replace(v, message=f"{v.message} ({inferred})")
    why = _not_a_disk_measurement(jobs)
    if why is None:
        return v
    if v.status in (Status.PASS, Status.WARN, Status.FAIL):
        return replace(v, status=Status.ERROR, remediation=Remediation.RERUN,
                       message=f"{subject.label()}: {name} = {_fmt(value, unit)}, not judged against the "
                               f"{_fmt(v.threshold, unit)} disk threshold: {why}; rerun with direct=1 and a disk "
                               "I/O engine (libaio, io_uring)")
    return replace(v, message=f"{v.message} ({why})")


def judge_fio(result: FioResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """4k random read IOPS of the rw=randread/randrw jobs against `fio_randread_iops`;
    sequential write GB/s (10^9 bytes/s) of the rw=write jobs against `fio_seqwrite_gb_s`.
    Other workloads have no threshold. A figure from a run that did not measure the disk
    (a data-less engine such as falloc or null, or buffered I/O) is not judged against a
    disk threshold (error, "could not be judged"). A job whose workload the output does not
    say (text without its job definition line, see `gpuctl.parsers.fio`) cannot be judged
    at all: an error verdict, with or without a SKU."""
    out = []
    seqwrite = [j for j in result.jobs if j.rw in _SEQWRITE]
    for mode in sorted(_RANDREAD):  # each workload on its own: the threshold says which it is for
        randread = [j for j in result.jobs if j.rw == mode]
        if randread:
            iops = sum(j.read.iops for j in randread if j.read is not None)
            out.append(_judge_fio_figure("fio_randread_iops", iops, "IOPS", randread, sku, subject))
    if seqwrite:
        gb_s = sum(j.write.bw_gb_s for j in seqwrite if j.write is not None)
        out.append(_judge_fio_figure("fio_seqwrite_gb_s", gb_s, "GB/s", seqwrite, sku, subject))
    for mode in result.rw_modes:
        if mode in _RANDREAD | _SEQWRITE:
            continue
        jobs = [j for j in result.jobs if j.rw == mode]
        side = "read" if any(j.read is not None for j in jobs) else "write"
        iops = sum(getattr(j, side).iops for j in jobs if getattr(j, side) is not None)
        out.append(_judge_fio_figure(f"fio_{mode}_{side}_iops", iops, "IOPS", jobs, None, subject))
    unknown = [j.name for j in result.jobs if j.rw is None]
    if unknown:
        names = ", ".join(repr(n) for n in unknown)
        out.append(Verdict(
            "fio_workload", Status.ERROR, subject, None, None, "", "", Remediation.RERUN,
            f"{subject.label()}: fio results could not be judged: the output does not say the workload (rw=) of "
            f"job {names}: no '(g=0): rw=...' job definition line, no rw= elsewhere and no job name that names "
            "it; keep fio's whole report (or use --output-format=json) so random and sequential I/O can be told "
            "apart"))
    return out


# ---------------------------------------------------------------- gdsio


def judge_gdsio(result: GdsioResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """No SKU threshold exists for GPUDirect Storage yet: figures only (no-threshold)."""
    return [judge(f"gdsio_{r.io_type.lower()}_{r.xfer_type.lower()}_gib_s", r.throughput_gib_s, None, "GiB/s",
                  subject) for r in result.runs]
