"""Deploy tier: roles/bench_tools — nccl-tests from a verified source (or a package), the probe."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from gpu_scenarios import inventory, rerun_converged, run_role

from gpuctl.deploy_context import RunOptions
from gpuctl.errors import ParseError
from gpuctl.parsers.bandwidth import parse_bandwidth
from gpuctl.paths import templates_dir

pytestmark = pytest.mark.deploy
SHA = "38974e70342150ede0e3fb8fd24bfe60ccbde90fa20241716ba8bb338e6b61a0"
NVCC = "/usr/local/cuda-13.0/bin/nvcc"


def test_fresh_ubuntu2204_builds_nccl_tests_from_github(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    h = run_role(fake, "bench_tools", specs, "ubuntu2204-fresh", commands=[f"{NVCC}={NVCC}"])
    assert h.status == "ok", h.error
    cmds = h.execute_commands
    assert any(c.endswith("--no-install-recommends --allow-downgrades --allow-change-held-packages -o "
                          "Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold perftest fio "
                          "openmpi-bin libopenmpi-dev build-essential") for c in cmds)
    dl = [c for c in cmds if "curl -fsSL" in c]
    assert len(dl) == 1 and "https://github.com/NVIDIA/nccl-tests/archive/v2.17.6.tar.gz" in dl[0]
    assert f"echo '{SHA}  /opt/gpuctl/src/nccl-tests-2.17.6.tar.gz.gpuctl-download' | sha256sum -c --quiet" in dl[0]
    build = [c for c in cmds if "make -C" in c]
    assert len(build) == 1
    assert "MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi CUDA_HOME=/usr/local/cuda-13.0 NCCL_HOME=/usr" in build[0]
    assert cmds.index(build[0]) > cmds.index(dl[0])
    assert "/opt/gpuctl/bwprobe/bwprobe.cu" in h.files
    assert cmds[-1].startswith(
        f"{NVCC} -O2 -std=c++17 -o /usr/local/bin/gpuctl-bwprobe.new /opt/gpuctl/bwprobe/bwprobe.cu")


def test_mirror_source(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "debian12", mirror="http://10.0.2.2:8080/"), limit=["gpu-01"])
    h = run_role(fake, "bench_tools", specs, "debian12-fresh")
    assert any("http://10.0.2.2:8080/gpuctl/nccl-tests-2.17.6.tar.gz" in c for c in h.execute_commands)


def test_no_nvcc_no_compile(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    h = run_role(fake, "bench_tools", specs, "ubuntu2204-fresh", commands=[f"{NVCC}="])
    assert not any("nvcc" in c and "-o" in c for c in h.execute_commands)
    assert h.op("Compile the GPU bandwidth probe").status == "unchanged"


def test_package_path_installs_packages_and_builds_nothing(fake, tmp_path):
    """The lab (and any site with its own build) names packages instead of building."""
    specs = fake.specs(inventory(tmp_path, "debian12"), limit=["gpu-01"])
    opts = RunOptions(extra={"bench_tools_nccl_tests_package": "nccl-tests",
                             "bench_tools_bwprobe_package": "gpuctl-bwprobe"})
    h = run_role(fake, "bench_tools", specs, "debian12-fresh", options=opts, commands=[f"{NVCC}={NVCC}"])
    assert h.status == "ok", h.error
    installs = [c for c in h.execute_commands if "apt-get install" in c]
    assert len(installs) == 1 and installs[0].endswith(" nccl-tests gpuctl-bwprobe")
    assert not any("curl" in c or "make" in c or "nvcc" in c for c in h.execute_commands)
    assert h.files == {}


def test_converged_no_change(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    built = "/opt/gpuctl/nccl-tests-2.17.6/build/all_reduce_perf"
    have = [f"{NVCC}={NVCC}", f"{built}={built}", "/usr/local/bin/gpuctl-bwprobe=/usr/local/bin/gpuctl-bwprobe"]
    first = run_role(fake, "bench_tools", specs, "ubuntu2204-fresh", commands=have)
    h = rerun_converged(fake, "bench_tools", specs, first, commands=have,
                        extra_files=[f"{SHA} 644 /opt/gpuctl/src/nccl-tests-2.17.6.tar.gz"])
    assert h.status == "ok", h.error
    assert h.execute_commands == [] and h.changed_ops == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_bwprobe_compiles_and_speaks_the_parser_schema(tmp_path):
    exe = tmp_path / "bwprobe"
    subprocess.run(["nvcc", "-O2", "-std=c++17", "-o", str(exe), str(templates_dir() / "bench_tools" / "bwprobe.cu")],
                   check=True, capture_output=True, timeout=600)
    out = subprocess.run([str(exe), "16", "2"], capture_output=True, text=True, timeout=120)
    if out.returncode == 0:  # a GPU: real figures
        res = parse_bandwidth(out.stdout)
        assert res.gpus and all(g.h2d_gb_s and g.h2d_gb_s > 0 for g in res.gpus)
    else:  # no usable GPU: the probe reports why, in the schema, and the parser says so
        with pytest.raises(ParseError, match="could not run"):
            parse_bandwidth(out.stdout)
