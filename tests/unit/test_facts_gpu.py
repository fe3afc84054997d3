"""Unit: the GPU roles' fact parsers on recorded / documented outputs."""

from __future__ import annotations

import subprocess

import pytest
from pyinfra.facts.server import KernelModules

from gpuctl.facts.nvidia import NvidiaModule, parse_nvidia_module
from gpuctl.facts.packages import DebPackages, RpmPackages
from gpuctl.facts.system import (
    BootInfo,
    CommandPaths,
    FileStates,
    RepoFacts,
    ServiceStates,
    apt_lists_prefix,
)
from gpuctl.parsers.boot import parse_boot
from gpuctl.parsers.files import parse_command_paths, parse_file_states
from gpuctl.parsers.kernel import parse_proc_modules
from gpuctl.parsers.packages import parse_dnf_modules, parse_dpkg, parse_rpm
from gpuctl.parsers.systemd import parse_systemctl_show

# seen on a real H200 node (shared/reference/pyinfra-notes.md)
H200_NVIDIA_LINE = "nvidia 14299136 - - Live 0x0000000000000000 (O)"


def test_proc_modules_dash_use_count():
    mods = parse_proc_modules("\n".join([
        H200_NVIDIA_LINE,
        "nvidia_uvm 1798144 2 - Live 0x0000000000000000 (O)",
        "ib_core 462848 8 rdma_rxe,ib_uverbs,rdma_ucm, Live 0xffffffffc0a2b000",
        "garbage",
    ]))
    assert set(mods) == {"nvidia", "nvidia_uvm", "ib_core"}
    assert mods["nvidia"].use_count is None and mods["nvidia"].size == 14299136 and mods["nvidia"].state == "Live"
    assert mods["nvidia_uvm"].use_count == 2
    assert mods["ib_core"].used_by == ("rdma_rxe", "ib_uverbs", "rdma_ucm")


def test_pyinfra_kernelmodules_crashes_on_that_line():
    """Why gpuctl has its own fact: pyinfra 3.10's parser cannot read the H200 line."""
    fact = KernelModules()
    fact._kernel = "Linux"  # what its command() sets from the Kernel fact
    with pytest.raises(ValueError, match="invalid literal for int"):
        fact.process([H200_NVIDIA_LINE])


def test_dpkg_versions_holds_and_states():
    snap = parse_dpkg([
        "nvidia-driver-580-open\t580.95.05-0ubuntu1\thold ok installed",
        "datacenter-gpu-manager-4-core\t1:4.5.2-1\tinstall ok installed",
        "nvidia-driver-535-server\t535.183.01-0ubuntu0.22.04.1\tdeinstall ok config-files",
        "libc6:amd64\t2.36-9+deb12u9\tinstall ok installed",
        "broken line",
    ])
    assert snap.has("nvidia-driver-580-open", "580.95.05-0ubuntu1")
    assert snap.held("nvidia-driver-580-open", "580.95.05-0ubuntu1")
    assert snap.has("datacenter-gpu-manager-4-core", "1:4.5.2-1")
    assert not snap.has("datacenter-gpu-manager-4-core", "4.5.2-1")  # epoch matters: exact string
    assert not snap.held("datacenter-gpu-manager-4-core", "1:4.5.2-1")
    assert "nvidia-driver-535-server" not in snap.packages  # config-files only
    assert snap.version("libc6") == "2.36-9+deb12u9"


def test_dpkg_interrupted_install_is_seen():
    # a node killed mid-install: one package unpacked, one needing reinstall, dpkg's journal not empty
    snap = parse_dpkg([
        "cuda-toolkit-13-0\t13.0.2-1\tinstall ok unpacked",
        "libcudnn9-cuda-13\t9.17.0.29-1\tinstall reinstreq half-installed",
        "libc6\t2.36-9+deb12u9\tinstall ok installed",
    ])
    assert snap.interrupted and snap.unfinished == ("cuda-toolkit-13-0", "libcudnn9-cuda-13")
    assert not snap.has("cuda-toolkit-13-0", "13.0.2-1")  # unpacked is not installed
    journal = parse_dpkg(["libc6\t2.36-9+deb12u9\tinstall ok installed", "##gpuctl-dpkg-interrupted"])
    assert journal.interrupted and journal.unfinished == ("<dpkg journal>",)
    assert not parse_dpkg(["libc6\t2.36-9+deb12u9\tinstall ok installed"]).interrupted


def test_dpkg_fact_command_prints_the_journal_mark_unquoted_by_the_shell(tmp_path):
    # the mark starts with '#': it must reach echo quoted, or the shell drops it as a comment
    import subprocess

    from gpuctl.facts.packages import DebPackages
    from gpuctl.parsers.packages import DPKG_INTERRUPTED_MARK
    cmd = DebPackages().command().replace("/var/lib/dpkg/updates", str(tmp_path))
    assert DPKG_INTERRUPTED_MARK not in subprocess.run(["sh", "-c", cmd], capture_output=True, text=True).stdout
    (tmp_path / "0001").write_text("")
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True).stdout
    assert out.splitlines()[-1] == DPKG_INTERRUPTED_MARK


def test_rpm_versions_and_versionlocks():
    snap = parse_rpm([
        "nvidia-open\t3:580.95.05-1.el9",
        "libnccl\t0:2.27.7-1+cuda13.0",
        "##gpuctl-versionlock",
        "Last metadata expiration check: 0:10:11 ago on Mon 01 Sep 2025.",
        "nvidia-open-3:580.95.05-1.el9.*",
        "libnccl-0:2.27.7-1+cuda13.0.*",
    ])
    assert snap.has("nvidia-open", "3:580.95.05-1.el9")
    assert snap.has("libnccl", "2.27.7-1+cuda13.0")  # no epoch in the pin = epoch 0
    assert snap.held("nvidia-open", "3:580.95.05-1.el9")
    assert snap.held("libnccl", "2.27.7-1+cuda13.0")
    assert not snap.held("nvidia-open", "3:580.82.07-1.el9")
    assert snap.locked_names() == {"nvidia-open", "libnccl"}


def test_dnf_module_streams():
    assert parse_dnf_modules([
        "[nvidia-driver]", "name=nvidia-driver", "stream=580-open", "profiles=", "state=enabled",
        "[nodejs]", "name=nodejs", "stream=18", "profiles=", "state=disabled",
    ]) == {"nvidia-driver": "580-open"}


def test_boot_and_nvidia_module():
    st = parse_nvidia_module(["grub=", "running=6.1.0-31-amd64", "boot=6.1.0-31-amd64",
                              "boot_source=running kernel", "args=", "loaded=", "installed=580.95.05"])
    assert st.boot.grub is None and not st.boot.boots_through_grub
    assert st.loaded_version is None and st.installed_version == "580.95.05"
    assert st.needs_reboot("580.95.05")
    b = parse_boot(["grub=rhel", "running=5.14.0-427.el9", "boot=5.14.0-503.el9", "boot_source=grubby",
                    "args=ro rhgb quiet iommu=pt"])
    assert b.grub == "rhel" and b.boot_kernel == "5.14.0-503.el9" and "iommu=pt" in b.default_args.split()


def test_files_services_commands():
    fs = parse_file_states(["a" * 64 + " 644 /etc/x y.conf", "missing - /etc/gone"])
    assert fs["/etc/x y.conf"].mode == "644" and fs["/etc/x y.conf"].exists
    assert not fs["/etc/gone"].exists
    sv = parse_systemctl_show("Id=nvidia-dcgm.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"
                              "UnitFileState=enabled\n\nId=nvidia-persistenced.service\nLoadState=not-found\n"
                              "ActiveState=inactive\nSubState=dead\nUnitFileState=\nbad\n")
    assert sv["nvidia-dcgm"].active == "active" and sv["nvidia-dcgm"].enabled == "enabled"
    assert sv["nvidia-dcgm"].exists and not sv["nvidia-persistenced"].exists
    assert parse_command_paths(["nvcc=", "/usr/bin/env=/usr/bin/env"]) == {"nvcc": None, "/usr/bin/env": "/usr/bin/env"}


def test_apt_lists_prefix():
    assert apt_lists_prefix("https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/") == \
        "developer.download.nvidia.com_compute_cuda_repos_ubuntu2204_x86%5f64"
    assert apt_lists_prefix("http://10.0.2.2:8080/") == "10.0.2.2:8080"


@pytest.mark.parametrize("command", [
    BootInfo().command(), NvidiaModule().command(), DebPackages().command(), RpmPackages().command(),
    FileStates().command(("/etc/hostname", "/nonexistent/x")), ServiceStates().command(("ssh", "nope")),
    CommandPaths().command(("sh", "/bin/sh", "no-such-tool")),
    RepoFacts().command("/nonexistent/a.pub", "/nonexistent/k.gpg", "nothing"),
])
def test_fact_commands_run_and_exit_zero_here(command):
    """Every fact command is valid sh and exits 0 even where what it reads is absent."""
    r = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_file_states_reads_real_files(tmp_path):
    p = tmp_path / "f.conf"
    p.write_text("hello\n")
    p.chmod(0o640)
    out = subprocess.run(["sh", "-c", FileStates().command((str(p), str(tmp_path / "none")))],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    st = parse_file_states(out)
    import hashlib

    assert st[str(p)].sha256 == hashlib.sha256(b"hello\n").hexdigest() and st[str(p)].mode == "640"
    assert not st[str(tmp_path / "none")].exists
