"""The shipped training program, run for real: without PyTorch it says so; with PyTorch
(CPU wheel, gloo, two ranks) the loss falls on the learnable task and the ranks agree.
Set GPUCTL_TORCH_PYTHON to a python that has torch to run the slow case here."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuctl.bench.judge import judge_output
from gpuctl.catalog import load_sku
from gpuctl.parsers.training import parse_training_log
from gpuctl.verdicts import Status, Subject

PROGRAM = Path(__file__).parents[2] / "gpuctl" / "bench" / "programs" / "train_smoke.py"


def _torch_python() -> str | None:
    explicit = os.environ.get("GPUCTL_TORCH_PYTHON")
    if explicit and shutil.which(explicit):
        return explicit
    return sys.executable if importlib.util.find_spec("torch") else None


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="this python has PyTorch")
def test_without_pytorch_prints_skipped() -> None:
    proc = subprocess.run([sys.executable, str(PROGRAM), "--steps", "3"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.strip() == '{"skipped": "no PyTorch"}'
    assert parse_training_log(proc.stdout).skipped == "no PyTorch"


@pytest.mark.slow
@pytest.mark.skipif(_torch_python() is None, reason="no python with PyTorch (set GPUCTL_TORCH_PYTHON)")
def test_cpu_ddp_loss_falls_and_ranks_agree() -> None:
    python = _torch_python()
    assert python is not None
    proc = subprocess.run([python, str(PROGRAM), "--steps", "40", "--nproc", "2", "--device", "cpu"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = parse_training_log(proc.stdout)
    assert len(result.steps) == 40 and result.final is not None
    assert result.final.world_size == 2 and result.final.ranks_agree
    assert result.loss_end() < 0.8 * result.loss_start()
    verdicts = {v.check: v for v in judge_output("training", proc.stdout, load_sku("hgx-h100-80gb"),
                                                 Subject(node="here")).verdicts}
    assert verdicts["train_loss_falls"].status is Status.PASS
    assert verdicts["train_ranks_agree"].status is Status.PASS


@pytest.mark.slow
@pytest.mark.skipif(_torch_python() is None, reason="no python with PyTorch (set GPUCTL_TORCH_PYTHON)")
def test_throughput_phase_times_its_own_model() -> None:
    """The timed phase (on by default on CUDA only; forced here on CPU with a small shape): the
    final record's FLOPs per token are those of the --mfu-* model, named in mfu_model, while the
    learning run's checks still come from the small model."""
    python = _torch_python()
    assert python is not None
    shape = ["--mfu-d-model", "64", "--mfu-layers", "2", "--mfu-heads", "4", "--mfu-seq", "32", "--mfu-batch", "4",
             "--mfu-steps", "3", "--mfu-warmup", "1"]
    proc = subprocess.run([python, str(PROGRAM), "--steps", "6", "--nproc", "2", "--device", "cpu", "--mfu-phase", "on",
                           *shape], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    final = parse_training_log(proc.stdout).final
    assert final is not None and final.ranks_agree and final.world_size == 2
    model = dict(final.mfu_model)
    assert (model["d_model"], model["layers"], model["seq"], model["batch_per_rank"]) == (64, 2, 32, 4)
    # 6·N + 12·layers·d_model·seq, N = the non-embedding parameters the run counted
    assert final.model_flops_per_token == 6 * model["params_non_embedding"] + 12 * 2 * 64 * 32
    plain = subprocess.run([python, str(PROGRAM), "--steps", "4", "--nproc", "1", "--device", "cpu"],
                           capture_output=True, text=True, timeout=600)
    assert parse_training_log(plain.stdout).final.mfu_model == ()  # CPU default: no throughput phase
