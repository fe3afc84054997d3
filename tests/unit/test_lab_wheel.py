"""The lab from an installed gpuctl (issue 20, item 5): `pip install .` gave a gpuctl whose
`lab up` could not build the stand-in NVIDIA repository (it read ``tools/__pycache__``, a
folder pip's byte-compilation creates, as a file) and wrote an inventory without a keyring.

Here the wheel is built from this checkout and installed in a fresh environment; from a
folder outside the checkout the installed gpuctl builds the stand-in repository through the
lab's own entry point and writes the lab inventory. No QEMU: only the stand-in kernel modules,
which need the lab image's kernel headers, are replaced by placeholder files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from wheelenv import CHECKOUT, WheelEnv, install_wheel

from gpuctl.errors import ExecutionError
from gpuctl.lab.standin import repo

pytestmark = pytest.mark.slow


def test_source_files_take_only_the_generator_sources_never_byte_code_or_folders(tmp_path: Path) -> None:
    """The class of the defect: the stamp hash took every entry of tools/ and kmod_src/."""
    here = tmp_path / "standin"
    shutil.copytree(repo.HERE, here, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    expected = repo.source_files(here)
    names = {p.relative_to(here).as_posix() for p in expected}
    assert {"repo.py", "kmod.py", "tools/labhw.py", "kmod_src/standin.c.in"} <= names
    for junk in ("tools/__pycache__/labhw.cpython-311.pyc", "__pycache__/repo.cpython-311.pyc",
                 "tools/labhw.pyc", "kmod_src/__pycache__/x.c.in"):
        (here / junk).parent.mkdir(parents=True, exist_ok=True)
        (here / junk).write_bytes(b"\0stale byte code\0")
    (here / "tools" / "sub.py").mkdir()  # a folder named like a source file
    assert repo.source_files(here) == expected


def _git_status() -> str | None:
    proc = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=CHECKOUT,
                          capture_output=True, text=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> WheelEnv:
    before = _git_status()
    env = install_wheel(tmp_path_factory.mktemp("wheel"))
    assert _git_status() == before, "building and installing the wheel wrote into the checkout"
    return env


def test_the_wheel_ships_the_lab_data_and_no_byte_code(wheel_env: WheelEnv) -> None:
    names = zipfile.ZipFile(wheel_env.wheel).namelist()
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # the folders pyproject.toml ships under gpuctl/_share/ (the one list of them)
    wheel = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    share = wheel["force-include"]
    assert set(share.values()) >= {"gpuctl/_share/roles", "gpuctl/_share/deploy", "gpuctl/_share/inventories"}
    for folder in (Path(v).name for v in share.values()):
        assert any(n.startswith(f"gpuctl/_share/{folder}/") for n in names), folder
    for path in ("gpuctl/_share/inventories/lab.yaml", "gpuctl/lab/standin/tools/labhw.py",
                 "gpuctl/lab/standin/kmod_src/standin.c.in", "gpuctl/_share/matrices/r580-cuda13.0.yaml"):
        assert path in names, path


# Run by the installed interpreter, in a folder outside the checkout.
INSTALLED_LAB_SCRIPT = r'''
import json, sys
from pathlib import Path

import gpuctl
from gpuctl.lab import nodes
from gpuctl.lab.standin import kmod
from gpuctl.lab.state import LabState, NodeState
from gpuctl.paths import share_root

work = Path(sys.argv[1])
KVER = "6.1.0-test-amd64"


def placeholder_modules(kind, version, **_):  # the real ones compile against the lab image's kernel
    out = {}
    for m in kmod.KINDS[kind]:
        path = work / "ko" / f"{kind}-{version}-{m.file}.ko"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{m.name} {version}\n")
        out[m.file] = path
    return out


kmod.build_modules = placeholder_modules
kmod._image = lambda image_root, kernel_version: (work, KVER)
keyring = nodes._standin_repo()  # what `lab up` calls while the nodes boot
state = LabState(sku="hgx-h100-80gb", smp=2, memory_mb=1536, nvme_count=4, nvme_size_gb=2,
                 image_dir=str(work / "image"), key_path=str(work / "id_ed25519"),
                 known_hosts=str(work / "known_hosts"), state_dir=str(work / "state"), proxy_port=3142,
                 repo_port=8080, inventory_path=str(nodes.default_inventory_path()),
                 keyring_file=keyring[0], keyring_sha256=keyring[1])
layout = nodes.NodeLayout(1)
state.nodes.append(NodeState(name=layout.name, index=1, ssh_port=23001, overlay="", nvme=[],
                             mac_mgmt=layout.mac_mgmt, mac_fabric=layout.mac_fabric, serial_log="",
                             fabric_ip=layout.fabric_ip, vlan_ips={100: layout.vlan_ip}))
written = nodes.write_lab_inventory(state)
from gpuctl.lab.netcache import repo_dir
print(json.dumps({"gpuctl": gpuctl.__file__, "share": str(share_root()), "keyring": keyring,
                  "inventory": str(written), "repo": str(repo_dir()),
                  "pycache": sorted(str(p) for p in Path(gpuctl.__file__).parent.rglob("__pycache__"))[:3]}))
'''


@pytest.mark.skipif(not all(shutil.which(t) for t in ("dpkg-deb", "dpkg-scanpackages", "gpg")),
                    reason="needs dpkg-dev and gnupg")
def test_installed_gpuctl_builds_the_standin_repository_and_writes_the_lab_inventory(
        wheel_env: WheelEnv, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    before = _git_status()
    work = tmp_path / "elsewhere"
    work.mkdir()
    # gpg-agent's sockets live in the key's folder: keep it short (a unix socket path has 107 bytes)
    cache = Path(tempfile.mkdtemp(prefix="gl-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(cache, ignore_errors=True))
    env = wheel_env.env(XDG_CACHE_HOME=str(cache), XDG_STATE_HOME=str(tmp_path / "state"))
    proc = subprocess.run([str(wheel_env.python), "-c", INSTALLED_LAB_SCRIPT, str(work)], cwd=work, env=env,
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    site = wheel_env.venv.resolve()
    assert Path(out["gpuctl"]).resolve().is_relative_to(site), out  # the installed copy, not the checkout
    assert Path(out["share"]).resolve() == Path(out["gpuctl"]).resolve().parent / "_share"
    assert out["pycache"], "pip byte-compiled the package (the case that broke the build)"
    name, sha = out["keyring"]
    assert name.endswith(".pub") and len(sha) == 64
    repo_root = Path(out["repo"])
    dist = repo_root / "compute/cuda/repos/debian12/x86_64"
    assert (dist / "InRelease").is_file() and (dist / name).is_file()
    assert "Package: nvidia-driver" in (dist / "Packages").read_text()

    inventory = Path(out["inventory"])
    assert inventory == tmp_path / "state" / "gpuctl" / "lab" / "inventory.yaml"
    # the installed console script validates what the installed lab wrote
    check = subprocess.run([str(wheel_env.gpuctl), "inventory", "validate", str(inventory)], cwd=work, env=env,
                           capture_output=True, text=True, check=False, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    text = inventory.read_text()
    assert f"keyring_sha256: {sha}" in text and f"keyring_file: {name}" in text
    assert _git_status() == before  # nothing written into the checkout


@pytest.mark.parametrize("cause", [IsADirectoryError(21, "Is a directory", "/x/tools/__pycache__"),
                                   subprocess.CalledProcessError(2, ["dpkg-deb"]),
                                   ExecutionError("gpg --quick-generate-key failed: No agent running")])
def test_a_failed_standin_build_is_an_error_naming_its_cause(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                              cause: Exception) -> None:
    """`lab up` used to log a warning and write an inventory without a keyring."""
    from gpuctl.lab import nodes

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def broken(*_: object, **__: object) -> repo.RepoBuild:
        raise cause

    monkeypatch.setattr(repo, "build_repo", broken)
    with pytest.raises(ExecutionError, match="stand-in NVIDIA repository could not be built") as err:
        nodes._standin_repo()
    assert str(cause) in str(err.value)
