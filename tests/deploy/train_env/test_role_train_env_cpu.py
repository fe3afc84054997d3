"""Deploy tier: roles/train_env with the CPU build (`train_env_build: cpu`, issue 16 item 7): the
plan of a Debian 12 inventory shows the CPU torch's pinned version and lock, the lock pip reads
holds the CPU wheels' hashes only (no CUDA or NCCL wheel), the index is PyTorch's CPU index (or the
mirror's wheelhouse); a converged node makes no change."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gpu_scenarios import converged_files, run_role

from gpuctl.paths import inventories_dir
from gpuctl.runner.roles import load_role, select_roles

pytestmark = pytest.mark.deploy
PATH = "/opt/gpuctl/train-env"
LOCK = "/opt/gpuctl/train-env.lock.txt"
BUILD = re.compile(r"-m pip install .*--require-hashes")


def _inventory(tmp_path: Path, mirror: str | None = None) -> Path:
    text = (inventories_dir() / "lab.yaml").read_text().replace(
        "train_env_enabled: false", "train_env_enabled: true\n  train_env_build: cpu")
    if mirror:
        text = text.replace("management: {interface: eth0}",
                            f"management: {{interface: eth0}}\nrepos: {{mirror: '{mirror}'}}")
    path = tmp_path / "lab-cpu.yaml"
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def _role_module(monkeypatch):  # type: ignore[no-untyped-def]
    import sys

    monkeypatch.setitem(sys.modules, "roles_train_env_install", load_role("train_env"))


def test_plan_shows_the_cpu_build_with_its_pinned_version(fake, tmp_path):
    from gpuctl.runner.run import load_provision_deploy

    specs = fake.specs(_inventory(tmp_path))
    choices = select_roles(specs, only=["train_env"])
    run = fake.run(load_provision_deploy().provision, specs, args=(choices,), compose=True, dry=True,
                   responses={": gpuctl-fact packages;": ""})
    text = repr(run.summary.to_json()["hosts"]["gpu-01"])
    assert "Install torch 2.13.0+cpu (CPU build: no NCCL, gloo, --require-hashes)" in text
    assert "python3.11 -m venv /opt/gpuctl/train-env-" in text
    assert "--index-url https://download.pytorch.org/whl/cpu -r /opt/gpuctl/train-env.lock.txt" in text


def test_fresh_node_installs_the_cpu_lock_and_a_converged_one_changes_nothing(fake, tmp_path):
    specs = fake.specs(_inventory(tmp_path, mirror="http://10.251.0.1:8080/"), limit=["gpu-01"])
    te = specs[0].train_env
    assert te is not None and te.build == "cpu"
    h = run_role(fake, "train_env", specs, "debian12-fresh")
    assert h.status == "ok", h.error
    lock = h.files[LOCK]
    assert "torch==2.13.0+cpu --hash=sha256:6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b" in lock
    assert "nvidia" not in lock and "triton" not in lock
    build = next(c for c in h.execute_commands if BUILD.search(c))
    assert "--index-url http://10.251.0.1:8080/gpuctl/wheels/simple --trusted-host 10.251.0.1:8080 -r" in build
    from roles_train_env_install import env_dir  # type: ignore[import-not-found]

    state = [f"link={env_dir(PATH, te)}", "dist=pip==23.0.1"] + [f"dist={n}=={v}" for n, v in te.packages.items()]
    again = run_role(fake, "train_env", specs, "debian12-fresh", files=converged_files(h), **{"train-env": state})
    assert again.status == "ok", again.error
    assert not [c for c in again.execute_commands if BUILD.search(c)]
    assert again.op("Install torch").status == "unchanged"
