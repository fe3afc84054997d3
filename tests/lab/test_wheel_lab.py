"""Lab tier: the lab from an installed gpuctl (issue 20, item 5). The wheel built from this
checkout, installed in a fresh environment, run from a folder outside the checkout: `gpuctl
lab up` boots one node, writes the inventory to its own state dir (with the stand-in
repository's keyring), and `gpuctl provision` installs the stand-in NVIDIA stack from that
repository; the checkout's `git status` is unchanged throughout (item 4).

Its own lab (its own ``XDG_STATE_HOME``; the image, apt cache and stand-in repository cache
are shared), so it does not use the session `lab` fixture. A lab of another gpuctl version
sharing the same cache rebuilds the stand-in repository under it (seen here: apt's "Unable to
fetch some archives" in bench_tools, the index read before the rebuild); give such a run its
own ``XDG_CACHE_HOME``. Run it on its own, e.g.
``pytest -m lab tests/lab/test_wheel_lab.py``, or first in a lab list (the session lab is
booted lazily, so it does not run beside this one). One node, full provision with verify:
1129 s and 1461 s (passed) on the 2-core dev machine shared with other test runs and labs
(load 5-8), 2026-12-05.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from wheelenv import CHECKOUT, install_wheel

from gpuctl.lab import missing_binaries
from gpuctl.matrix import load_matrix

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _git_status() -> str | None:
    proc = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=CHECKOUT,
                          capture_output=True, text=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def test_lab_from_the_installed_wheel_provisions_the_standin_stack(tmp_path: Path, record_property) -> None:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"lab host tools missing: {', '.join(sorted(missing))}")
    before = _git_status()
    t0 = time.monotonic()
    wheel = install_wheel(tmp_path / "w")
    work = tmp_path / "elsewhere"
    work.mkdir()
    state_home = tmp_path / "state"
    env = wheel.env(XDG_STATE_HOME=str(state_home), NO_COLOR="1", GPUCTL_RUNS_DIR=str(tmp_path / "runs"))

    def gpuctl(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(wheel.gpuctl), *args], cwd=work, env=env, capture_output=True, text=True,
                              check=False, timeout=timeout)
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        return proc

    figures: dict[str, float] = {}

    def figure(name: str, since: float) -> None:  # printed as measured (pytest -s), kept if a later step fails
        figures[name] = round(time.monotonic() - since, 1)
        print(f"\nlab from the installed wheel: {name} {figures[name]} s", flush=True)

    figure("install_s", t0)
    t = time.monotonic()
    up = gpuctl("lab", "up", "--nodes", "1", "--json",
                "--timeout", os.environ.get("GPUCTL_LAB_BOOT_TIMEOUT", "600"))
    try:
        assert up.returncode == 0, f"lab up exit {up.returncode}\n{up.stdout[-2000:]}\n{up.stderr[-4000:]}"
        assert "stand-in repository unavailable" not in up.stderr
        figure("lab_up_s", t)
        inventory = Path(json.loads(up.stdout)["inventory"])
        assert inventory == state_home / "gpuctl" / "lab" / "inventory.yaml"
        data = yaml.safe_load(inventory.read_text())
        assert data["repos"]["keyring_file"] and len(data["repos"]["keyring_sha256"]) == 64

        t = time.monotonic()
        prov = gpuctl("provision", str(inventory), "--yes", "--json")
        figure("provision_s", t)
        out = json.loads(prov.stdout)
        bad = {n: h.get("error") for n, h in out["hosts"].items() if h.get("status") != "ok"}
        assert prov.returncode == 0 and not bad, f"provision exit {prov.returncode}: {bad}\n{prov.stderr[-3000:]}"
        ran = {r["role"]: r["status"] for r in out["roles"]}
        for role in ("nvidia_repo", "nvidia_driver", "cuda", "nccl"):
            assert role in ran and not str(ran[role]).startswith("skipped"), (role, ran.get(role))

        # the stack on the node, at the matrix's exact versions, from the stand-in repository
        m = load_matrix(data["cluster"]["matrix"]).matrix
        driver = m.packages_for("debian12", "driver")[0]
        nccl = m.packages_for("debian12", "nccl")[0]
        q = gpuctl("lab", "ssh", "gpu-01", "--", "dpkg-query", "-W", "-f", "${Package}=${Version}\\n",
                   driver.name, nccl.name, timeout=120)
        assert q.returncode == 0, q.stderr
        assert set(q.stdout.split()) == {f"{driver.name}={driver.version}", f"{nccl.name}={nccl.version}"}
        smi = gpuctl("lab", "ssh", "gpu-01", "--", "nvidia-smi", timeout=120)
        assert f"Driver Version: {m.driver.version}" in smi.stdout, smi.stdout[-2000:]
    finally:
        down = gpuctl("lab", "down", "--json", timeout=600)
    assert down.returncode == 0, down.stderr[-2000:]
    status = gpuctl("lab", "status", "--json", timeout=120)
    assert json.loads(status.stdout)["running"] is False
    assert not inventory.exists()  # `lab down` removes the inventory it wrote in its state dir
    figure("total_s", t0)
    record_property("wheel_lab", figures)
    assert _git_status() == before, "the lab from the installed wheel wrote into the checkout"
