"""Deploy tier: roles cuda, cudnn, nccl, dcgm, ofed — pins, holds, services; converged = no change
(each role's own cases: tests/deploy/<role>/)."""

from __future__ import annotations

import pytest
from gpu_scenarios import inventory, pins_in, rerun_converged, run_role

pytestmark = pytest.mark.deploy

EXPECTED = {
    ("cuda", "ubuntu2204"): ["cuda-toolkit-13-0=13.0.2-1"],
    ("cudnn", "ubuntu2204"): ["libcudnn9-cuda-13=9.17.0.29-1", "libcudnn9-dev-cuda-13=9.17.0.29-1"],
    ("nccl", "ubuntu2204"): ["libnccl2=2.27.7-1+cuda13.0", "libnccl-dev=2.27.7-1+cuda13.0"],
    ("dcgm", "ubuntu2204"): ["datacenter-gpu-manager-4-cuda13=1:4.5.2-1", "datacenter-gpu-manager-4-core=1:4.5.2-1"],
    ("ofed", "ubuntu2204"): ["doca-ofed=3.2.1-1"],
    ("cuda", "debian12"): ["cuda-toolkit-13-0=13.0.2-1"],
    ("nccl", "debian12"): ["libnccl2=2.27.7-1+cuda13.0", "libnccl-dev=2.27.7-1+cuda13.0"],
    ("dcgm", "debian12"): ["datacenter-gpu-manager-4-cuda13=1:4.5.2-1", "datacenter-gpu-manager-4-core=1:4.5.2-1"],
}
SCENARIO = {"ubuntu2204": "ubuntu2204-fresh", "debian12": "debian12-fresh", "rhel9": "rocky9-fresh"}


@pytest.mark.parametrize(("role", "fam"), sorted(EXPECTED))
def test_fresh_apt_pins_and_holds(fake, tmp_path, role, fam):
    specs = fake.specs(inventory(tmp_path, fam), limit=["gpu-01"])
    h = run_role(fake, role, specs, SCENARIO[fam])
    assert h.status == "ok", h.error
    assert pins_in(h.execute_commands) == EXPECTED[(role, fam)]
    names = [p.split("=")[0] for p in EXPECTED[(role, fam)]]
    assert "apt-mark hold " + " ".join(names) in h.execute_commands


@pytest.mark.parametrize(("role", "nevras", "locks"), [
    ("cuda", ["cuda-toolkit-13-0-13.0.2-1"], ["cuda-toolkit-13-0-0:13.0.2-1"]),
    ("nccl", ["libnccl-2.27.7-1+cuda13.0", "libnccl-devel-2.27.7-1+cuda13.0"],
     ["libnccl-0:2.27.7-1+cuda13.0", "libnccl-devel-0:2.27.7-1+cuda13.0"]),
    ("dcgm", ["datacenter-gpu-manager-4-cuda13-1:4.5.2-1", "datacenter-gpu-manager-4-core-1:4.5.2-1"],
     ["datacenter-gpu-manager-4-cuda13-1:4.5.2-1", "datacenter-gpu-manager-4-core-1:4.5.2-1"]),
])
def test_fresh_rocky9_dnf_and_versionlock(fake, tmp_path, role, nevras, locks):
    specs = fake.specs(inventory(tmp_path, "rhel9"), limit=["gpu-01"])
    h = run_role(fake, role, specs, "rocky9-fresh")
    assert h.status == "ok", h.error
    assert h.execute_commands[:2] == ["dnf install -y --disableplugin=versionlock " + " ".join(nevras),
                                      "dnf versionlock add " + " ".join(locks)]


def test_interrupted_dpkg_is_finished_before_installing(fake, tmp_path):
    # the node was killed while cuda-toolkit was unpacking: apt would refuse every install
    # ("dpkg was interrupted") until dpkg --configure -a has run
    specs = fake.specs(inventory(tmp_path, "debian12"), limit=["gpu-01"])
    killed = ["cuda-toolkit-13-0\t13.0.2-1\tinstall ok unpacked", "##gpuctl-dpkg-interrupted"]
    h = run_role(fake, "cuda", specs, "debian12-fresh", packages=killed)
    assert h.status == "ok", h.error
    finish = "dpkg --force-confdef --force-confold --configure -a"
    configure = [i for i, c in enumerate(h.execute_commands) if finish in c]
    install = [i for i, c in enumerate(h.execute_commands) if "cuda-toolkit-13-0=13.0.2-1" in c]
    assert configure and install and configure[0] < install[0]
    # a healthy dpkg gets no configure step
    clean = run_role(fake, "cuda", specs, "debian12-fresh")
    assert not any("--configure -a" in c for c in clean.execute_commands)


def test_index_refreshed_only_when_a_pinned_version_is_unknown(fake, tmp_path):
    # the matrix moved to a release published after the node's last `apt-get update`: the
    # install is preceded by a guard that refreshes apt's index unless it knows every pin
    specs = fake.specs(inventory(tmp_path, "debian12"), limit=["gpu-01"])
    h = run_role(fake, "nccl", specs, "debian12-fresh")
    guard = [c for c in h.execute_commands if c.startswith("for p in ")]
    assert len(guard) == 1 and "libnccl2=2.27.7-1+cuda13.0" in guard[0] and "apt-get update" in guard[0]
    assert h.execute_commands.index(guard[0]) == h.execute_commands.index(
        next(c for c in h.execute_commands if "apt-get install" in c)) - 1
    import subprocess
    update = "DEBIAN_FRONTEND=noninteractive apt-get update -q"
    fake_update = guard[0].replace(update, "echo UPDATE")
    # this machine's apt knows no libnccl2: the guard refreshes; for a version it knows, it does not
    assert subprocess.run(["sh", "-c", fake_update], capture_output=True, text=True).stdout.strip() == "UPDATE"
    known = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "dpkg"], capture_output=True, text=True).stdout
    from gpuctl.operations import apt_index_guard
    quiet = apt_index_guard([f"dpkg={known}"]).replace(update, "echo UPDATE")
    assert subprocess.run(["sh", "-c", quiet], capture_output=True, text=True).stdout.strip() == ""


@pytest.mark.parametrize("role", ["cuda", "cudnn", "nccl", "dcgm", "ofed"])
def test_converged_no_change(fake, tmp_path, role):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    first = run_role(fake, role, specs, "ubuntu2204-fresh")
    h = rerun_converged(fake, role, specs, first)
    assert h.status == "ok", h.error
    assert h.changed_ops == [] and h.execute_commands == []
