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


def _fake_port(root: Path, hca: str, gids: dict[int, tuple[str, str | None, str | None]]) -> None:
    """A sysfs-like GID table: index -> (gid, type or None = unreadable, ndev or None)."""
    p = root / hca / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (p / sub).mkdir(parents=True, exist_ok=True)
    for i, (gid, typ, ndev) in gids.items():
        (p / "gids" / str(i)).write_text(gid + "\n")
        # an unused entry's type/ndev read fails in sysfs (EINVAL); a directory fails the same way
        (p / "gid_attrs" / "types" / str(i)).mkdir() if typ is None else \
            (p / "gid_attrs" / "types" / str(i)).write_text(typ + "\n")
        (p / "gid_attrs" / "ndevs" / str(i)).mkdir() if ndev is None else \
            (p / "gid_attrs" / "ndevs" / str(i)).write_text(ndev + "\n")


def test_rdma_listing_reads_the_gid_table_without_a_process_per_entry(tmp_path: Path) -> None:
    """Soft-RoCE's table has 1024 entries, ConnectX's 255: three `$(cat …)` per entry were ~3000
    forks, minutes on an emulated node (a lab provision sat on it); the shell's own `read` needs
    none. Same lines as before, unused entries skipped."""
    zero = "0000:0000:0000:0000:0000:0000:0000:0000"
    _fake_port(tmp_path, "rxe0", {0: ("fe80:0000:0000:0000:5054:00ff:fe6c:0103", "IB/RoCE v1", "eth1"),
                                  1: ("fe80:0000:0000:0000:5054:00ff:fe6c:0103", "RoCE v2", "eth1"),
                                  2: (zero, None, None),
                                  3: ("0000:0000:0000:0000:0000:ffff:0ac8:0103", "RoCE v2", None)})
    script = rdma_command([("rxe0", "eth1")]).replace("/sys/class/infiniband", str(tmp_path))
    loop = script[script.index("for g in"):]
    assert "$(" not in loop.split("done")[0], "a subshell per GID entry"
    out = _sh(script, tmp_path)
    gid_lines = [line for line in out.stdout.splitlines() if line.startswith("gid ")]
    assert gid_lines == [
        "gid rxe0 0 fe80:0000:0000:0000:5054:00ff:fe6c:0103 eth1 IB/RoCE v1",
        "gid rxe0 1 fe80:0000:0000:0000:5054:00ff:fe6c:0103 eth1 RoCE v2",
        "gid rxe0 3 0000:0000:0000:0000:0000:ffff:0ac8:0103 - RoCE v2",
    ], out
    assert out.returncode == 0, out.stderr
