"""Helpers for lab tests: run gpuctl as a user would, in its own process."""

from __future__ import annotations

import os


def gpuctl_json(*args: str, runs: str | os.PathLike[str] | None = None,
                timeout: float | None = None) -> tuple[int, dict, str]:
    """Run `python -m gpuctl ARGS --json` as a user would (its own process: gevent is patched
    before anything else, as in the console script) → (exit code, JSON, stderr). The limit is
    `timeout`, else GPUCTL_LAB_RUN_TIMEOUT, else 3600 s (a 3-node QEMU provision on a machine
    shared with other runs took longer than 3600 s at load 15-28, 2026-12-06)."""
    import json
    import subprocess
    import sys

    env = dict(os.environ, NO_COLOR="1")
    if timeout is None:
        timeout = float(os.environ.get("GPUCTL_LAB_RUN_TIMEOUT", "3600"))
    if runs is not None:
        env["GPUCTL_RUNS_DIR"] = str(runs)
    proc = subprocess.run([sys.executable, "-m", "gpuctl", *args, "--json"], capture_output=True, text=True,
                          env=env, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"gpuctl {' '.join(args)} (exit {proc.returncode}) printed no JSON:\n"
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}") from None
    return proc.returncode, out, proc.stderr


def provision_lab(inventory: str | os.PathLike[str], runs: str | os.PathLike[str], *extra: str) -> dict:
    """`gpuctl provision INVENTORY --yes --json [extra]`; fails the test unless every host is ok."""
    code, out, err = gpuctl_json("provision", str(inventory), "--yes", *extra, runs=runs)
    bad = {n: h.get("error") for n, h in out.get("hosts", {}).items() if h.get("status") != "ok"}
    assert code == 0 and not bad, f"provision exit {code}: {bad or out.get('verify', {}).get('status')}\n{err[-2000:]}"
    return out


_CONVERGED: set[str] = set()


def ensure_provisioned(inventory: str | os.PathLike[str], runs: str | os.PathLike[str]) -> None:
    """Every role applied to the lab once per test session (`provision --no-verify`); later
    callers reuse it. A test that leaves the nodes changed calls `lab_changed()`."""
    key = os.fspath(inventory)
    if key in _CONVERGED:
        return
    provision_lab(key, runs, "--no-verify")
    _CONVERGED.add(key)


def lab_changed() -> None:
    """The next `ensure_provisioned` provisions again."""
    _CONVERGED.clear()


def mark_converged(inventory: str | os.PathLike[str]) -> None:
    """A test's own successful full provision left the lab converged."""
    _CONVERGED.add(os.fspath(inventory))
