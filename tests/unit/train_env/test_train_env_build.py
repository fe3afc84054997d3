"""The train_env role's build command run for real (bash, python3 -m venv, pip) on a local
index holding one tiny wheel: a good lock builds and switches the path atomically, a wrong
hash fails naming the package and leaves the path as it was, and the role's distribution
listing reads the result back as the lock (so a converged node would make no change)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from gpuctl.parsers.train_env import DIST_LISTING, parse_distributions
from gpuctl.runner.roles import load_role
from gpuctl.spec import TrainEnvSpec

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("python3.11") is None, reason="needs python3.11 with venv")]


def _wheel(folder: Path, name: str = "demo_pkg", version: str = "1.0") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpuctl-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(n, text)
    links = "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(folder.glob("*.whl")))
    (folder / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")  # PEP 503 page
    return path


def _spec(sha: str, version: str = "1.0") -> TrainEnvSpec:
    return TrainEnvSpec(python="3.11", torch_version="0", torch_runtime_version="0", torch_cuda="0",
                        nccl="n==0", nccl_version="0", cuda_runtime="r==0", index_url="file:///x",
                        lock_text=f"demo-pkg=={version} --hash=sha256:{sha}\n", packages={"demo-pkg": version},
                        source="test")


def _run(command: str, home: Path) -> subprocess.CompletedProcess[str]:
    # no pip configuration of this machine (its find-links, indexes, constraints) may leak in
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "PIP_CONFIG_FILE": os.devnull,
           "PIP_NO_CACHE_DIR": "1", "LC_ALL": "C"}
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=300)


def test_build_switch_and_bad_hash_with_a_real_pip(tmp_path: Path) -> None:
    role = load_role("train_env")
    wheel = _wheel(tmp_path / "simple" / "demo-pkg")
    index = (tmp_path / "simple").as_uri()
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    root = tmp_path / "opt"
    root.mkdir()
    path, lock = str(root / "train-env"), root / "lock.txt"
    (root / "train-env-probe.py").write_text("kept\n")  # a file beside the environments survives

    good = _spec(sha)
    lock.write_text(good.lock_text)
    first = role.env_dir(path, good)
    res = _run(role.build_command(good, first, path, str(lock), index, import_check="demo_pkg"), tmp_path)
    assert res.returncode == 0, res.stderr
    assert os.readlink(path) == first
    listed = _run(f"{path}/bin/python -c {__import__('shlex').quote(DIST_LISTING)}", tmp_path)
    assert good.differences(parse_distributions(listed.stdout.splitlines())) == []

    # a lock whose hash no file has: pip refuses, the package is named, nothing is switched
    bad = _spec("0" * 64)
    lock.write_text(bad.lock_text)
    second = role.env_dir(path, bad)
    res = _run(role.build_command(bad, second, path, str(lock), index, import_check="demo_pkg"), tmp_path)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last == f"train_env: pip could not install demo-pkg==1.0 ({path} unchanged)", res.stderr
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in res.stderr and "Expected sha256 " + "0" * 64 in res.stderr
    assert os.readlink(path) == first and not Path(second).exists()
    assert _run(f"{path}/bin/python -c 'import demo_pkg'", tmp_path).returncode == 0

    # a new good lock (another version) builds beside it, switches, removes the old environment
    newer = _wheel(tmp_path / "simple" / "demo-pkg", version="2.0")
    v2 = _spec(hashlib.sha256(newer.read_bytes()).hexdigest(), "2.0")
    lock.write_text(v2.lock_text)
    third = role.env_dir(path, v2)
    res = _run(role.build_command(v2, third, path, str(lock), index, import_check="demo_pkg"), tmp_path)
    assert res.returncode == 0, res.stderr
    assert os.readlink(path) == third and not Path(first).exists()
    assert (root / "train-env-probe.py").read_text() == "kept\n"
