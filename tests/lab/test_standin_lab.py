"""The stand-in NVIDIA stack inside a real lab guest: signed apt repository, exact
dependency pins, the real stand-in kernel module, nvidia-smi and one fault."""

from __future__ import annotations

import pytest

from gpuctl.lab.ssh import ssh_run
from gpuctl.lab.standin.faults import apply_fault
from gpuctl.lab.standin.profile import push_profile
from gpuctl.lab.standin.repo import build_repo
from gpuctl.lab.state import LabState
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q

pytestmark = pytest.mark.lab

DRIVER = "580.95.05"
PKG = f"{DRIVER}-1"
LIST = "/etc/apt/sources.list.d/gpuctl-standin-test.list"
KEYRING = "/usr/share/keyrings/gpuctl-standin-test.gpg"


def _sh(node: str, script: str, state: LabState, timeout: float = 600) -> str:
    proc = ssh_run(node, ["sh", "-c", script], state=state, timeout=timeout)
    assert proc.returncode == 0, f"{node}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_standin_stack_in_a_guest(lab: LabState) -> None:
    """On a bare node: install from the signed repository by hand, check, purge again. On a
    node gpuctl already provisioned (a full lab run), the same checks read what is there and
    nothing is installed or removed (later tests need the provisioned stack)."""
    built = build_repo()
    node = lab.nodes[-1]
    push_profile(node.name, lab.sku, node.index, state=lab)
    url = f"http://10.0.2.2:{lab.repo_port}/compute/cuda/repos/debian12/x86_64/"
    status = ssh_run(node.name, "dpkg-query -W -f='${db:Status-Abbrev}' nvidia-driver", state=lab).stdout
    provisioned = status[1:2] == "i"
    try:
        if provisioned:
            key_sha = _sh(node.name, f"curl -sf {url}{built.keyring_file} | sha256sum", lab)
            assert key_sha.split()[0] == built.keyring_sha256
            _check_stack(node.name, lab)
            return
        key_sha = _sh(node.name, f"curl -sf {url}{built.keyring_file} | tee /tmp/standin.pub | sha256sum", lab)
        assert key_sha.split()[0] == built.keyring_sha256
        _sh(node.name, f"gpg --dearmor < /tmp/standin.pub > {KEYRING}\n"
                       f"echo 'deb [signed-by={KEYRING}] {url} /' > {LIST}\n"
                       "printf 'Acquire::http::Proxy::10.0.2.2 \"DIRECT\";\\n' > /etc/apt/apt.conf.d/00standin-test\n"
                       "apt-get update\n"
                       f"DEBIAN_FRONTEND=noninteractive apt-get install -y nvidia-driver={PKG}", lab)
        _check_stack(node.name, lab)
    finally:
        if not provisioned:
            ssh_run(node.name, ["sh", "-c", "rmmod nvidia 2>/dev/null; DEBIAN_FRONTEND=noninteractive apt-get "
                                "purge -y nvidia-driver nvidia-kernel-open-dkms nvidia-smi libcuda1 libnvidia-ml1 "
                                ">/dev/null; "
                                f"rm -f {LIST} {KEYRING} /etc/apt/apt.conf.d/00standin-test /tmp/standin.pub; "
                                "apt-get update >/dev/null 2>&1 || true"], state=lab, timeout=600)


def _check_stack(name: str, lab: LabState) -> None:
    """Exact pins, the real stand-in module loaded at the driver's version, nvidia-smi, one fault."""
    versions = dict(line.split("=", 1) for line in _sh(
        name, "dpkg-query -W -f '${Package}=${Version}\\n' nvidia-driver nvidia-kernel-open-dkms "
              "nvidia-smi libcuda1 libnvidia-ml1", lab).split())
    assert versions == {p: PKG for p in ("nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-smi", "libcuda1",
                                         "libnvidia-ml1")}
    kver = _sh(name, "uname -r", lab).strip()
    out = _sh(name, f"modprobe nvidia && cat /sys/module/nvidia/version && modinfo -k {kver} -F version "
                    "nvidia && head -n 1 /proc/driver/nvidia/version", lab).splitlines()
    assert out[0] == out[1] == DRIVER
    assert out[2].startswith(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {DRIVER}  Release Build")
    table = _sh(name, "nvidia-smi", lab)
    assert table.count("NVIDIA H100 80GB HBM3") == 8 and f"Driver Version: {DRIVER}" in table
    apply_fault(name, "pcie_x8", gpu=3, state=lab)
    try:
        q = parse_nvidia_smi_q(_sh(name, "nvidia-smi -q", lab))
        assert [g.pcie_width_current for g in q.gpus] == [16, 16, 16, 8, 16, 16, 16, 16]
    finally:
        apply_fault(name, "pcie_x8", clear=True, state=lab)
    q = parse_nvidia_smi_q(_sh(name, "nvidia-smi -q", lab))
    assert {g.pcie_width_current for g in q.gpus} == {16}
