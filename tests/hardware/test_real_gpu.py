"""Hardware tier: on a machine with a real NVIDIA GPU, gpuctl's parsers and verdicts on the
real tools' output, and `gpuctl verify` / `gpuctl bench --suite quick` through the local
connector with the one-GPU inventory. Skipped where there is no GPU (CI, the lab host)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuctl.analyze import analyze_text
from gpuctl.catalog import load_sku
from gpuctl.paths import inventories_dir

pytestmark = [
    pytest.mark.hardware,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi: not a GPU machine"),
]

INVENTORY = inventories_dir() / "single-h200-local.yaml"
GPUCTL = [sys.executable, "-c", "from gpuctl.cli.entry import run; run()"]


def _out(name: str, text: str) -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out, name).write_text(text)


def test_real_nvidia_smi_parses_and_identifies_the_gpu() -> None:
    q = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, check=True).stdout
    _out("nvidia-smi-q.txt", q)
    result = analyze_text("nvidia-smi-q", q, load_sku("single-h200"))
    names = [f.value for f in result.figures if f.name.endswith(".name")]
    assert names and all("H200" in str(n) for n in names), result.figures
    assert result.status.value in ("pass", "warn"), [vd.message for vd in result.verdicts]


def test_verify_and_quick_bench_on_this_machine() -> None:
    env = dict(os.environ, NO_COLOR="1")
    verify = subprocess.run([*GPUCTL, "verify", str(INVENTORY), "--json"], capture_output=True, text=True,
                            env=env, timeout=900)
    _out("verify.json", verify.stdout + "\n# stderr\n" + verify.stderr)
    assert "Traceback" not in verify.stderr
    data = json.loads(verify.stdout)
    assert "h200-01" in data["hosts"]
    bench = subprocess.run([*GPUCTL, "bench", str(INVENTORY), "--suite", "quick", "--json"], capture_output=True,
                           text=True, env=env, timeout=900)
    _out("bench.json", bench.stdout + "\n# stderr\n" + bench.stderr)
    assert "Traceback" not in bench.stderr
    assert json.loads(bench.stdout)["hosts"]["h200-01"]["results"]
