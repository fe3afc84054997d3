"""`gpuctl bench`: run a suite on the nodes, judge every output, keep it all in the run record.

Order: node-local benchmarks (nccl-tests per node, the bandwidth probe, fio, gdsio,
dcgmi diag, the training run) on every node in parallel, each node running its own
benchmarks one after another; then ib_write_bw and ib_write_lat per HCA between node
pairs, round by round (`gpuctl.bench.pairing`); then the multi-node all_reduce over MPI,
launched from the first node with SSH trust set up for that run only (`gpuctl.bench.mpissh`)
and removed afterwards; then the training run across all nodes: one torchrun launcher per
node, each started from here over the same SSH connection as every other benchmark (c10d
rendezvous on the first node; torchrun needs no SSH between the nodes, so no key is placed
for it), each bounded by the rendezvous timeout, the per-collective timeout and its own
launcher timeout, so a rank that hangs or dies is named by node. Raw outputs (command, exit
status, stdout, stderr) go to `raw/<host>/<test>.txt`; the judged results to `stages/bench.json` (shape: `run_bench`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpuctl import kinds
from gpuctl.bench import localise, localise_run, mpissh, remote, suites
from gpuctl.bench.judge import Judged, effective_sku, judge_output, nccl_series, not_applicable, result_dict
from gpuctl.bench.pairing import pairing_rounds
from gpuctl.bench.programs import program_text
from gpuctl.bench.remote import CmdResult, SshTarget
from gpuctl.catalog import Sku
from gpuctl.errors import ExitCode, ParseError
from gpuctl.inventory import LoadedInventory
from gpuctl.parsers.training import (
    TorchProbe,
    TrainingFinal,
    TrainingResult,
    parse_launcher_log,
    parse_torch_probe,
    parse_training_log,
)
from gpuctl.remediation import Remediation
from gpuctl.results import BenchStage, bench_stage
from gpuctl.runcontext import inventory_summary, matrix_summary, thresholds_summary
from gpuctl.runrecord import RunRecord, now_iso
from gpuctl.spec import NodeSpec, train_env_knob
from gpuctl.verdicts import (
    Launch,
    Status,
    Subject,
    Verdict,
    could_not_run,
    judge_launchers,
    judge_training_multi_node,
    overall,
)

log = logging.getLogger(__name__)

CLUSTER = "cluster"
Progress = Callable[[str], None]


@dataclass
class Bucket:
    """The results of one host (or of the cluster-level tests)."""

    verdicts: list[Verdict] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    tests: list[dict[str, Any]] = field(default_factory=list)

    def add(self, verdicts: Sequence[Verdict], test: str, host: str | None, raw: str | None,
            skipped: str | None = None, emulated: str | None = None) -> None:
        self.verdicts.extend(verdicts)
        self.results.extend(result_dict(v, test, host, raw, skipped, emulated) for v in verdicts)

    def as_dict(self) -> dict[str, Any]:
        return {"status": overall(self.verdicts).value if self.verdicts else Status.NO_THRESHOLD.value,
                "results": self.results, "tests": self.tests}


def exit_code(status: str) -> ExitCode:
    """0 pass/warn (and figures without thresholds), 1 any fail, 3 could not run."""
    if status == Status.FAIL.value:
        return ExitCode.CHECKS_FAILED
    if status == Status.ERROR.value:
        return ExitCode.EXECUTION
    return ExitCode.OK


class BenchRun:
    def __init__(self, loaded: LoadedInventory, specs: Sequence[NodeSpec], suite: suites.Suite,
                 record: RunRecord, targets: dict[str, SshTarget] | None = None,
                 progress: Progress | None = None, train_env: str | None = None) -> None:
        self.loaded, self.specs, self.record = loaded, list(specs), record
        self.suite = suites.with_settings(suite, loaded.inventory.bench.training)  # the inventory's bench.training
        self.train_env = train_env  # None: each node's roles/train_env path (`train_env_path`)
        # the training program's scratch folder and rendezvous id: the run id (second-granular)
        # plus a random token, so two benches started in the same second on one machine (the
        # `@local` tier, parallel test runs) never write over each other's program
        self.train_id = f"{record.id}-{secrets.token_hex(4)}"
        self.single_training: dict[str, TrainingFinal] = {}  # node → its own training run's final record
        self.single_loss: dict[str, list[list[float]]] = {}  # node → its own run's [step, loss] (the report's chart)
        self.training: dict[str, Any] = {}  # the multi-node training run, for bench.json
        self.localisation: dict[str, Any] = {}  # the fault finding (`localise.Localisation.as_dict`), when it ran
        self.by_name = {s.node: s for s in self.specs}
        self.targets = targets or remote.targets_for(loaded, self.specs)
        self.hosts = {s.node: Bucket() for s in self.specs}
        self.cluster = Bucket()
        self.series: list[dict[str, Any]] = []
        self.reachable: dict[str, str] = {}
        self.progress = progress or (lambda msg: log.info("%s", msg))

    # ---------------------------------------------------------------- helpers

    def env_path(self, spec: NodeSpec) -> str:
        """The training environment the node's programs run with: the explicit `train_env`,
        else the roles/train_env knob `train_env_path` as the inventory sets it."""
        return self.train_env if self.train_env is not None else train_env_path(spec)

    def sku(self, spec: NodeSpec) -> Sku:
        return effective_sku(self.loaded.sku, spec)

    def keep(self, bucket: Bucket, host: str, test: str, res: CmdResult) -> str:
        path = self.record.raw(host, f"{test}.txt", res.transcript())
        rel = str(path.relative_to(self.record.path))
        bucket.tests.append({"test": test, "host": host, "command": res.script, "exit_status": res.exit_status,
                             "duration_s": round(res.duration_s, 2), "timed_out": res.timed_out, "raw": rel})
        return rel

    def judge_result(self, kind: str, res: CmdResult, sku: Sku, subject: Subject) -> Judged:
        if res.timed_out:
            return Judged([could_not_run(kinds.get(kind).check, f"timed out after {res.duration_s:.0f} s",
                                         subject)])
        return judge_output(kind, res.stdout, sku, subject, res.exit_status, res.stderr)

    # ---------------------------------------------------------------- node-local

    def node_tests(self, spec: NodeSpec) -> list[tuple[str, str, str | None, str | None]]:
        """(test, kind, script or None when not applicable, stdin or the reason)."""
        run_id = self.record.id
        tests: list[tuple[str, str, str | None, str | None]] = [
            (t.removesuffix("_perf"), "nccl", suites.nccl_script(t, self.suite, spec), None)
            for t in self.suite.nccl_tests
        ]
        if self.suite.bwprobe:
            tests.append((_test("bandwidth"), "bandwidth", suites.bwprobe_script(), None))
        if self.suite.fio:
            for job in suites.FIO_JOBS:
                if spec.raid is None:
                    tests.append((job, "fio", None, "no storage.raid in the inventory"))
                else:
                    tests.append((job, "fio", suites.fio_script(job, spec, self.suite, run_id), None))
        if self.suite.gdsio:
            gds = spec.components.get("gds")
            if gds is None or not gds.enabled or spec.raid is None:
                reason = (gds.reason if gds is not None and not gds.enabled else "no storage.raid for gdsio files")
                tests.append((_test("gdsio"), "gdsio", None, f"GDS not installed: {reason}"))
            else:
                tests.append((_test("gdsio"), "gdsio", suites.gdsio_script(spec, self.suite, run_id), None))
        if self.suite.dcgm:
            tests.append((_test("dcgm"), "dcgm", suites.dcgm_script(), None))
        if self.suite.training:
            peak = self.loaded.sku.dense_bf16_tflops.value
            tests.append((_test("training"), "training",
                          suites.training_script(spec, self.suite, self.train_id, peak, self.env_path(spec)),
                          program_text("train_smoke.py")))
        return tests

    def run_node(self, spec: NodeSpec) -> None:
        host, bucket, target = spec.node, self.hosts[spec.node], self.targets[spec.node]
        subject = Subject(node=host)
        probe = remote.run(target, "uname -a", timeout_s=60)
        self.keep(bucket, host, "connect", probe)
        if not probe.ok:
            self.reachable[host] = (probe.stderr.strip().splitlines() or [f"exit {probe.exit_status}"])[-1]
            bucket.add([could_not_run("connect", f"cannot run commands: {self.reachable[host]}", subject,
                                      Remediation.RECONFIGURE)], "connect", host, None)
            return
        sku = self.sku(spec)
        for test, kind, script, extra in self.node_tests(spec):
            if script is None:
                bucket.add([not_applicable(kinds.get(kind).check, extra or "", subject)], test, host, None)
                continue
            self.progress(f"{host}: {test}")
            limit = suites.training_timeout_s(self.suite) if kind == "training" else self.suite.timeout_s
            res = remote.run(target, script, limit, stdin=extra)
            raw = self.keep(bucket, host, test, res)
            judged = self.judge_result(kind, res, sku, subject)
            bucket.add(judged.verdicts, test, host, raw, judged.skipped, judged.emulated)
            if kind == "nccl" and judged.parsed is not None:
                self.series.append(nccl_series(judged.parsed, host, test, judged.emulated))
            if kind == "training" and judged.parsed is not None and judged.parsed.final is not None:
                self.single_training[host] = judged.parsed.final
                self.single_loss[host] = [[st.step, st.loss] for st in judged.parsed.steps]

    # ---------------------------------------------------------------- pairs

    def run_pairs(self, kind: str) -> None:
        tool = _test(kind)  # the perftest program; the test and raw-file names start with it
        names = [s.node for s in self.specs if s.node not in self.reachable]
        for rnd, pairs in enumerate(pairing_rounds(names), start=1):
            jobs = []
            for a, b in pairs:
                sa, sb = self.by_name[a], self.by_name[b]
                for i in range(min(len(sa.fabric.ports), len(sb.fabric.ports))):
                    jobs.append((a, b, i))
            self.progress(f"{tool} round {rnd}: " + ", ".join(f"{a}↔{b}" for a, b in pairs))

            def one(job: tuple[str, str, int]) -> tuple[tuple[str, str, int], CmdResult, CmdResult]:
                a, b, i = job
                sa, sb = self.by_name[a], self.by_name[b]
                server = suites.perftest_script(kind, sa, i)
                client = suites.perftest_script(kind, sb, i, suites.fabric_address(sa, i))
                srv, cli = remote.run_server_client(self.targets[a], server, self.targets[b], client,
                                                    timeout_s=min(self.suite.timeout_s, 180))
                return job, srv, cli

            with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
                for (a, b, i), srv, cli in pool.map(one, jobs):
                    hca = self.by_name[a].fabric.ports[i].hca
                    test = f"{tool}_{a}_{b}_{hca}"
                    self.keep(self.cluster, a, f"{test}_server", srv)
                    raw = self.keep(self.cluster, b, f"{test}_client", cli)
                    subject = Subject(node=f"{a}↔{b}", port=hca)
                    judged = self.judge_result(kind, cli, self.sku(self.by_name[b]), subject)
                    self.cluster.add(judged.verdicts, tool, None, raw, emulated=judged.emulated)

    # ---------------------------------------------------------------- multi-node

    def run_multi_node(self) -> None:
        """The all_reduce over MPI from the first live node, with SSH trust for this run
        only (`mpi_trust`); then, when it is slow (`localise.trigger`), the fault finding
        under the same trust."""
        live = [s for s in self.specs if s.node not in self.reachable]
        subject = Subject(node=f"{len(live)} nodes")
        head = live[0]
        test = "all_reduce_multi_node"
        with self.mpi_trust(live, test, "multi_node_busbw_gb_s", subject) as rsh:
            if rsh is None:
                return
            script = suites.multi_node_script(live, self.suite, self.record.id, rsh)
            self.progress(f"multi-node all_reduce from {head.node} over {len(live)} nodes")
            res = remote.run(self.targets[head.node], script, self.suite.timeout_s)
            raw = self.keep(self.cluster, head.node, test, res)
            judged = self.judge_result("nccl", res, self.sku(head), subject)
            self.cluster.add(judged.verdicts, test, None, raw, emulated=judged.emulated)
            if judged.parsed is not None:
                self.series.append(nccl_series(judged.parsed, f"{len(live)} nodes", test, judged.emulated))
            if self.suite.localise == "on_slow":
                why = localise.trigger(self.cluster.results, self.localise_limits(head).slow_fraction)
                if why:
                    self.run_localise(live, rsh, why)

    @contextmanager
    def mpi_trust(self, live: Sequence[NodeSpec], test: str, check: str, subject: Subject) -> Iterator[str | None]:
        """SSH trust for this run only (`gpuctl.bench.mpissh`): the key is made, placed on the
        first node of `live` and authorized on all of them; yields Open MPI's rsh options, or
        None when the trust could not be set up (a could-not-run verdict of `check` says why);
        the key is revoked on leaving, whatever happened."""
        head = live[0]

        def cannot(reason: str) -> None:  # the SSH trust could not be set up: a node or controller to fix
            self.cluster.add([could_not_run(check, reason, subject, Remediation.RECONFIGURE)], test, None, None)

        try:
            key = mpissh.generate_key(self.record.id)
        except mpissh.TrustError as exc:
            cannot(f"cannot make the run's SSH key on this machine: {exc}")
            yield None
            return
        sent: list[str] = []  # nodes the authorized_keys line went to
        authorized: dict[str, CmdResult] = {}
        placed = True  # whether the head's key folder may be this run's (then it is removed)
        try:
            self.progress(f"multi-node: SSH trust for this run ({key.marker}) on {len(live)} nodes")
            hosts = [suites.mpi_host(s) for s in live]
            setup = remote.run(self.targets[head.node], mpissh.head_setup_script(key, hosts), 60, stdin=key.private)
            self.keep(self.cluster, head.node, "mpi_ssh_key", setup)
            placed = setup.exit_status != suites.EXIT_SCRATCH_EXISTS
            if not setup.ok:
                cannot(f"cannot place the run's SSH key on {head.node}: {_reason(setup)}")
                yield None
                return
            addresses = mpissh.from_addresses(hosts, setup.stdout)
            valid_s = self.suite.timeout_s + mpissh.EXPIRY_MARGIN_S
            if self.suite.localise != "off":  # the fault finding's rounds run under the same key
                valid_s += self.suite.localise_timeout_s * localise.round_bound(len(live))
            sent = [s.node for s in live]
            authorized = remote.run_parallel(
                {s.node: (self.targets[s.node], mpissh.authorize_script(key, addresses, valid_s)) for s in live}, 60)
            for node, res in authorized.items():
                self.keep(self.cluster, node, "mpi_ssh_authorize", res)
            failed = [(node, res) for node, res in authorized.items() if not res.ok]
            if failed:
                cannot("cannot authorize the run's SSH key on "
                       + "; ".join(f"{node}: {_reason(res)}" for node, res in failed))
                yield None
                return
            yield mpissh.rsh_args(key)
        finally:
            self.revoke(key, head.node if placed else None, sent, authorized)

    # ---------------------------------------------------------------- fault finding

    def localise_limits(self, spec: NodeSpec) -> localise.Limits:
        return localise_run.limits(spec)

    def run_localise(self, live: Sequence[NodeSpec], rsh: str, why: str) -> None:
        """The fault finding (`gpuctl.bench.localise_run.run`), its result kept for bench.json."""
        self.localisation = localise_run.run(self, live, rsh, why)

    def revoke(self, key: mpissh.RunKey, head: str | None, sent: Sequence[str],
               authorized: dict[str, CmdResult]) -> None:
        """Remove the run's authorized_keys line from every node it was sent to and the key
        folder from the head (`head`, None when it is not this run's); a node where that
        fails is named in the log (its line expires on its own)."""
        nodes = list(sent) + ([head] if head is not None and head not in sent else [])
        jobs = {node: (self.targets[node],
                       mpissh.revoke_script(key, remove_if_created=node in authorized
                                            and mpissh.created(authorized[node].stdout), head=node == head))
                for node in nodes}
        results = remote.run_parallel(jobs, 60)
        for node, res in results.items():
            self.keep(self.cluster, node, "mpi_ssh_revoke", res)
            if not res.ok:
                log.warning("%s: could not remove the run's SSH key (%s): %s; it expires by itself",
                            node, key.marker, _reason(res))
                self.progress(f"{node}: could not remove the run's SSH key ({key.marker}): {_reason(res)}")

    # ---------------------------------------------------------------- training across nodes

    def run_training_multi_node(self, live: Sequence[NodeSpec]) -> None:
        """Probe every node's PyTorch, then start one torchrun launcher per node at once (c10d
        rendezvous on the first), wait for all of them (each bounded by the suite's launcher
        timeout) and judge: each launcher (`judge_launchers`) and the rank-0 output
        (`judge_training_multi_node`)."""
        test = "training_multi_node"
        subject = Subject(node=f"{len(live)} nodes")
        head = live[0]
        endpoint = suites.rdzv_endpoint(head, self.suite.training_rdzv_port)
        self.training = {"nodes": [s.node for s in live], "endpoint": endpoint, "head": head.node,
                         "size": self.suite.training_size, "steps": self.suite.training_steps}
        probes = remote.run_parallel({s.node: (self.targets[s.node], suites.torch_probe_script(self.env_path(s)))
                                      for s in live}, self.suite.training_probe_timeout_s)
        found: dict[str, TorchProbe] = {}
        problems: list[str] = []
        for node, res in probes.items():
            self.keep(self.cluster, node, "training_probe", res)
            try:
                found[node] = parse_torch_probe(res.stdout)
            except ParseError as exc:
                problems.append(f"{node}: {_reason(res) if not res.ok else exc}")
        if problems:
            self.cluster.add([could_not_run("training", "cannot tell which PyTorch to run with: " + "; ".join(problems),
                                            subject, Remediation.RECONFIGURE)], test, None, None)
            return
        self.training["versions"] = {node: {"python": p.python, "torch": p.torch, "cuda": p.cuda, "nccl": p.nccl,
                                            "gpus": p.gpus} for node, p in found.items()}
        skipped = [f"{node}: {p.skipped}" for node, p in found.items() if p.skipped]
        if skipped:
            self.cluster.add([not_applicable("training", "skipped: " + "; ".join(skipped), subject)], test, None, None)
            return
        cuda = {node: p.cuda_available for node, p in found.items()}
        if len(set(cuda.values())) > 1:
            self.cluster.add([could_not_run(
                "training", "the nodes' PyTorch differ: CUDA on " + ", ".join(n for n, c in cuda.items() if c)
                + ", none on " + ", ".join(n for n, c in cuda.items() if not c), subject, Remediation.RECONFIGURE)],
                test, None, None)
            return
        on_gpu = all(cuda.values())
        short = [f"{s.node}: PyTorch sees {found[s.node].gpus} GPUs, the SKU has {s.hardware.gpu_count}"
                 for s in live if on_gpu and found[s.node].gpus < s.hardware.gpu_count]
        if short:
            self.cluster.add([could_not_run("training", "; ".join(short), subject, Remediation.RECONFIGURE)],
                             test, None, None)
            return
        peak = self.loaded.sku.dense_bf16_tflops.value
        argvs = {s.node: suites.torchrun_argv(found[s.node].python, s, live, self.suite, self.train_id, peak, on_gpu)
                 for s in live}
        self.training["argv"] = argvs
        program = program_text("train_smoke.py")
        limit = self.suite.training_launch_timeout_s
        self.progress(f"training across {len(live)} nodes: torchrun, rendezvous at {endpoint} on {head.node}")
        # once one launcher has failed the others are given the per-collective timeout (+30 s)
        # to report their own error, then stopped: the run never waits out the full limit
        results = remote.run_parallel_watched(
            {s.node: (self.targets[s.node], suites.training_multi_node_script(s, live, argvs[s.node], self.train_id))
             for s in live}, limit, stdin={s.node: program for s in live},
            grace_s=self.suite.training_step_timeout_s + 30)
        launches: list[Launch] = []
        rank0: tuple[str, str, str] | None = None  # (node, raw path, stdout) of the launcher that printed rank 0
        raws: dict[str, str] = {}
        for s in live:
            res = results[s.node]
            raws[s.node] = self.keep(self.cluster, s.node, test, res)
            launches.append(Launch(s.node, res.exit_status, res.timed_out, res.duration_s, limit,
                                   parse_launcher_log(res.stdout, res.stderr),
                                   _reason(res) if res.unreachable else None,
                                   (res.stderr.strip().splitlines() or [""])[-1][:240], res.stopped))
            if rank0 is None and any(line.startswith(('{"step"', '{"final"', '{"skipped"'))
                                     for line in res.stdout.splitlines()):
                rank0 = (s.node, raws[s.node], res.stdout)
        self.cluster.add(judge_launchers(launches, endpoint, head.node, subject), "training_launchers", None, None)
        if rank0 is None:
            failed = [x.node for x in launches if x.timed_out or x.exit_status != 0]
            self.cluster.add([could_not_run("training", "no launcher printed the run's output (rank 0)"
                                            + (f"; failed on {', '.join(failed)}" if failed else ""),
                                            subject, Remediation.RERUN)], test, None, None)
            return
        node0, raw0, text = rank0
        try:
            result = parse_training_log(text)
        except ParseError as exc:
            self.cluster.add([could_not_run("training", f"rank 0 on {node0}: {exc}", subject, Remediation.RERUN)],
                             test, None, raw0)
            return
        if result.skipped is not None:
            self.cluster.add([not_applicable("training", f"skipped: {result.skipped}", subject)], test, None, raw0)
            return
        sku = self.sku(head)
        self.cluster.add(judge_training_multi_node(result, sku, subject, self.single_training), test, None, raw0)
        self.training.update(training_summary(result, node0, self.single_training, self.single_loss))

    # ---------------------------------------------------------------- all

    def run(self) -> dict[str, Any]:
        started = now_iso()
        with ThreadPoolExecutor(max_workers=max(1, len(self.specs))) as pool:
            list(pool.map(self.run_node, self.specs))
        live = [s for s in self.specs if s.node not in self.reachable]
        cluster_subject = Subject(node=CLUSTER)
        fabric = self.specs[0].fabric
        if self.suite.ib:
            if fabric.type == "none":
                for check in ("ib_write_bw_gbit_s", "ib_write_lat_us"):
                    self.cluster.add([not_applicable(check, "no RDMA fabric in the inventory", cluster_subject)],
                                     check, None, None)
            elif len(self.specs) < 2:
                for check in ("ib_write_bw_gbit_s", "ib_write_lat_us"):
                    self.cluster.add([not_applicable(check, "one node: no pair to measure", cluster_subject)],
                                     check, None, None)
            elif len(live) < 2:
                self.cluster.add([could_not_run("ib_write_bw_gbit_s", "fewer than two reachable nodes",
                                                cluster_subject)], "ib_write_bw", None, None)
            else:
                self.run_pairs("ib_write_bw")
                self.run_pairs("ib_write_lat")
        if self.suite.multi_node:
            if len(self.specs) < 2:
                self.cluster.add([not_applicable("multi_node_busbw_gb_s", "one node: no multi-node run",
                                                 cluster_subject)], "all_reduce_multi_node", None, None)
            elif len(live) < 2:
                self.cluster.add([could_not_run("multi_node_busbw_gb_s", "fewer than two reachable nodes",
                                                cluster_subject)], "all_reduce_multi_node", None, None)
            else:
                self.run_multi_node()
        if self.suite.localise == "always":
            if len(self.specs) < 2:
                self.cluster.add([not_applicable("fault_finding", "one node: no pair to compare", cluster_subject)],
                                 "fault_finding", None, None)
            elif len(live) < 2:
                self.cluster.add([could_not_run("fault_finding", "fewer than two reachable nodes", cluster_subject)],
                                 "fault_finding", None, None)
            else:
                with self.mpi_trust(live, "fault_finding", "fault_finding", Subject(node=f"{len(live)} nodes")) as rsh:
                    if rsh is not None:
                        self.run_localise(live, rsh, "asked for (--suite localise)")
        if self.suite.training and self.suite.training_multi_node:
            if len(self.specs) < 2:
                self.cluster.add([not_applicable("training", "one node: no multi-node training run", cluster_subject)],
                                 "training_multi_node", None, None)
            elif len(live) < 2:
                self.cluster.add([could_not_run("training", "fewer than two reachable nodes", cluster_subject)],
                                 "training_multi_node", None, None)
            else:
                self.run_training_multi_node(live)
        every = [v for b in self.hosts.values() for v in b.verdicts] + self.cluster.verdicts
        return {
            "suite": self.suite.name,
            "run_id": self.record.id,
            "started": started,
            "finished": now_iso(),
            "status": overall(every).value,
            "inventory": inventory_summary(self.loaded, self.specs),
            "matrix": matrix_summary(self.specs[0]),
            "thresholds": thresholds_summary(self.specs[0]),
            "pairing": [[list(p) for p in rnd] for rnd in pairing_rounds([s.node for s in self.specs])],
            # each node's own effective thresholds (the top-level ones, the first node's, judge the
            # cluster rows); the report shows a node's rows against its own
            "hosts": {name: {**b.as_dict(), "thresholds": thresholds_summary(self.by_name[name])}
                      for name, b in self.hosts.items()},
            "cluster": self.cluster.as_dict(),
            "nccl_series": sorted(self.series, key=lambda x: ("multi" in x["test"], x["label"], x["test"])),
            "training": self.training,
            "localisation": self.localisation,
        }


def _reason(res: CmdResult) -> str:
    """The last line a failed command said, or its exit status (`CmdResult.reason`)."""
    return res.reason()


def _test(kind: str) -> str:
    """The bench's test (and raw-file) name of a run of `kind` (`ToolKind.bench_test`)."""
    return kinds.get(kind).bench_test or kind


def train_env_path(spec: NodeSpec) -> str:
    """roles/train_env's `train_env_path` for this node (inventory role_vars, else the role's
    default), read through the one knob reader `gpuctl.spec.train_env_knob`."""
    return str(train_env_knob(spec, "train_env_path"))


def training_summary(result: TrainingResult, node0: str, single: dict[str, TrainingFinal],
                     single_loss: dict[str, list[list[float]]] | None = None) -> dict[str, Any]:
    """The multi-node run's figures for bench.json: loss per step, every rank's node and
    checksum (and whether it differs from the majority's), tokens/s (all ranks, per rank), the
    per-node figures it is compared with (tokens/s, loss per step), and the torch / CUDA / NCCL
    versions that ran."""
    final = result.final
    assert final is not None  # only called with a finished run
    majority = final.majority_checksum
    return {
        "rank0_node": node0,
        "loss": [[s.step, s.loss] for s in result.steps],
        "ranks": [{"rank": r.rank, "node": r.node, "host": r.host, "checksum": r.checksum,
                   "differs": r.checksum != majority} for r in final.ranks],
        "ranks_agree": final.ranks_agree,
        "world_size": final.world_size,
        "model": final.model,
        "backend": final.backend,
        "tokens_per_s": final.tokens_per_s,
        "tokens_per_s_per_rank": round(final.tokens_per_s_per_rank, 1),
        "single_node_tokens_per_s": {node: f.tokens_per_s for node, f in sorted(single.items())},
        "single_node_loss": dict(sorted((single_loss or {}).items())),
        "ran": {"torch": final.torch_version, "cuda": final.cuda_version, "nccl": final.nccl_version},
    }


def run_bench(loaded: LoadedInventory, specs: Sequence[NodeSpec], suite: suites.Suite, record: RunRecord,
              targets: dict[str, SshTarget] | None = None, progress: Progress | None = None,
              train_env: str | None = None) -> BenchStage:
    """Run `suite` on `specs`, write `stages/bench.json` and return it as the typed result
    (`gpuctl.results.BenchStage`, what the report, turnkey, rebuild and the CLI read).

    Shape: {suite, run_id, started, finished, status, inventory{path, sha256, cluster, sku, os,
    matrix, nodes, gpus_per_node, gpu_model}, thresholds{name: {min|max, warn_below|warn_above,
    not_applicable, source}} (the first node's effective ones, for the cluster rows), matrix{name,
    driver, components[{component, version, enabled, reason, packages[{name, version, pin}]}]},
    pairing[[[a, b], …] per round], hosts{name: {status, results[…], tests[…], thresholds{…} (the
    node's own)}}, cluster{status, results, tests},
    nccl_series[{label, test, gpus, points[[size_bytes, busbw_gb_s], …]}], training{nodes, endpoint,
    head, versions{node: {python, torch, cuda, nccl, gpus}}, argv{node: [...]}, rank0_node, loss[[step, loss]],
    ranks[{rank, node, host, checksum, differs}], ranks_agree, world_size, model, backend, tokens_per_s,
    tokens_per_s_per_rank, single_node_tokens_per_s{node: …}, single_node_loss{node: [[step, loss]]},
    ran{torch, cuda, nccl}} (empty when the run across nodes did not start; partial when it failed)},
    localisation{nodes, trigger, rounds, bound, findings[{kind, nodes, message, evidence[step index], hcas,
    interfaces, rail_note}], steps[{round, stage, kind, nodes, rail, value, unit, reference, floor, slow, error,
    raw, text}], limits, slow_fraction, slow_fraction_source} (empty when the fault finding did not run);
    every result is
    a verdict (check, status, subject, value, threshold, unit, source, remediation, message)
    plus test, host, raw (and skipped when the tool reported it could not start)."""
    # written through the typed result the report reads (gpuctl.results.BenchStage)
    stage = bench_stage(BenchRun(loaded, specs, suite, record, targets, progress, train_env).run())
    record.stage("bench", stage.dump())
    return stage
