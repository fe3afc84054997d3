"""The bench's training run sized per inventory (issue 16: lab-demo trains across QEMU nodes):
`bench.training` in the inventory (size, model, steps, CPU ranks per node, timeouts) replaces
the suite's figures in each node's own run, in the run across nodes and in the probe before
it; bad values are refused with file, line and field (exit 2) before anything runs;
`gpuctl lab up --train-env` writes the emulated-node figures into a QEMU lab's inventory. The
program's `tiny` size still learns (the loss falls, judged as before) and one rank is judged
"not applicable" for ranks-agree, never a pass. Real runs need a python with PyTorch
(GPUCTL_TORCH_PYTHON)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpuctl.bench import suites
from gpuctl.bench.remote import SshTarget
from gpuctl.bench.run import BenchRun
from gpuctl.errors import InputError
from gpuctl.inventory import TrainingBenchSettings, load_inventory, load_inventory_text
from gpuctl.lab import trainenv
from gpuctl.parsers.training import parse_training_log
from gpuctl.paths import inventories_dir
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve
from gpuctl.verdicts import Status, Subject, judge_training

ROOT = Path(__file__).parents[2]
PROGRAM = ROOT / "gpuctl" / "bench" / "programs" / "train_smoke.py"
LAB = (inventories_dir() / "lab.yaml").read_text()
SIZED = ("bench:\n  training:\n    size: tiny\n    steps: 20\n    cpu_ranks_per_node: 1\n    timeout_s: 1800\n"
         "    rdzv_timeout_s: 900\n    step_timeout_s: 600\n    source: measured on the lab\n")


def _loaded(extra: str):  # type: ignore[no-untyped-def]
    return load_inventory_text(LAB + extra, "lab.yaml", inventories_dir())


def _last_argv(script: str) -> list[str]:
    return shlex.split(script.strip().splitlines()[-1])


def test_unset_settings_keep_the_suite() -> None:
    quick = suites.SUITES["quick"]
    assert suites.with_settings(quick, TrainingBenchSettings()) == quick
    assert suites.training_timeout_s(quick) == quick.timeout_s == 600
    argv = _last_argv(suites.training_script(resolve(_loaded(""))[0], quick, "RUN1", 989.0))
    assert argv[argv.index("--size") + 1] == "small" and argv[argv.index("--cpu-nproc") + 1] == "2"


def test_inventory_sizes_both_runs_and_their_bounds(tmp_path: Path) -> None:
    (tmp_path / "lab.yaml").write_text(LAB + SIZED)
    loaded = load_inventory(tmp_path / "lab.yaml")
    specs = resolve(loaded)
    record = RunRecord.create("bench", loaded.path, root=tmp_path / "runs")
    bench = BenchRun(loaded, specs, suites.SUITES["quick"], record,
                     {s.node: SshTarget(name=s.node, address="@local") for s in specs})
    suite = bench.suite
    assert (suite.training_size, suite.training_steps, suite.training_model) == ("tiny", 20, "gpt")
    assert suites.training_timeout_s(suite) == suite.training_launch_timeout_s == 1800
    assert suite.training_probe_timeout_s == 1800
    assert suite.timeout_s == 600  # the other benchmarks keep the suite's bound
    # each node's own run
    single = _last_argv(bench.node_tests(specs[0])[-1][2] or "")
    opt = dict(zip(single[2::2], single[3::2], strict=False))
    assert opt["--cpu-nproc"] == "1" and opt["--size"] == "tiny" and opt["--steps"] == "20"
    assert opt["--step-timeout-s"] == "600"
    # the run across nodes: one rank per node, the longer join timeout, the same program options
    multi = suites.torchrun_argv("python3", specs[1], specs, suite, "RUN1", 989.0, False)
    assert multi[multi.index("--nproc-per-node") + 1] == "1"
    assert multi[multi.index("--rdzv-conf") + 1] == "join_timeout=900,read_timeout=60,is_host=0"
    assert multi[-10:] == single[-10:]


@pytest.mark.parametrize(("setting", "message"), [
    ("steps: 0", "bench.training.steps: Input should be greater than or equal to 10"),
    ("size: huge", "bench.training.size: Input should be 'small' or 'tiny'"),
    ("model: bert", "bench.training.model: Input should be 'gpt' or 'llama'"),
    ("cpu_ranks_per_node: 0", "bench.training.cpu_ranks_per_node: Input should be greater than or equal to 1"),
    ("timeout_s: 5", "bench.training.timeout_s: Input should be greater than or equal to 60"),
    ("stpes: 30", "bench.training.stpes: unknown key 'stpes'; did you mean 'steps'?"),
])
def test_bad_values_name_file_line_and_field(setting: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        _loaded(f"bench:\n  training:\n    {setting}\n")
    line = len((LAB + "bench:\n  training:\n").splitlines()) + 1
    assert any(p.startswith(f"lab.yaml:{line}: {message}") for p in exc.value.problems), exc.value.problems


def test_a_timeout_inside_the_run_must_be_shorter_than_the_run() -> None:
    with pytest.raises(InputError) as exc:
        _loaded("bench:\n  training:\n    timeout_s: 600\n    rdzv_timeout_s: 600\n")
    [problem] = exc.value.problems
    assert "bench.training: rdzv_timeout_s (600) must be below timeout_s (600)" in problem


def test_bench_refuses_a_bad_setting_with_exit_2_before_any_host(tmp_path: Path) -> None:
    from gpuctl.cli.main import main

    inv = tmp_path / "lab.yaml"
    inv.write_text(LAB + "bench:\n  training:\n    steps: 3\n")
    result = CliRunner().invoke(main, ["bench", str(inv), "--suite", "training"])
    assert result.exit_code == 2, result.output
    assert "bench.training.steps" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()


def test_lab_up_train_env_sizes_the_run_for_qemu_nodes_only(tmp_path: Path) -> None:
    for emulated in (True, False):
        inv = tmp_path / f"inventory-{emulated}.yaml"
        inv.write_text("# Written by gpuctl lab up\n" + LAB)
        trainenv.enable_in_inventory(inv, emulated=emulated)
        data = yaml.safe_load(inv.read_text())
        loaded = load_inventory(inv)
        suite = suites.with_settings(suites.SUITES["quick"], loaded.inventory.bench.training)
        if emulated:
            assert data["bench"]["training"] == trainenv.EMULATED_TRAINING
            assert (suite.training_size, suite.training_cpu_ranks_per_node, suite.training_cpu_ranks_single) == \
                ("tiny", 1, 1)
            assert suites.training_timeout_s(suite) == 1800
        else:
            assert "bench" not in data and suite == suites.SUITES["quick"]


def _torch_python() -> str | None:
    explicit = os.environ.get("GPUCTL_TORCH_PYTHON")
    if explicit and shutil.which(explicit):
        return explicit
    return sys.executable if importlib.util.find_spec("torch") else None


@pytest.mark.slow
@pytest.mark.skipif(_torch_python() is None, reason="no python with PyTorch (set GPUCTL_TORCH_PYTHON)")
@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_real_tiny_run_on_one_rank_learns_and_is_judged_as_before(model: str) -> None:
    python = _torch_python()
    assert python is not None
    proc = subprocess.run([python, str(PROGRAM), "--size", "tiny", "--model", model, "--cpu-nproc", "1",
                           "--device", "cpu", "--steps", "40"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = parse_training_log(proc.stdout)
    assert result.final is not None and result.final.world_size == 1 and result.final.model == model
    assert '"size": "tiny"' in proc.stdout.splitlines()[-1]
    # the tiny gpt: 1 layer of d_model 32 (MLP 128), 16 symbols, sequence 16
    if model == "gpt":
        assert result.final.model_flops_per_token == 85920.0
    got = {v.check: v for v in judge_training(result, None, Subject(node="gpu-01"))}
    assert got["train_loss_falls"].status is Status.PASS, got["train_loss_falls"].message
    assert got["train_ranks_agree"].status is Status.NOT_APPLICABLE  # one replica: nothing to compare
    print(f"\ntiny {model}, 1 rank: loss {result.loss_start():.3f} -> {result.loss_end():.3f}")
