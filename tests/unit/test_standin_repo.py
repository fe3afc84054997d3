"""The stand-in NVIDIA repository: exact names, versions and Depends from the matrices,
a flat index, and a Release signed with the lab key that gpgv verifies."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuctl.errors import InputError
from gpuctl.lab.standin import kmod, repo
from gpuctl.matrix import load_matrix, matrix_names

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("dpkg-deb", "dpkg-scanpackages", "gpg", "gpgv")),
    reason="needs dpkg-dev and gnupg",
)
KVER = "6.1.0-test-amd64"
_REAL_BUILD = kmod.build_modules  # the module-scoped fixture below replaces it while it lives


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> repo.RepoBuild:
    base = tmp_path_factory.mktemp("standin")
    fake_ko = base / "ko"
    fake_ko.mkdir()

    def fake_build(kind: str, version: str, **_: object) -> dict[str, Path]:
        out = {}
        for m in kmod.KINDS[kind]:
            path = fake_ko / f"{kind}-{version}-{m.file}.ko"
            path.write_text(f"{m.name} {version}\n")
            out[m.file] = path
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(kmod, "build_modules", fake_build)
    try:
        yield repo.build_repo(base / "repo", image_root=base, kernel_version=KVER, key_dir=base / "key")
    finally:
        mp.undo()


def _packages(build: repo.RepoBuild) -> list[dict[str, str]]:
    text = (build.dirs["debian12"] / "Packages").read_text()
    out = []
    for stanza in text.strip().split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if not line.startswith(" ") and ":" in line:
                k, v = line.split(":", 1)
                fields[k] = v.strip()
        out.append(fields)
    return out


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True).stdout.strip()


def test_every_matrix_package_is_there_at_its_exact_version(built: repo.RepoBuild) -> None:
    index = {(p["Package"], p["Version"]) for p in _packages(built)}
    for name in matrix_names():
        m = load_matrix(name).matrix
        for component, pkgs in m.packages["debian12"].items():
            for pkg in pkgs:
                assert (pkg.name, pkg.version) in index, (name, component, pkg.pin)
    assert ("datacenter-gpu-manager-4-core", "1:4.5.2-1") in index  # epoch kept
    assert ("libnccl2", "2.27.7-1+cuda13.0") in index


def test_dependency_graph(built: repo.RepoBuild) -> None:
    dist = built.dirs["debian12"]
    assert _field(dist / "nvidia-driver_580.95.05-1_amd64.deb", "Depends") == (
        "nvidia-kernel-open-dkms (= 580.95.05-1), nvidia-smi (= 580.95.05-1), libcuda1 (= 580.95.05-1), "
        "libnvidia-ml1 (= 580.95.05-1)")
    assert _field(dist / "nvidia-fabricmanager_580.95.05-1_amd64.deb", "Depends") == \
        "nvidia-kernel-open-dkms (= 580.95.05-1)"
    assert _field(dist / "nvidia-fabricmanager-570_570.133.20-1_amd64.deb", "Depends") == \
        "nvidia-kernel-open-dkms (= 570.133.20-1)"
    assert _field(dist / "libnccl-dev_2.27.7-1+cuda13.0_amd64.deb", "Depends") == "libnccl2 (= 2.27.7-1+cuda13.0)"
    assert _field(dist / "datacenter-gpu-manager-4-cuda13_4.5.2-1_amd64.deb", "Depends") == \
        "datacenter-gpu-manager-4-core (= 1:4.5.2-1)"
    assert _field(dist / "datacenter-gpu-manager-4-core_4.5.2-1_amd64.deb", "Version") == "1:4.5.2-1"
    # branch-named fabric managers install the same files: they conflict, like the real ones
    assert "nvidia-fabricmanager-570" in _field(dist / "nvidia-fabricmanager_580.95.05-1_amd64.deb", "Conflicts")


def test_contents_at_the_real_paths(built: repo.RepoBuild) -> None:
    dist = built.dirs["debian12"]

    def listing(deb: str) -> str:
        return subprocess.run(["dpkg-deb", "-c", str(dist / deb)], capture_output=True, text=True,
                              check=True).stdout

    assert f"./lib/modules/{KVER}/updates/dkms/nvidia.ko" in listing("nvidia-kernel-open-dkms_580.95.05-1_amd64.deb")
    assert "./usr/bin/nvidia-smi" in listing("nvidia-smi_580.95.05-1_amd64.deb")
    assert "./usr/lib/x86_64-linux-gnu/libnccl.so.2.27.7" in listing("libnccl2_2.27.7-1+cuda13.0_amd64.deb")
    cuda = listing("cuda-toolkit-13-0_13.0.2-1_amd64.deb")
    assert "./usr/local/cuda-13.0/bin/nvcc" in cuda and "./usr/local/cuda-13.0/version.json" in cuda
    assert "./lib/systemd/system/nvidia-fabricmanager.service" in listing(
        "nvidia-fabricmanager_580.95.05-1_amd64.deb")
    assert "./lib/systemd/system/nvidia-dcgm.service" in listing("datacenter-gpu-manager-4-core_4.5.2-1_amd64.deb")
    assert "./usr/include/x86_64-linux-gnu/cudnn_version_v9.h" in listing(
        "libcudnn9-dev-cuda-13_9.17.0.29-1_amd64.deb")
    postinst = subprocess.run(["dpkg-deb", "-I", str(dist / "nvidia-kernel-open-dkms_580.95.05-1_amd64.deb"),
                               "postinst"], capture_output=True, text=True, check=True).stdout
    assert f"depmod -a {KVER}" in postinst


def test_release_is_signed_with_the_published_key(built: repo.RepoBuild, tmp_path: Path) -> None:
    dist = built.dirs["debian12"]
    key = dist / built.keyring_file
    assert hashlib.sha256(key.read_bytes()).hexdigest() == built.keyring_sha256
    assert repo.keyring_info(built.root.parent / "key") == (built.keyring_file, built.keyring_sha256)
    keyring = tmp_path / "lab.gpg"
    subprocess.run(["gpg", "--batch", "--homedir", str(tmp_path), "--dearmor", "-o", str(keyring), str(key)],
                   check=True, capture_output=True)
    for args in (["InRelease"], ["Release.gpg", "Release"]):
        proc = subprocess.run(["gpgv", "--keyring", str(keyring), *[str(dist / a) for a in args]],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
    release = (dist / "Release").read_text()
    assert hashlib.sha256((dist / "Packages.gz").read_bytes()).hexdigest() in release
    # a tampered Release fails verification
    bad = tmp_path / "Release"
    bad.write_text(release.replace("x86_64", "arm64"))
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(dist / "Release.gpg"), str(bad)],
                          capture_output=True, check=False).returncode != 0


def test_rebuild_is_cached_until_an_input_changes(built: repo.RepoBuild) -> None:
    again = repo.build_repo(built.root, image_root=built.root.parent, kernel_version=KVER,
                            key_dir=built.root.parent / "key")
    assert again.cached and again.packages == built.packages and again.seconds < 5


def test_unknown_family_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        repo.build_repo(tmp_path, families=("rhel9",), image_root=tmp_path, kernel_version=KVER,
                        key_dir=tmp_path / "key")


def test_module_source_carries_name_and_version() -> None:
    src = kmod.render_source("nvidia", kmod.KINDS["nvidia"][0], "580.95.05", "gcc version 12.2.0", "Thu Sep  4")
    assert 'MODULE_VERSION("580.95.05")' in src
    assert "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build" in src
    uvm = kmod.render_source("nvidia", kmod.KINDS["nvidia"][1], "580.95.05")
    assert "nvidia_standin_version" in uvm and "proc_create_single" in uvm  # uses nvidia's symbol


@pytest.mark.slow
def test_real_module_builds_against_the_lab_image(tmp_path: Path) -> None:
    from gpuctl.lab.image import load_image

    image = load_image()
    if image is None:
        pytest.skip("the lab image is not built")
    kos = _REAL_BUILD("nvidia", "580.95.05", image_root=image.root, kernel_version=image.kernel_version,
                             cache_dir=tmp_path)
    assert _modinfo(kos["nvidia"], "version") == "580.95.05"
    assert _modinfo(kos["nvidia-uvm"], "depends") == "nvidia"


def _modinfo(ko: Path, field: str) -> str:
    """`modinfo -F field` where kmod is installed; else the module's .modinfo strings read
    directly (the build host needs no kmod: the module is built against the image)."""
    if shutil.which("modinfo"):
        return subprocess.run(["modinfo", "-F", field, str(ko)], capture_output=True, text=True,
                              check=True).stdout.strip()
    found = re.search(rb"(?:^|\x00)" + field.encode() + rb"=([^\x00]*)", Path(ko).read_bytes())
    assert found, f"{ko}: no {field}= in .modinfo"
    return found.group(1).decode()


def test_no_gpg_agent_outlives_the_build(built: repo.RepoBuild) -> None:
    """Key generation and signing start a gpg-agent for the key folder; it used to stay
    running after the build (one per test run's folder, never reaped)."""
    key_dir = str(built.root.parent / "key")
    agents = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"gpg-agent") and key_dir.encode() in argv:
                agents.append(proc.name)
    assert agents == [], f"gpg-agent still running for {key_dir}: pids {agents}"
