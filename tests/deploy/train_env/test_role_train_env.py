"""Deploy tier: roles/train_env — the training environment from the matrix's hash lock.

Fresh node → the OS's venv package, the lock (pinned, hashed) written, pip --require-hashes
--no-deps into the versioned folder, the symlink switched, profile.d written; converged node
→ no command; a package pip cannot get (bad hash) → the node's role fails naming it and
profile.d is not written.
"""

from __future__ import annotations

import re

import pytest
from gpu_scenarios import DATA, converged_files, run_role

from gpuctl.deploy_context import RunOptions
from gpuctl.runner.roles import load_role, select_roles

pytestmark = pytest.mark.deploy
PATH = "/opt/gpuctl/train-env"
LOCK = "/opt/gpuctl/train-env.lock.txt"
PROFILE = "/etc/profile.d/gpuctl-train-env.sh"
BUILD = re.compile(r"-m pip install .*--require-hashes")


def _specs(fake):  # type: ignore[no-untyped-def]
    return fake.specs("h100-8x4.yaml", limit=["gpu-01"])


def _installed(te, bump: str | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    """The TrainEnvState answer of a node holding exactly the lock (one package moved with bump)."""
    from roles_train_env_install import env_dir  # type: ignore[import-not-found]

    lines = [f"link={env_dir(PATH, te)}", "dist=pip==25.1"]
    lines += [f"dist={n}=={'0.0.1' if n == bump else v}" for n, v in te.packages.items()]
    return lines


@pytest.fixture(autouse=True)
def _role_module(monkeypatch):  # type: ignore[no-untyped-def]
    import sys

    monkeypatch.setitem(sys.modules, "roles_train_env_install", load_role("train_env"))


def _converged_packages() -> list[str]:
    recorded = (DATA / "ubuntu2204-converged" / "packages.txt").read_text().splitlines()
    return [*recorded, "python3.10-venv\t3.10.12-1~22.04.10\tinstall ok installed"]


def test_fresh_node_installs_the_pinned_lock_with_hashes(fake):
    specs = _specs(fake)
    te = specs[0].train_env
    h = run_role(fake, "train_env", specs, "ubuntu2204-fresh")
    assert h.status == "ok", h.error
    cmds = h.execute_commands
    assert any(c.endswith(" python3.10-venv") and "apt-get install" in c for c in cmds)
    lock = h.files[LOCK]
    assert "torch==2.8.0 --hash=sha256:" in lock and "nvidia-nccl-cu12==2.27.3 --hash=sha256:" in lock
    assert all("--hash=sha256:" in line for line in lock.splitlines() if not line.startswith("#"))
    build = [c for c in cmds if BUILD.search(c)]
    assert len(build) == 1
    target = f"{PATH}-{te.lock_sha256[:12]}"
    assert f"python3.10 -m venv {target}" in build[0]
    assert (f"{target}/bin/python -m pip install --no-input --disable-pip-version-check --no-cache-dir --no-deps "
            f"--require-hashes --only-binary=:all: --index-url https://pypi.org/simple -r {LOCK}") in build[0]
    assert f"ln -sfn {target} {PATH}.gpuctl-new && mv -T {PATH}.gpuctl-new {PATH}" in build[0]
    # profile.d after the environment exists, as a file
    assert f'PATH="{PATH}/bin:${{PATH}}"' in h.files[PROFILE]
    upload_order = list(h.files)
    assert upload_order.index(LOCK) < upload_order.index(PROFILE)
    assert h.op("Install torch").name == \
        "train_env | Install torch 2.8.0+cu128 (nvidia-nccl-cu12==2.27.3, --require-hashes)"


def test_converged_node_makes_no_change(fake):
    specs = _specs(fake)
    te = specs[0].train_env
    first = run_role(fake, "train_env", specs, "ubuntu2204-fresh")
    h = run_role(fake, "train_env", specs, "ubuntu2204-converged", files=converged_files(first),
                 packages=_converged_packages(), **{"train-env": _installed(te)})
    assert h.status == "ok", h.error
    assert h.execute_commands == [] and h.changed_ops == []
    assert h.op("Install torch").status == "unchanged"


def test_a_drifted_package_rebuilds_beside_the_live_environment(fake):
    specs = _specs(fake)
    te = specs[0].train_env
    first = run_role(fake, "train_env", specs, "ubuntu2204-fresh")
    h = run_role(fake, "train_env", specs, "ubuntu2204-converged", files=converged_files(first),
                 packages=_converged_packages(), **{"train-env": _installed(te, bump="sympy")})
    build = [c for c in h.execute_commands if BUILD.search(c)]
    target = f"{PATH}-{te.lock_sha256[:12]}"
    assert len(build) == 1 and f"-m venv {target}-r " in build[0]  # the live one stays until the switch
    assert h.changed_ops == [h.op("Install torch").name]


def test_bad_hash_fails_the_node_naming_the_package_and_leaves_the_path_alone(fake):
    specs = fake.specs("h100-8x4.yaml", limit=["gpu-01", "gpu-02"])
    pip_said = ("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n"
                "    torch==2.8.0 from https://files.pythonhosted.org/packages/torch-2.8.0-cp310-cp310-"
                "manylinux_2_28_x86_64.whl:\n        Expected sha256 0000\n             Got        1111\n"
                # the build command's own last line (what it prints is tested with a real pip in
                # tests/unit/train_env/test_train_env_build.py)
                "train_env: pip could not install torch==2.8.0 (/opt/gpuctl/train-env unchanged)")
    run = fake.run(load_role("train_env").install, specs,
                   host_responses={"gpu-01": {BUILD: {"stdout": "", "stderr": pip_said, "success": False}}})
    bad, good = run["gpu-01"], run["gpu-02"]
    assert bad.status == "failed" and good.status == "ok"
    assert "torch==2.8.0 from" in bad.op("Install torch").stderr
    # the one-line reason of the run summary ends with the command's last stderr line
    assert "failed: train_env: pip could not install torch==2.8.0 " in bad.error
    assert PROFILE not in bad.files and PROFILE in good.files


def test_path_knob_that_is_not_a_plain_path_refuses(fake):
    h = run_role(fake, "train_env", _specs(fake), "ubuntu2204-fresh",
                 options=RunOptions(extra={"train_env_path": "/opt/train env"}))
    assert h.status == "failed"
    assert not any(BUILD.search(c) for c in h.commands)


def test_plan_of_h100_8x4_shows_the_pinned_commands(fake):
    from gpuctl.runner.run import load_provision_deploy

    specs = fake.specs("h100-8x4.yaml")
    choices = select_roles(specs, only=["train_env"])
    run = fake.run(load_provision_deploy().provision, specs, args=(choices,), compose=True, dry=True,
                   responses={": gpuctl-fact packages;": ""})
    plan = run.summary.to_json()
    host = plan["hosts"]["gpu-01"]
    text = repr(host)
    assert "Install torch 2.8.0+cu128 (nvidia-nccl-cu12==2.27.3, --require-hashes)" in text
    assert "--require-hashes" in text and "python3.10 -m venv /opt/gpuctl/train-env-" in text


@pytest.mark.parametrize(("os_family", "scenario", "install"), [
    ("rhel9", "rocky9-fresh", "dnf install -y --disableplugin=versionlock python3.11"),
    ("debian12", "debian12-fresh", None),  # the recorded Debian 12 node has python3.11-venv already
])
def test_other_os_families_use_their_python(fake, tmp_path, os_family, scenario, install):
    from gpu_scenarios import inventory

    specs = fake.specs(inventory(tmp_path, os_family, matrix="r570-cuda12.8"), limit=["gpu-01"])
    h = run_role(fake, "train_env", specs, scenario)
    assert h.status == "ok", h.error
    if install:
        assert any(c.endswith(install) for c in h.execute_commands), h.execute_commands
    else:
        assert h.op("venv support").status == "unchanged"
    build = next(c for c in h.execute_commands if BUILD.search(c))
    assert "python3.11 -m venv /opt/gpuctl/train-env-" in build


def test_air_gapped_mirror_serves_the_wheels(fake, tmp_path):
    from gpu_scenarios import inventory

    specs = fake.specs(inventory(tmp_path, "ubuntu2204", matrix="r570-cuda12.8", mirror="http://10.0.2.2:8080/"),
                       limit=["gpu-01"])
    assert specs[0].train_env.index_url == "http://10.0.2.2:8080/gpuctl/wheels/simple"
    h = run_role(fake, "train_env", specs, "ubuntu2204-fresh")
    build = next(c for c in h.execute_commands if BUILD.search(c))
    # pip ignores a plain-http index unless its host is trusted; the lock's hashes still hold
    assert "--index-url http://10.0.2.2:8080/gpuctl/wheels/simple --trusted-host 10.0.2.2:8080 -r" in build
