"""The training run across nodes (issue 16 item 5): one torchrun launcher per node, c10d
rendezvous on the first node, judged per launcher and on rank 0's output.

Unit cases: the launch commands (built and quoted in one place, one per node, the
rendezvous on the first node), the parsers of the probe and of torchrun's failure output
(real outputs recorded on this machine, tests/data/fixtures/training/SOURCES.md), and the
judging (ranks disagree, loss flat, a launcher stopped, scaling below the floor, CPU
reported not judged). Real cases (`slow`, skipped without a python that has torch: set
GPUCTL_TORCH_PYTHON): two launchers on 127.0.0.1 as two "nodes" through the bench itself
(`@local` targets, gloo, one rank per node), one rank's weights made different, the
rendezvous port taken, and a node that cannot be reached."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from gpuctl.bench import suites
from gpuctl.bench.remote import SshTarget, run_parallel_watched
from gpuctl.bench.run import BenchRun
from gpuctl.catalog import THRESHOLD_NAMES, Threshold, load_sku
from gpuctl.errors import ParseError
from gpuctl.inventory import load_inventory
from gpuctl.parsers.nccl import nccl_problems
from gpuctl.parsers.training import (
    LauncherLog,
    TrainingFinal,
    parse_launcher_log,
    parse_torch_probe,
    parse_training_log,
)
from gpuctl.runrecord import RunRecord
from gpuctl.spec import NodeSpec, resolve
from gpuctl.verdicts import (
    Launch,
    Status,
    Subject,
    judge_launchers,
    judge_scaling_efficiency,
    judge_training_multi_node,
)

ROOT = Path(__file__).parents[2]
FIX = ROOT / "tests" / "data" / "fixtures" / "training"
LAB_INVENTORY = ROOT / "tests" / "data" / "inventories" / "lab-placeholder.yaml"
SUBJECT = Subject(node="2 nodes")


@pytest.fixture(scope="module")
def ib_specs() -> list[NodeSpec]:
    return resolve(load_inventory(ROOT / "inventories" / "h100-8x4.yaml"))


@pytest.fixture(scope="module")
def lab_specs() -> list[NodeSpec]:
    return resolve(load_inventory(LAB_INVENTORY))


SUITE = suites.SUITES["acceptance"]


# ---------------------------------------------------------------- launch commands


def test_one_launcher_per_node_rendezvous_on_the_first(ib_specs: list[NodeSpec]) -> None:
    argvs = [suites.torchrun_argv("/opt/gpuctl/train-env/bin/python", s, ib_specs, SUITE, "RUN1", 989.0, True)
             for s in ib_specs]
    assert len(argvs) == len(ib_specs) == 4
    for spec, argv in zip(ib_specs, argvs, strict=True):
        assert argv[:3] == ["/opt/gpuctl/train-env/bin/python", "-m", "torch.distributed.run"]
        opt = dict(zip(argv[3:19:2], argv[4:19:2], strict=True))
        assert opt["--nnodes"] == "4" and opt["--nproc-per-node"] == "8"
        assert opt["--rdzv-backend"] == "c10d"
        assert opt["--rdzv-endpoint"] == "192.168.1.11:29400"  # the first node's first fabric address
        assert opt["--rdzv-id"] == "RUN1" and opt["--max-restarts"] == "0"
        assert opt["--rdzv-conf"] == (f"join_timeout=180,read_timeout=60,is_host={int(spec is ib_specs[0])}")
        assert opt["--local-addr"] == suites.mpi_host(spec)
        assert argv[19] == f"/tmp/gpuctl-bench/RUN1/{spec.node}/train_smoke.py"
        assert argv[20:] == ["--steps", "60", "--model", "gpt", "--size", "small", "--step-timeout-s", "120",
                             "--peak-tflops", "989"]
    # the per-node run trains the same model with the same options (the scaling baseline)
    single = shlex.split(suites.training_script(ib_specs[1], SUITE, "RUN1", 989.0).splitlines()[-1])
    assert single[-10:] == argvs[1][-10:]


def test_cpu_ranks_per_node_and_the_llama_shape(lab_specs: list[NodeSpec]) -> None:
    suite = replace(SUITE, training_cpu_ranks_per_node=2, training_model="llama", training_rdzv_port=29555)
    argv = suites.torchrun_argv("python3", lab_specs[1], lab_specs, suite, "RUN1", 989.0, False)
    assert argv[argv.index("--nproc-per-node") + 1] == "2"
    assert argv[argv.index("--model") + 1] == "llama"
    assert argv[argv.index("--rdzv-endpoint") + 1] == "192.168.50.11:29555"
    assert argv[argv.index("--local-addr") + 1] == "192.168.50.12"


def test_ipv6_endpoint_in_brackets(lab_specs: list[NodeSpec]) -> None:
    spec = lab_specs[0].model_copy(update={"fabric": lab_specs[0].fabric.model_copy(update={"ports": ()}),
                                           "address": "fd00::11"})
    assert suites.rdzv_endpoint(spec, 29400) == "[fd00::11]:29400"


def test_launcher_script_quotes_everything_and_carries_the_nccl_env(ib_specs: list[NodeSpec]) -> None:
    python = "/opt/train env/bin/python"  # a path with a blank survives as one word
    argv = suites.torchrun_argv(python, ib_specs[2], ib_specs, SUITE, "2026-12-05T17:00:00Z-bench", 989.0, True)
    script = suites.training_multi_node_script(ib_specs[2], ib_specs, argv, "2026-12-05T17:00:00Z-bench")
    last = shlex.split(script.strip().splitlines()[-1])
    assert last[0] == "exec" and last[1] == "env"
    env = dict(w.split("=", 1) for w in last[2:last.index(python)])
    assert last[last.index(python):] == argv
    # the same NCCL settings as the multi-node nccl-tests (one function builds both)
    assert {k: v for k, v in env.items() if k.startswith("NCCL_")} == suites.mpi_env(ib_specs)
    assert env["GPUCTL_NODE"] == ib_specs[2].node
    assert env["GLOO_SOCKET_IFNAME"] == ib_specs[2].fabric.ports[0].interface
    assert argv[argv.index("--rdzv-id") + 1] == "2026-12-05T17_00_00Z-bench"
    assert f"cat > {shlex.quote(f'/tmp/gpuctl-bench/2026-12-05T17:00:00Z-bench/{ib_specs[2].node}/train_smoke.py')}" \
        in script


def test_probe_script_prefers_the_training_environment() -> None:
    script = suites.torch_probe_script("/srv/my env")
    assert "if [ -x '/srv/my env/bin/python' ]; then gpuctl_py='/srv/my env/bin/python'; fi" in script
    assert '"$gpuctl_py" - <<\'GPUCTL_PROBE\'' in script


# ---------------------------------------------------------------- parsing


def test_probe_lines() -> None:
    p = parse_torch_probe('{"python": "/opt/gpuctl/train-env/bin/python", "torch": "2.9.1+cu128", "cuda": "12.8",'
                          ' "cuda_available": true, "gpus": 8, "nccl": "2.27.3"}\n')
    assert (p.torch, p.cuda, p.gpus, p.nccl, p.skipped) == ("2.9.1+cu128", "12.8", 8, "2.27.3", None)
    assert parse_torch_probe('{"skipped": "no PyTorch", "python": "/usr/bin/python3"}').skipped == "no PyTorch"
    for bad in ["", "bash: python3: command not found\n", '{"python": "x"}', "[1, 2]"]:
        with pytest.raises(ParseError):
            parse_torch_probe(bad)


def _log(name: str) -> LauncherLog:
    out = FIX / f"{name}.stdout"
    return parse_launcher_log(out.read_text() if out.exists() else "", (FIX / f"{name}.stderr").read_text())


def test_launcher_logs_of_real_failures() -> None:
    killed = _log("torchrun-gloo-2node-rank-sigkill-cpu-real")
    assert [(f.rank, f.local_rank, f.exitcode, f.signal) for f in killed.failures] == [(0, 0, -9, "SIGKILL")]
    assert killed.summary() == "rank 0 (local rank 0) killed by SIGKILL"
    peer = _log("torchrun-gloo-2node-peer-killed-cpu-real")
    assert [(f.rank, f.exitcode, f.signal) for f in peer.failures] == [(1, 1, None)]
    assert peer.failures[0].error.startswith("RuntimeError: [") and "Connection reset by peer" in peer.failures[0].error
    timeout = _log("torchrun-rdzv-timeout-missing-node-cpu-real")
    assert timeout.rendezvous_error == "RendezvousTimeoutError" and not timeout.failures
    store = _log("torchrun-rdzv-store-unreachable-cpu-real")
    assert store.rendezvous_error is not None and store.rendezvous_error.startswith("RendezvousConnectionError: ")
    assert "trying to connect to (127.0.0.1, 29749)" in store.rendezvous_error
    assert parse_launcher_log("", "") == LauncherLog(None, (), (), ())


def test_nccl_errors_in_a_training_log_are_named_by_the_nccl_parser() -> None:
    text = (FIX / "torch-nccl-errors-excerpt-public.stderr").read_text()
    found = nccl_problems(text)
    assert "NCCL WARN [Service thread] Could not receive type from localRank 2, res=3, closed=0" in found
    assert any(f.startswith("NCCL error in: ") and "unhandled system error" in f for f in found)
    assert "Last error: socketStartConnect: Connect to 192.168.19.14<52822> failed : No route to host" in found
    log = parse_launcher_log("", text)
    assert log.nccl == found and "NCCL: " in log.summary()


# ---------------------------------------------------------------- judging


def _final(**kw: object) -> TrainingFinal:
    base = parse_training_log((FIX / "torchrun-gloo-2node-pass-cpu-real.stdout").read_text()).final
    assert base is not None
    return replace(base, **kw)


def _gpu(final: TrainingFinal, tokens_per_s: float, world: int) -> TrainingFinal:
    return replace(final, backend="nccl", device="NVIDIA H100 80GB HBM3", dtype="bf16", tokens_per_s=tokens_per_s,
                   world_size=world, model_flops_per_token=6.2e8,
                   mfu_model=(("d_model", 768), ("layers", 12), ("model", "gpt"), ("seq", 1024)))


def _launch(node: str, exit_status: int = 0, timed_out: bool = False, log: LauncherLog | None = None,
            unreachable: str | None = None) -> Launch:
    return Launch(node, exit_status, timed_out, 12.0, 900, log or LauncherLog(None, (), (), ()), unreachable)


def test_launcher_that_timed_out_fails_naming_its_node() -> None:
    got = judge_launchers([_launch("gpu-01"), _launch("gpu-02", 124, True)], "192.168.50.11:29400", "gpu-01", SUBJECT)
    assert [(v.check, v.status, v.subject.node) for v in got] == [("train_launcher", Status.FAIL, "gpu-02")]
    assert "gpu-02: the training launcher did not finish within 900 s" in got[0].message
    ok = judge_launchers([_launch("gpu-01"), _launch("gpu-02")], "192.168.50.11:29400", "gpu-01", SUBJECT)
    assert [(v.status, v.value) for v in ok] == [(Status.PASS, 2)]


def test_failed_rank_and_unreachable_rendezvous_name_their_nodes() -> None:
    got = judge_launchers([_launch("gpu-01", 1, log=_log("torchrun-gloo-2node-peer-killed-cpu-real")),
                           _launch("gpu-02", 1, log=_log("torchrun-gloo-2node-rank-sigkill-cpu-real")),
                           _launch("gpu-03", 1, log=_log("torchrun-rdzv-store-unreachable-cpu-real")),
                           _launch("gpu-04", 255, unreachable="ssh: connect to host 10.0.0.14 port 22: No route")],
                          "192.168.1.11:29400", "gpu-01", SUBJECT)
    msg = {v.subject.node: v.message for v in got}
    assert set(msg) == {"gpu-01", "gpu-02", "gpu-03", "gpu-04"}
    # gpu-01's rank lost its peer ("Connection reset by peer"): a consequence of the others' failures
    assert {v.subject.node: v.status for v in got} == {"gpu-01": Status.ERROR, "gpu-02": Status.FAIL,
                                                        "gpu-03": Status.FAIL, "gpu-04": Status.FAIL}
    assert "a consequence of the failure on gpu-02, gpu-03, gpu-04" in msg["gpu-01"]
    assert "rank 0 (local rank 0) killed by SIGKILL" in msg["gpu-02"]
    assert "rank 1 (local rank 0) exited with code 1: RuntimeError" in msg["gpu-01"]
    assert "RendezvousConnectionError" in msg["gpu-03"] and "at 192.168.1.11:29400 on gpu-01" in msg["gpu-03"]
    assert "could not be started: ssh: connect to host" in msg["gpu-04"]


def _result(final: TrainingFinal, losses: list[float]):
    good = parse_training_log((FIX / "torchrun-gloo-2node-pass-cpu-real.stdout").read_text())
    steps = tuple(replace(good.steps[0], step=i, loss=loss) for i, loss in enumerate(losses))
    return replace(good, steps=steps, final=final)


FALLS = [3.5, 3.4, 3.3, 3.0, 2.6, 2.4]


def _checks(result, single: dict[str, TrainingFinal], sku_name: str = "hgx-h100-80gb") -> dict[str, object]:
    return {v.check: v for v in judge_training_multi_node(result, load_sku(sku_name), SUBJECT, single)}


def test_ranks_disagree_fails_naming_each_rank_and_node() -> None:
    final = _final()
    bad = replace(final, param_checksum_per_rank=("aaaa", "bbbb"),
                  ranks=(replace(final.ranks[0], checksum="aaaa"), replace(final.ranks[1], checksum="bbbb")))
    got = _checks(_result(bad, FALLS), {"gpu-01": final})
    v = got["train_ranks_agree"]
    assert v.status is Status.FAIL
    assert "rank 0 on node1 (vm): aaaa" in v.message and "rank 1 on node0 (vm): bbbb" in v.message
    assert _checks(_result(final, FALLS), {"gpu-01": final})["train_ranks_agree"].status is Status.PASS


def test_loss_that_does_not_fall_fails() -> None:
    final = _final()
    assert _checks(_result(final, [3.5, 3.5, 3.5, 3.49, 3.5, 3.48]), {})["train_loss_falls"].status is Status.FAIL
    assert _checks(_result(final, FALLS), {})["train_loss_falls"].status is Status.PASS


def test_scaling_efficiency_against_the_sku_floor() -> None:
    one = _gpu(_final(), 400_000.0, 8)  # one node, 8 GPUs: 50k tokens/s per GPU
    single = {"gpu-01": one, "gpu-02": replace(one, tokens_per_s=380_000.0)}  # mean 48.75k per GPU
    sku = load_sku("hgx-h100-80gb")
    floor = sku.thresholds["train_scaling_efficiency"]
    assert floor.min == 0.8 and floor.warn_below == 0.9 and "Horovod" in floor.source
    good = judge_scaling_efficiency(_gpu(_final(), 2 * 8 * 46_000.0, 16), single, sku, SUBJECT)
    assert good.status is Status.PASS and good.value == pytest.approx(46_000 / 48_750, abs=1e-4)
    warn = judge_scaling_efficiency(_gpu(_final(), 16 * 42_000.0, 16), single, sku, SUBJECT)
    assert warn.status is Status.WARN
    bad = judge_scaling_efficiency(_gpu(_final(), 16 * 30_000.0, 16), single, sku, SUBJECT)
    assert bad.status is Status.FAIL and bad.threshold == 0.8 and bad.source == floor.source
    assert "480,000 tokens/s on 16 ranks vs 48,750 tokens/s per rank alone" in bad.message
    impossible = sku.model_copy(update={"thresholds": {**sku.thresholds, "train_scaling_efficiency":
                                                       Threshold(min=1.5, source="impossible floor")}})
    assert judge_scaling_efficiency(_gpu(_final(), 2 * 8 * 46_000.0, 16), single, impossible,
                                    SUBJECT).status is Status.FAIL
    # no per-node figure, or one of another model: could not be computed, never a pass
    assert judge_scaling_efficiency(one, {}, sku, SUBJECT).status is Status.ERROR
    llama = {"gpu-01": replace(one, model="llama")}
    assert judge_scaling_efficiency(one, llama, sku, SUBJECT).status is Status.ERROR


def test_scaling_efficiency_on_cpu_is_reported_not_judged() -> None:
    final = _final()  # gloo, 2 ranks, 11522.7 tokens/s
    single = {"gpu-01": replace(final, tokens_per_s=8000.0, world_size=2)}
    v = judge_scaling_efficiency(final, single, load_sku("hgx-h100-80gb"), SUBJECT)
    assert v.status is Status.NOT_APPLICABLE and v.value == pytest.approx(11522.7 / 8000.0, abs=1e-4)
    assert "reported, not judged" in v.message
    per_gpu = _checks(_result(final, FALLS), single)["train_tokens_per_s_per_gpu"]
    assert per_gpu.status is Status.NO_THRESHOLD and per_gpu.value == pytest.approx(11522.7 / 2, abs=0.1)


def test_every_sku_has_the_scaling_floor() -> None:
    assert "train_scaling_efficiency" in THRESHOLD_NAMES


def test_watchdog_stops_the_others_once_one_launcher_failed(tmp_path: Path) -> None:
    """The launchers only succeed together: after one fails, the others get the grace period,
    then are stopped (their whole process group) and say whose failure stopped them."""
    local = {n: SshTarget(name=n, address="@local") for n in ("gpu-01", "gpu-02", "gpu-03")}
    marker = tmp_path / "still-running"
    jobs = {"gpu-01": (local["gpu-01"], "sleep 1; echo 'RendezvousTimeoutError' >&2; exit 1"),
            "gpu-02": (local["gpu-02"], f"cat > /dev/null; sleep 60; touch {shlex.quote(str(marker))}"),
            "gpu-03": (local["gpu-03"], "echo fine")}
    started = time.monotonic()
    got = run_parallel_watched(jobs, timeout_s=120, stdin={"gpu-02": "program text\n"}, grace_s=2)
    assert time.monotonic() - started < 20
    assert got["gpu-01"].exit_status == 1 and not got["gpu-01"].timed_out
    assert got["gpu-02"].timed_out and got["gpu-02"].stopped is not None and "gpu-01 failed" in got["gpu-02"].stopped
    assert got["gpu-03"].ok and got["gpu-03"].stopped is None
    time.sleep(1)
    assert not marker.exists()  # the stopped job's children went with it
    launches = [Launch(n, r.exit_status, r.timed_out, r.duration_s, 120, parse_launcher_log(r.stdout, r.stderr),
                       None, "", r.stopped) for n, r in got.items()]
    msg = {v.subject.node: v.message for v in judge_launchers(launches, "10.0.0.11:29400", "gpu-01", SUBJECT)}
    assert set(msg) == {"gpu-01", "gpu-02"}
    assert "rendezvous failed: RendezvousTimeoutError" in msg["gpu-01"]
    assert "was stopped (gpu-01 failed" in msg["gpu-02"]


# ---------------------------------------------------------------- real: two launchers on this machine


def _torch_python() -> str | None:
    explicit = os.environ.get("GPUCTL_TORCH_PYTHON")
    if explicit and shutil.which(explicit):
        return explicit
    return sys.executable if importlib.util.find_spec("torch") else None


needs_torch = pytest.mark.skipif(_torch_python() is None, reason="no python with PyTorch (set GPUCTL_TORCH_PYTHON)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _local_two_nodes(tmp_path: Path) -> list[NodeSpec]:
    """The lab inventory with both nodes on 127.0.0.1 and no fabric: the rendezvous and gloo
    run over this machine's loopback."""
    doc = yaml.safe_load(LAB_INVENTORY.read_text())
    doc["fabric"] = {"type": "none"}
    doc.pop("vlans", None)
    for node in doc["nodes"]:
        node.pop("fabric_ips", None)
        node.pop("vlan_ips", None)
    path = tmp_path / "local-2node.yaml"
    path.write_text(yaml.safe_dump(doc))
    return resolve(load_inventory(path))


def _bench(tmp_path: Path, specs: list[NodeSpec], suite: suites.Suite,
           targets: dict[str, SshTarget] | None = None) -> BenchRun:
    python = _torch_python()
    assert python is not None
    loaded = load_inventory(tmp_path / "local-2node.yaml")
    record = RunRecord.create("bench", loaded.path, root=tmp_path / "runs")
    targets = targets or {s.node: SshTarget(name=s.node, address="@local") for s in specs}
    # the venv's own path (not resolved: its bin/python is a link out of the venv)
    return BenchRun(loaded, specs, suite, record, targets, train_env=str(Path(python).parent.parent))


def _suite(**kw: object) -> suites.Suite:
    base = replace(suites.SUITES["quick"], nccl_tests=(), multi_node=False, bwprobe=False, ib=False, fio=False,
                   gdsio=False, dcgm=False, training=True, training_steps=16, training_cpu_ranks_per_node=1,
                   training_rdzv_timeout_s=60, training_step_timeout_s=60, training_launch_timeout_s=240,
                   training_rdzv_port=_free_port())
    return replace(base, **kw)


@pytest.mark.slow
@needs_torch
def test_real_two_launchers_on_this_machine(tmp_path: Path) -> None:
    specs = _local_two_nodes(tmp_path)
    bench = _bench(tmp_path, specs, _suite())
    started = time.monotonic()
    data = bench.run()
    took = time.monotonic() - started
    got = {r["check"]: r for r in data["cluster"]["results"]}
    assert got["train_launcher"]["status"] == "pass", got
    assert got["train_loss_falls"]["status"] == "pass", got["train_loss_falls"]
    assert got["train_ranks_agree"]["status"] == "pass"
    assert "rank 0 on gpu-0" in got["train_ranks_agree"]["message"]
    assert got["train_scaling_efficiency"]["status"] == "not-applicable"  # gloo on CPU: reported
    assert isinstance(got["train_scaling_efficiency"]["value"], float)
    training = data["training"]
    assert {r["node"] for r in training["ranks"]} == {"gpu-01", "gpu-02"} and training["world_size"] == 2
    assert training["backend"] == "gloo" and training["ranks_agree"]
    assert set(training["single_node_tokens_per_s"]) == {"gpu-01", "gpu-02"}
    # what the report draws and marks: each node's own loss curve, no rank differs
    assert {n: len(v) for n, v in training["single_node_loss"].items()} == {"gpu-01": 16, "gpu-02": 16}
    assert [r["differs"] for r in training["ranks"]] == [False, False]
    print(f"\n2 launchers x 1 rank, gloo: {training['tokens_per_s']} tokens/s, "
          f"per node alone (2 ranks each) {training['single_node_tokens_per_s']}, "
          f"efficiency {got['train_scaling_efficiency']['value']}, loss {training['loss'][0][1]} -> "
          f"{training['loss'][-1][1]}, {took:.0f} s in all")


@pytest.mark.slow
@needs_torch
def test_real_one_rank_different_fails_ranks_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = _local_two_nodes(tmp_path)
    monkeypatch.setenv("GPUCTL_TRAIN_TEST_CORRUPT_RANK", "1")  # the @local launchers inherit it
    bench = _bench(tmp_path, specs, _suite(training_steps=8))
    bench.run_training_multi_node(specs)
    got = {v.check: v for v in bench.cluster.verdicts}
    assert got["train_launcher"].status is Status.PASS
    assert got["train_ranks_agree"].status is Status.FAIL
    assert "(differs)" in got["train_ranks_agree"].message
    assert got["train_scaling_efficiency"].status is Status.ERROR  # no per-node run in this test
    # the node-scoped knob (what a lab fault sets in one node's environment): local rank 1 of
    # a one-machine run
    monkeypatch.delenv("GPUCTL_TRAIN_TEST_CORRUPT_RANK")
    python = _torch_python()
    assert python is not None
    proc = subprocess.run([python, str(ROOT / "gpuctl" / "bench" / "programs" / "train_smoke.py"), "--steps", "3",
                           "--cpu-nproc", "2", "--device", "cpu"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GPUCTL_TRAIN_TEST_CORRUPT_LOCAL_RANK": "1"})
    final = parse_training_log(proc.stdout).final
    assert final is not None and not final.ranks_agree, proc.stderr[-2000:]


@pytest.mark.slow
@needs_torch
def test_real_blocked_rendezvous_port_fails_in_time_naming_the_nodes(tmp_path: Path) -> None:
    """The rendezvous port on the first node is taken by something that accepts and never
    answers: the first node cannot host the store (it fails at once, naming the rendezvous);
    the second connects to the squatter and waits for an answer that never comes, so the
    watchdog stops its launcher once the first has failed and the grace period (the step
    timeout + 30 s) is over, naming it. Nothing hangs."""
    specs = _local_two_nodes(tmp_path)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(16)
        port = squatter.getsockname()[1]
        suite = _suite(training_rdzv_port=port, training_rdzv_timeout_s=20, training_step_timeout_s=10,
                       training_launch_timeout_s=200)
        bench = _bench(tmp_path, specs, suite)
        started = time.monotonic()
        bench.run_training_multi_node(specs)
        took = time.monotonic() - started
    launchers = {v.subject.node: v for v in bench.cluster.verdicts if v.check == "train_launcher"}
    assert set(launchers) == {"gpu-01", "gpu-02"} and launchers["gpu-01"].status is Status.FAIL
    assert "rendezvous failed: " in launchers["gpu-01"].message, launchers["gpu-01"].message
    second = launchers["gpu-02"].message
    assert "rendezvous failed: " in second or "was stopped (gpu-01 failed" in second, second
    # stopped by the watchdog after gpu-01 failed hosting the store: gpu-01's fault, not gpu-02's
    if "was stopped (gpu-01 failed" in second:
        assert launchers["gpu-02"].status is Status.ERROR and "a consequence of the failure on gpu-01" in second
    assert "on gpu-01" in second
    assert took < 120, took  # gpu-01's failure + the 40 s grace, far under the 200 s launcher limit
    assert any(v.check == "training" and v.status is Status.ERROR for v in bench.cluster.verdicts)


def test_unreachable_second_node_is_named_before_any_launch(tmp_path: Path) -> None:
    """A node that cannot be reached is named at the probe, within ssh's connect timeout; no
    launcher starts (needs no PyTorch: it never gets that far)."""
    specs = _local_two_nodes(tmp_path)
    closed = _free_port()  # nothing listens there
    targets = {specs[0].node: SshTarget(name=specs[0].node, address="@local"),
               specs[1].node: SshTarget(name=specs[1].node, address="127.0.0.1", port=closed, connect_timeout_s=5)}
    loaded = load_inventory(tmp_path / "local-2node.yaml")
    record = RunRecord.create("bench", loaded.path, root=tmp_path / "runs")
    bench = BenchRun(loaded, specs, _suite(), record, targets)
    started = time.monotonic()
    bench.run_training_multi_node(specs)
    assert time.monotonic() - started < 60
    [v] = bench.cluster.verdicts
    assert v.status is Status.ERROR and "gpu-02: " in v.message and "gpu-01:" not in v.message
    assert not any(t["test"] == "training_multi_node" for t in bench.cluster.tests)  # nothing launched


@pytest.mark.slow
@needs_torch
def test_real_llama_shape_learns_and_counts_its_flops() -> None:
    """The Llama-shaped model (RoPE, RMSNorm, SwiGLU, no biases) learns the task on CPU/gloo,
    its replicas agree, and its FLOPs per token are 6·N + 12·layers·d_model·seq with N its
    non-embedding parameters: d_model 128, 2 layers, SwiGLU width 384 (2/3·4·128 → 64s)."""
    python = _torch_python()
    assert python is not None
    proc = subprocess.run([python, str(ROOT / "gpuctl" / "bench" / "programs" / "train_smoke.py"), "--steps", "30",
                           "--cpu-nproc", "2", "--device", "cpu", "--model", "llama"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = parse_training_log(proc.stdout)
    assert result.final is not None and result.final.model == "llama" and result.final.ranks_agree
    assert result.loss_end() < 0.8 * result.loss_start()
    d, hidden, vocab = 128, 384, 32
    per_layer = 4 * d * d + 3 * d * hidden + 2 * d  # wq wk wv wo, w1 w3 w2, two RMSNorm weights
    n = 2 * per_layer + d + d * vocab  # final RMSNorm, output layer (untied, no bias)
    assert result.final.model_flops_per_token == 6 * n + 12 * 2 * d * 64
    print(f"\nllama 2 ranks CPU: loss {result.loss_start():.3f} -> {result.loss_end():.3f}, "
          f"{result.final.tokens_per_s} tokens/s")


def test_training_environment_path_is_the_roles_knob(lab_specs: list[NodeSpec]) -> None:
    """roles/train_env's `train_env_path` (inventory role_vars), else its default."""
    from gpuctl.bench.run import train_env_path

    assert train_env_path(lab_specs[0]) == "/opt/gpuctl/train-env"
    moved = lab_specs[0].model_copy(update={"role_vars": {**lab_specs[0].role_vars, "train_env_path": "/srv/te"}})
    assert train_env_path(moved) == "/srv/te"


def _workers(rdzv_id: str, node: str) -> list[int]:
    """PIDs of the torchrun workers of run `rdzv_id` started for `node` (from /proc environ)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = dict(v.split("=", 1) for v in (entry / "environ").read_bytes().decode(errors="replace").split("\0")
                       if "=" in v)
        except OSError:
            continue
        if env.get("TORCHELASTIC_RUN_ID") == rdzv_id and env.get("GPUCTL_NODE") == node and "LOCAL_RANK" in env:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@needs_torch
def test_real_hung_rank_names_its_node_in_bounded_time(tmp_path: Path) -> None:
    """gpu-02's rank is frozen (SIGSTOP) mid-run: gpu-01's rank fails its next collective
    after the step timeout (gloo names the peer it waited for) and its launcher exits; gpu-02's
    launcher then either sees the rendezvous store on gpu-01 go away and fails, or is stopped
    by the watchdog one grace period later. Both are named, the run ends in bounded time."""
    import signal
    import threading

    specs = _local_two_nodes(tmp_path)
    bench = _bench(tmp_path, specs, _suite(training_steps=100000, training_step_timeout_s=15,
                                           training_launch_timeout_s=300))
    rdzv = suites.rdzv_id(bench.train_id)
    worker = threading.Thread(target=bench.run_training_multi_node, args=(specs,))
    started = time.monotonic()
    worker.start()
    frozen: list[int] = []
    try:
        while not frozen and time.monotonic() - started < 120:
            time.sleep(2)
            frozen = _workers(rdzv, "gpu-02")
        assert frozen, "gpu-02's worker never started"
        time.sleep(15)  # well into its steps (torch import and rendezvous take ~10 s here)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        worker.join(timeout=240)
        took = time.monotonic() - started
        assert not worker.is_alive(), "the run did not end"
    finally:
        for pid in frozen:  # never leave a stopped process behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        worker.join(timeout=60)
    launchers = {v.subject.node: v for v in bench.cluster.verdicts if v.check == "train_launcher"}
    assert set(launchers) == {"gpu-01", "gpu-02"}, [v.message for v in bench.cluster.verdicts]
    second = launchers["gpu-02"].message
    assert "was stopped (gpu-01 failed" in second or "rendezvous failed" in second, second
    assert "exited with code" in launchers["gpu-01"].message or "killed by" in launchers["gpu-01"].message
    # freeze at ~27 s + step timeout 15 s + grace 45 s + stop 10 s: far under the 300 s limit
    assert took < 150, took
    print(f"\nfrozen rank: run ended after {took:.0f} s; gpu-01: {launchers['gpu-01'].message[:200]}; "
          f"gpu-02: {launchers['gpu-02'].message[:200]}")
