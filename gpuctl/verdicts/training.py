"""Training: the single-node run's loss, the multi-node launchers, scaling efficiency."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuctl.catalog import Sku, load_health
from gpuctl.parsers.training import LauncherLog, TrainingFinal, TrainingResult
from gpuctl.remediation import Remediation
from gpuctl.verdicts.core import NODE, Status, Subject, Verdict, _threshold, could_not_run, judge, judge_fact

# ---------------------------------------------------------------- training

TRAIN_LOSS_SOURCE = ("gpuctl policy: on the memorisation task the loss must fall to <= 90% of its start "
                     "(facts.md: 9.18 → 0.007 in 60 steps on an H200)")
TRAIN_LOSS_RATIO = 0.9


def judge_training(result: TrainingResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    if result.skipped is not None:
        # Not a pass and not a failure: the node has no PyTorch, so the run was not made.
        return [Verdict("training", Status.NOT_APPLICABLE, subject, None, None, "", "", Remediation.NONE,
                        f"{subject.label()}: skipped: {result.skipped}")]
    if result.final is None:
        return [could_not_run("training", "no final record", subject, Remediation.RERUN)]
    final = result.final
    window = max(1, min(3, len(result.steps) // 2))  # first/last few steps, never overlapping
    start, end = result.loss_start(window), result.loss_end(window)
    finite = all(math.isfinite(s.loss) for s in result.steps)
    agree_source = "DDP keeps replicas identical: every rank's parameter checksum must be equal"
    if len(final.param_checksum_per_rank) < 2:  # one replica: nothing to compare, never a pass
        agree = Verdict("train_ranks_agree", Status.NOT_APPLICABLE, subject, len(final.param_checksum_per_rank), None,
                        "ranks", agree_source, Remediation.NONE,
                        f"{subject.label()}: train_ranks_agree not judged: the run had "
                        f"{len(final.param_checksum_per_rank)} rank, no replica to compare with")
    else:
        agree = judge_fact(
            "train_ranks_agree", final.ranks_agree, value=len(set(final.param_checksum_per_rank)), expected=1,
            unit="distinct checksums", subject=subject, source=agree_source, remediation=Remediation.VENDOR_RMA,
            message=f"{len(set(final.param_checksum_per_rank))} distinct parameter checksums across "
                    f"{len(final.param_checksum_per_rank)} ranks (silent data corruption?)")
    out = [judge_fact(
        "train_loss_falls", finite and len(result.steps) >= 2 and end <= start * TRAIN_LOSS_RATIO,
        value=round(end, 6) if finite else "non-finite", expected=round(start * TRAIN_LOSS_RATIO, 6),
        subject=subject, source=TRAIN_LOSS_SOURCE, remediation=Remediation.RERUN,
        message=(f"loss went from {start:.4g} to {end:.4g}, must fall to <= {start * TRAIN_LOSS_RATIO:.4g}"
                 if finite else "loss became NaN/inf"),
    ), agree]
    limits = load_health().training
    floor = limits.mfu_min_flops_per_token if limits else None
    if sku is None:
        out.append(judge("train_tflops", final.achieved_tflops, None, "TFLOP/s", subject))
    elif floor is not None and final.model_flops_per_token < floor.value:
        # A model this small leaves the GPU idle between kernel launches: its MFU measures
        # launch overhead, not the node (0.00076 on a healthy H200).
        threshold = _threshold(sku, "train_mfu_fraction")
        out.append(Verdict(
            "train_mfu_fraction", Status.NOT_APPLICABLE, subject, None, None, "of peak", floor.source,
            Remediation.NONE,
            f"{subject.label()}: train_mfu_fraction not judged: the timed model does "
            f"{final.model_flops_per_token:.3g} training FLOPs per token, under the "
            f"{floor.value:.3g} a model needs to load the GPU (achieved {final.achieved_tflops:.3g} TFLOP/s"
            + (f"; the SKU's floor is {threshold.min:g} of peak" if threshold and threshold.min is not None else "")
            + ")"))
    else:
        peak = sku.dense_bf16_tflops.value * 1e12 * final.world_size
        mfu = final.model_flops_per_token * final.tokens_per_s / peak
        out.append(judge("train_mfu_fraction", mfu, _threshold(sku, "train_mfu_fraction"), "of peak", subject,
                         remediation=Remediation.RECONFIGURE))
    return out


# ---------------------------------------------------------------- training across nodes

LAUNCH_SOURCE = ("gpuctl policy: every node's torchrun launcher must finish within its bound "
                 "(c10d join timeout, the process group's per-collective timeout, the launcher's own limit); "
                 "a launcher that fails or is stopped names its node")


@dataclass(frozen=True)
class Launch:
    """One node's torchrun launcher as the bench saw it (its parsed output in `log`)."""

    node: str
    exit_status: int
    timed_out: bool
    duration_s: float
    timeout_s: float
    log: LauncherLog
    unreachable: str | None = None  # the node could not be reached to start it: why
    last_line: str = ""  # the launcher's last stderr line, for a failure its log does not explain
    stopped: str | None = None  # the bench's watchdog stopped it after another launcher failed: why


#: a rendezvous error saying the launcher could not reach the c10d store (or, on the first node,
#: could not host it); torchrun's "RendezvousTimeoutError" alone means it waited for the others
_STORE_ERRORS = ("RendezvousConnectionError", "DistNetworkError", "DistStoreError")
#: a rank's error saying a peer went away, which is what another rank's death does to it (gloo:
#: "Connection reset by peer. This is typically caused by a remote worker hanging ...", NCCL:
#: "remote process exited or there was a network error")
_PEER_GONE = re.compile(r"connection (reset|closed) by peer|remote process exited", re.IGNORECASE)


def _launch_text(launch: Launch, endpoint: str, head: str) -> tuple[str, Remediation]:
    """What one launcher that did not finish cleanly says, and what to do about it."""
    said = launch.log.summary()
    if launch.unreachable is not None:
        return f"the training launcher could not be started: {launch.unreachable}", Remediation.RECONFIGURE
    if launch.timed_out:
        if launch.stopped:
            text = (f"the training launcher had not finished after {launch.duration_s:.0f} s and was stopped "
                    f"({launch.stopped}; the rendezvous is at {endpoint} on {head})")
        else:
            text = (f"the training launcher did not finish within {launch.timeout_s:.0f} s and was stopped "
                    f"(a rank hung, or the rendezvous at {endpoint} on {head} never completed)")
        return text + (f"; it said: {said}" if said else ""), Remediation.RERUN
    why = said or launch.last_line or "no output"
    text = f"the training launcher failed (exit {launch.exit_status}): {why}"
    rem = Remediation.RECONFIGURE if (launch.log.rendezvous_error or launch.log.nccl) else Remediation.RERUN
    if launch.log.rendezvous_error and launch.node != head:
        text += f" (the rendezvous is at {endpoint} on {head})"
    return text, rem


def _launch_kind(launch: Launch, head: str) -> str | None:
    """How one launcher ended: None (finished), "cause" (a failure of its own node), "unreached"
    (a node other than the first could not reach the rendezvous store), "waited" (the
    rendezvous timed out waiting for the others) or "consequence" (its ranks lost a peer, or
    the watchdog stopped it after another launcher failed)."""
    log = launch.log
    if launch.unreachable is not None:
        return "cause"
    if launch.timed_out:
        return "consequence" if launch.stopped else "cause"
    if launch.exit_status == 0:
        return None
    if log.rendezvous_error:
        if any(e in log.rendezvous_error for e in _STORE_ERRORS):
            return "cause" if launch.node == head else "unreached"
        return "waited"
    errors = [f.error for f in log.failures if f.signal is None] + [e for _, e in log.rank_errors]
    if log.failures and all(f.signal is None for f in log.failures) and errors \
            and all(_PEER_GONE.search(e) for e in errors):
        return "consequence"
    return "cause"


def judge_launchers(launches: Sequence[Launch], endpoint: str, head: str, subject: Subject = NODE) -> list[Verdict]:
    """`train_launcher`: one failing verdict per node whose launcher failed of its own, naming
    the node and what its output says (rendezvous error, failed ranks with exit code or
    signal, NCCL warnings/errors); one pass for the cluster when all finished.

    A launcher whose failure is what another node's failure does to the others is marked as
    that failure's consequence (could not run, naming the node at fault), not as a second
    fault: the first node's rendezvous timing out while a node could not reach it; ranks
    that lost a peer ("Connection reset by peer") while another node's rank died; a launcher
    the watchdog stopped after another failed. Which node could not reach the rendezvous:
    that node, unless no node could (then the first node, which hosts it, on 3 nodes or
    more; with 2 the one that could not connect is named, its peer's port as the other
    possibility). Without a failure of its own anywhere, every failed launcher fails."""
    kinds = {x.node: _launch_kind(x, head) for x in launches}
    unreached = [n for n, k in kinds.items() if k == "unreached"]
    others = [x.node for x in launches if x.node != head]
    head_hosts_fault = len(others) >= 2 and sorted(unreached) == sorted(others) and kinds.get(head) == "waited"
    if head_hosts_fault:  # no node could reach the first node's store: the first node's port
        kinds = {n: "cause" if n == head else "consequence" if k == "unreached" else k for n, k in kinds.items()}
    else:
        kinds = {n: "cause" if k == "unreached" else k for n, k in kinds.items()}
    causes = [n for n, k in kinds.items() if k == "cause"]
    out = []
    for launch in launches:
        kind = kinds[launch.node]
        if kind is None:
            continue
        where = Subject(node=launch.node)
        text, rem = _launch_text(launch, endpoint, head)
        value = "timed out" if launch.timed_out else launch.exit_status
        if kind in ("waited", "consequence") and causes and launch.node not in causes:
            out.append(Verdict("train_launcher", Status.ERROR, where, value, None, "", LAUNCH_SOURCE, Remediation.NONE,
                               f"{where.label()}: train_launcher not judged: a consequence of the failure on "
                               f"{', '.join(causes)}, not a fault of {launch.node}: {text}"))
            continue
        if launch.node == head and head_hosts_fault:
            text = (f"no node could reach the rendezvous at {endpoint} on {head} ({', '.join(unreached)} could not "
                    f"connect): check {head}'s firewall for that port; {text}")
            rem = Remediation.RECONFIGURE
        elif kinds[launch.node] == "cause" and launch.node in unreached:
            reached = [n for n in others if n not in unreached]
            text += (f"; {launch.node} could not reach it" + (f" while {', '.join(reached)} could" if reached else
                     f": {launch.node}'s route or firewall to that port, or {head}'s firewall"))
        out.append(judge_fact("train_launcher", False, value=value, expected=0, subject=where, source=LAUNCH_SOURCE,
                              remediation=rem, message=text))
    if not out and launches:
        slowest = max(launches, key=lambda x: x.duration_s)
        out.append(Verdict("train_launcher", Status.PASS, subject, len(launches), len(launches), "launchers",
                           LAUNCH_SOURCE, Remediation.NONE,
                           f"{subject.label()}: all {len(launches)} torchrun launchers finished (rendezvous at "
                           f"{endpoint} on {head}; slowest {slowest.node} {slowest.duration_s:.0f} s)"))
    return out


SCALING_CPU_REASON = ("gloo on CPU: the run shows the mechanics (rendezvous, all-reduce, ranks agree), "
                      "its speed says nothing about a GPU fabric; reported, not judged")


def judge_training_multi_node(result: TrainingResult, sku: Sku | None, subject: Subject,
                              single: dict[str, TrainingFinal]) -> list[Verdict]:
    """The rank-0 output of the run across nodes: the single-node rules (`judge_training`:
    loss falls, ranks agree, MFU), with the ranks-agree verdict naming every rank's node and
    checksum; tokens/s per GPU (reported); the scaling efficiency against the SKU's floor
    (`judge_scaling_efficiency`, from the per-node runs in `single`, node → final record)."""
    out = judge_training(result, sku, subject)
    final = result.final
    if final is None:
        return out
    if final.ranks:
        majority = final.majority_checksum
        listing = ", ".join(f"rank {r.rank} on {r.node}" + (f" ({r.host})" if r.host and r.host != r.node else "")
                            + f": {r.checksum}" + ("" if r.checksum == majority else " (differs)")
                            for r in final.ranks)
        out = [replace(v, message=f"{v.message}: {listing}") if v.check == "train_ranks_agree" else v for v in out]
    unit = "tokens/s per GPU" if not final.on_cpu else "tokens/s per rank"
    out.append(judge("train_tokens_per_s_per_gpu", round(final.tokens_per_s_per_rank, 1), None, unit, subject))
    out.append(judge_scaling_efficiency(final, single, sku, subject))
    return out


def judge_scaling_efficiency(final: TrainingFinal, single: dict[str, TrainingFinal], sku: Sku | None,
                             subject: Subject = NODE) -> Verdict:
    """tokens/s of the N-node run ÷ (N × single-node tokens/s), per rank so that runs with a
    different rank count per node compare: (multi tokens/s ÷ its ranks) ÷ (mean over the
    per-node runs of tokens/s ÷ their ranks); equal to the plain formula when every node
    runs one rank per GPU in both. Judged against the SKU's `train_scaling_efficiency`
    floor on GPUs; on CPU (gloo) reported, not judged."""
    name = "train_scaling_efficiency"
    same = [f for f in single.values() if f.model == final.model and f.mfu_model == final.mfu_model
            and f.on_cpu == final.on_cpu and f.tokens_per_s > 0]
    if not same:
        why = ("no per-node training run finished in this bench" if not single else
               "the per-node runs trained another model shape or device: "
               + ", ".join(f"{node}: {f.model or '?'}" for node, f in sorted(single.items())))
        return could_not_run(name, f"no single-node figure to compare with ({why})", subject, Remediation.RERUN)
    base = sum(f.tokens_per_s_per_rank for f in same) / len(same)
    value = round(final.tokens_per_s_per_rank / base, 4)
    detail = (f"{final.tokens_per_s:,.0f} tokens/s on {final.world_size} ranks vs {base:,.0f} tokens/s per rank "
              f"alone (mean of {len(same)} per-node runs)")
    if final.on_cpu:
        return Verdict(name, Status.NOT_APPLICABLE, subject, value, None, "of linear", SCALING_CPU_REASON,
                       Remediation.NONE, f"{subject.label()}: {name} = {value:g} ({detail}); {SCALING_CPU_REASON}")
    v = judge(name, value, _threshold(sku, name), "of linear", subject, remediation=Remediation.RECONFIGURE)
    return replace(v, message=f"{v.message} ({detail})")
