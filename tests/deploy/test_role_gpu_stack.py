"""Deploy tier: every GPU-stack role in provision order, composed by deploy/provision.py —
a fresh Ubuntu 22.04 node converges with one reboot; the converged node changes nothing,
reboots nothing, and costs only the facts read at prepare."""

from __future__ import annotations

import importlib.util

import pytest
from gpu_scenarios import KEY_SHA, converged_files, inventory, responses

from gpuctl.deploy_context import RunOptions
from gpuctl.paths import deploy_dir
from gpuctl.runner.reboot import BOOT_ID_COMMAND, REBOOT_COMMAND
from gpuctl.runner.roles import select_roles

pytestmark = pytest.mark.deploy
GPU_ROLES = ("base", "nvidia_repo", "nvidia_driver", "fabricmanager", "cuda", "cudnn", "nccl", "dcgm", "ofed",
             "peermem", "gds", "bench_tools")
FAST = RunOptions(extra={"nvidia_driver_reboot_delay_s": "0", "nvidia_driver_reboot_interval_s": "0"})
NVCC = "/usr/local/cuda-13.0/bin/nvcc"
BUILT = "/opt/gpuctl/nccl-tests-2.17.6/build/all_reduce_perf"


def _provision():
    spec = importlib.util.spec_from_file_location("gpuctl_deploy.provision", deploy_dir() / "provision.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.provision


def test_fresh_then_converged(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    choices = select_roles(specs, only=GPU_ROLES)
    state = {"boot": 1, "loaded": ""}

    def reboot(cmd):
        state["boot"] += 1
        state["loaded"] = "580.95.05"
        return ""

    def module(cmd):
        return ["grub=debian", "running=5.15.0-131-generic", "boot=5.15.0-131-generic", "boot_source=x",
                "args=", f"loaded={state['loaded']}", "installed=580.95.05"]

    fresh = {**responses("ubuntu2204-fresh", **{"nvidia-module": module, "commands": [f"{NVCC}={NVCC}"]}),
             REBOOT_COMMAND: reboot, BOOT_ID_COMMAND: lambda c: f"boot-{state['boot']}",
             "cat /sys/module/nvidia/version": lambda c: state["loaded"]}
    run = fake.run(_provision(), specs, args=(choices,), compose=True, responses=fresh, options=FAST)
    first = run["gpu-01"]
    assert first.status == "ok", first.error
    assert first.rebooted and state["boot"] == 2
    roles_changed = {o.role for o in first.ops if o.status == "changed"}
    assert roles_changed == set(GPU_ROLES)

    tarball_sha = "38974e70342150ede0e3fb8fd24bfe60ccbde90fa20241716ba8bb338e6b61a0"
    files = [*converged_files(first), f"{KEY_SHA} 644 /etc/apt/keyrings/gpuctl-nvidia-cuda.pub",
             f"{tarball_sha} 644 /opt/gpuctl/src/nccl-tests-2.17.6.tar.gz"]
    have = [f"{NVCC}={NVCC}", f"{BUILT}={BUILT}", "/usr/local/bin/gpuctl-bwprobe=/usr/local/bin/gpuctl-bwprobe"]
    again = fake.run(_provision(), specs, args=(choices,), compose=True, options=FAST,
                     responses=responses("ubuntu2204-converged", files=files, commands=have))["gpu-01"]
    assert again.status == "ok", again.error
    assert again.changed_ops == []
    assert again.execute_commands == []
    assert not again.rebooted
    # one fact per question per role, all at prepare: base 4, nvidia_repo 2, nvidia_driver 3,
    # fabricmanager 2, cuda 2, cudnn 1, nccl 1, dcgm 2, ofed 1, peermem 2, gds 3, bench_tools 3,
    # except the package listing: read once per host, not by each of the 10 roles that ask (issue 18)
    packages = [c for c in again.prepare_commands if c.startswith(": gpuctl-fact packages;")]
    assert len(packages) == 1
    assert len(again.prepare_commands) == 26 - 9
    assert len(again.ops) == len(first.ops)
