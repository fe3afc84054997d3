"""The command sites that once ran inventory values: each builder's shell, fed hostile names,
is executed for real by /bin/sh and must not run the payload (a marker file must not appear).
The loader refuses these values first (tests/deploy/test_shell_safety.py); these sites must hold
even when validation is bypassed (host data, a future field)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuctl.bench.suites import _scratch_guard
from gpuctl.parsers.rdma import rdma_command


def payloads(mark: Path) -> list[str]:
    return [f"x$(touch {mark})", f"x`touch {mark}`", f"x';touch {mark};'", f'x";touch {mark};"',
            f"x;touch {mark}", f"x|touch {mark}", f"x&&touch {mark}", f"x\ntouch {mark}"]


def _sh(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, cwd=cwd, timeout=30)


@pytest.mark.parametrize("i", range(8))
def test_rdma_listing_does_not_run_hca_or_netdev_names(tmp_path: Path, i: int) -> None:
    mark = tmp_path / "ran"
    p = payloads(mark)[i]
    _sh(rdma_command([(p, p)]), tmp_path)
    assert not mark.exists(), p


@pytest.mark.parametrize("i", range(8))
def test_bench_scratch_guard_does_not_run_mount_or_folder(tmp_path: Path, i: int) -> None:
    mark = tmp_path / "ran"
    p = payloads(mark)[i]
    _sh(_scratch_guard(str(tmp_path / p), str(tmp_path / p / "f"), 1) + "echo body\n", tmp_path)
    assert not mark.exists(), p
