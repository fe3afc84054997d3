"""NCCL: nccl-tests results (bus bandwidth per collective, #wrong) and the NCCL debug log's
NET/IB completion errors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuctl.catalog import Measured, Sku
from gpuctl.parsers.nccl import NcclResult
from gpuctl.parsers.nccl_log import WC_STATUS_SOURCE, IbCompletion, NcclLogResult
from gpuctl.remediation import Remediation
from gpuctl.verdicts.core import NODE, Status, Subject, Verdict, _fmt, _threshold, judge, judge_fact

# ---------------------------------------------------------------- nccl-tests

NCCL_WRONG_SOURCE = "nccl-tests: #wrong counts elements that differ from the expected result; any is a failure"

# The SKU bus-bandwidth thresholds of each collective: (one node, more than one node).
# The catalog's figures (catalog/skus/*.yaml) are all_reduce ones (the public health
# checks they come from run all_reduce_perf); another collective has none, so its bus
# bandwidth is reported and never judged (an all_gather's busbw is not an all_reduce's).
NCCL_THRESHOLDS: dict[str, tuple[str, str]] = {
    "all_reduce": ("all_reduce_busbw_gb_s", "multi_node_busbw_gb_s"),
}


def judge_nccl(result: NcclResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """#wrong = 0 always; with a SKU, the large-message bus bandwidth against the
    thresholds of the run's collective (`NCCL_THRESHOLDS`): for all_reduce,
    `all_reduce_busbw_gb_s` (one node) or `multi_node_busbw_gb_s` (ranks on more than one
    host, or more ranks than the SKU has GPUs). Another collective, or one the output does
    not identify, gives a no-threshold verdict naming it (never a pass).

    An output with several runs (`result.runs`) is judged run by run; each verdict names
    its run and that run's average bus bandwidth, so the worst run decides the status."""
    if not result.runs:
        return _judge_nccl_run(result, sku, subject)
    out = []
    prefix = f"{subject.label()}: "
    for run in result.runs:
        name = run.test or run.collective or "collective not identified"
        tag = f"run {run.run} of {len(result.runs)} ({name}, avg busbw {run.avg_busbw_gb_s:g} GB/s): "
        for v in _judge_nccl_run(run, sku, subject):
            text = v.message.removeprefix(prefix)
            out.append(replace(v, message=prefix + tag + text))
    return out


def _wrong_sizes(result: NcclResult) -> str:
    """'96 out-of-place + 32 in-place at 1048576 B' for the (first three) sizes with wrong elements."""
    parts = []
    for r in result.rows:
        cells = [f"{n} {where}" for n, where in ((r.oop_wrong, "out-of-place"), (r.ip_wrong, "in-place")) if n]
        if cells:
            parts.append(f"{' + '.join(cells)} at {r.size_bytes} B")
    more = f"; and {len(parts) - 3} more sizes" if len(parts) > 3 else ""
    return "; ".join(parts[:3]) + more


def _judge_nccl_run(result: NcclResult, sku: Sku | None, subject: Subject) -> list[Verdict]:
    out = []
    if result.validated or result.out_of_bounds:
        where = _wrong_sizes(result)
        oob = f"; nccl-tests: 'Out of bounds values : {result.out_of_bounds} FAILED'" if result.out_of_bounds else ""
        out.append(judge_fact(
            "nccl_wrong", result.wrong == 0 and not result.out_of_bounds, value=result.wrong, expected=0,
            subject=subject, source=NCCL_WRONG_SOURCE, remediation=Remediation.VENDOR_RMA,
            message=f"data check failed: {result.wrong} wrong elements"
                    + (f" ({where})" if where else "") + oob
                    + ": data corrupted in a collective (GPU, NVLink, NIC or network-stack fault)",
        ))
    else:
        out.append(Verdict("nccl_wrong", Status.NO_THRESHOLD, subject, None, 0, "", NCCL_WRONG_SOURCE,
                           Remediation.NONE, f"{subject.label()}: the run had validation off (#wrong N/A); "
                                             "correctness not checked"))
    if sku is None:
        return out
    value = result.large_msg_busbw_gb_s
    names = NCCL_THRESHOLDS.get(result.collective or "")
    if names is None:
        what = " or ".join(result.collective_candidates) or "a collective the output does not identify"
        check = f"{result.collective}_busbw_gb_s" if result.collective else "nccl_busbw_gb_s"
        judged = ", ".join(NCCL_THRESHOLDS)
        out.append(Verdict(
            check, Status.NO_THRESHOLD, subject, value, None, "GB/s", "", Remediation.NONE,
            f"{subject.label()}: {check} = {_fmt(value, 'GB/s')} at {result.largest_size_bytes:,} B; no threshold "
            f"for {what} (the SKU {sku.name} has bus-bandwidth thresholds for {judged} only), not judged; "
            f"collective from {result.collective_evidence or 'no evidence'}; run {judged}_perf for a judged figure",
        ))
        return out
    # more than one host in the Rank lines (a launcher may print only some of them), or
    # more ranks than one node of the SKU has GPUs
    multi = result.nodes > 1 or result.gpus > sku.gpu.count
    name = names[1] if multi else names[0]
    out.append(judge(name, value, _threshold(sku, name), "GB/s", subject,
                     remediation=Remediation.RECONFIGURE, measured=Measured(gpus_per_node=_gpus_per_node(result))))
    return out


def _gpus_per_node(result: NcclResult) -> int | None:
    """Ranks per node of an nccl-tests run: the ranks over the hosts of its Rank lines when
    they divide evenly (one host: all ranks); None when the output does not say."""
    if result.nodes == 0:
        return None
    per, rest = divmod(result.gpus, result.nodes)
    return per if rest == 0 and per > 0 else None


# ---------------------------------------------------------------- NCCL debug log: NET/IB completion errors

# what an ibv_wc_status in an NCCL NET/IB completion error says, and what to do
_WC_CAUSE: dict[int, tuple[Remediation, str]] = {
    12: (Remediation.RESEAT_OR_REPLACE, "no ACK from the peer within the retries: the link between the two hosts "
         "(cable, transceiver, switch port, RoCE routing/GID) or the peer process died; check ibstat and the port "
         "counters on both HCAs, then ib_write_bw between them"),
    13: (Remediation.RESEAT_OR_REPLACE, "the peer was not ready to receive within the RNR retries"),
    20: (Remediation.RESEAT_OR_REPLACE, "no response from the peer (response timeout)"),
    5: (Remediation.RESEAT_OR_REPLACE, "flushed: a consequence of an earlier error on this connection (look for the "
        "first error between the same hosts)"),
    4: (Remediation.RECONFIGURE, "the local HCA could not access the registered memory: GPUDirect RDMA "
        "(nvidia-peermem), ACS or the IOMMU on this host, not the network"),
    8: (Remediation.RECONFIGURE, "local access error: memory registration on this host, not the network"),
    10: (Remediation.RECONFIGURE, "the peer's HCA refused the access: memory registration or GPUDirect RDMA "
         "on the peer"),
}
NCCL_IB_SOURCE = (f"NCCL net_ib WARN 'Got completion from peer'; {WC_STATUS_SOURCE}; NCCL troubleshooting guide "
                  "(docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#networking-issues)")


def judge_ib_completions(completions: Sequence[IbCompletion], subject: Subject = NODE) -> list[Verdict]:
    """Each NET/IB work completion error, grouped by (logging host, peer, status): a fault
    between the two named hosts, the status decoded (rdma-core ibv_wc_status), with the
    likely cause. Pure: the completions come from `gpuctl.parsers.nccl_log`."""
    groups: dict[tuple[str | None, str | None, int], list[IbCompletion]] = {}
    for c in completions:
        groups.setdefault((c.host, c.peer_address, c.status), []).append(c)
    out = []
    for (host, peer, status), items in groups.items():
        first = items[0]
        rem, cause = _WC_CAUSE.get(status, (Remediation.RERUN, "see the ibv_wc_status meaning"))
        hcas = sorted({c.hca for c in items if c.hca})
        dirs = sorted({c.direction for c in items if c.direction})
        vendor = sorted({c.vendor_err for c in items if c.vendor_err is not None})
        where = f"{host or 'the logging host'}" + (f" GPU [{first.device}]" if first.device is not None else "")
        between = f"between {where} and peer {peer}" if peer else f"on {where} (the line names no peer)"
        detail = ", ".join(x for x in (
            f"hca {', '.join(hcas)}" if hcas else "", f"{'/'.join(dirs)}" if dirs else "",
            f"vendor err {', '.join(f'{x} (0x{x:x})' for x in vendor)}" if vendor else "") if x)
        s = Subject(host or subject.node, port=", ".join(hcas) or None)
        out.append(Verdict(
            "nccl_ib_completion", Status.FAIL, s, f"{first.status_name}({status})", "no completion error", "",
            NCCL_IB_SOURCE, rem,
            f"{s.label()}: NET/IB completion error {between}: status {status} {first.status_name} "
            f"({first.status_text}){f', {detail}' if detail else ''}; {len(items)} line(s) from line {first.line}: "
            f"{cause}"))
    return out


def judge_nccl_log(result: NcclLogResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """The NET/IB completion errors of an NCCL debug log (`judge_ib_completions`); a log
    without any says so (a pass of this one fact, not of the run)."""
    if result.completions:
        return judge_ib_completions(result.completions, subject)
    return [Verdict("nccl_ib_completion", Status.PASS, subject, 0, 0, "errors", NCCL_IB_SOURCE, Remediation.NONE,
                    f"{subject.label()}: no NET/IB completion error in {result.nccl_lines} NCCL lines"
                    + (f" from {', '.join(result.hosts)}" if result.hosts else ""))]
