"""bench_tools: nccl-tests, perftest, fio, Open MPI and the GPU bandwidth probe.

nccl-tests — two explicit paths, chosen by knobs (never by guessing):
- real clusters (default): the pinned source release (bench_tools_nccl_tests_version),
  downloaded from GitHub or the cluster mirror (<mirror root>/gpuctl/nccl-tests-<ver>.tar.gz),
  checked against bench_tools_nccl_tests_sha256 before it is unpacked, built with
  MPI=1 against the installed CUDA, NCCL (/usr) and Open MPI, its *_perf binaries linked
  into /usr/local/bin. Rebuilt only when the tarball changed or the build is missing.
- bench_tools_nccl_tests_package set (a prebuilt package from the cluster's repository,
  e.g. a site build; inventories/lab.yaml names one): that package is installed instead;
  the source steps report themselves not applicable.

The bandwidth probe: templates/bench_tools/bwprobe.cu (prints gpuctl-bwprobe JSON v1,
see gpuctl/parsers/bandwidth.py) compiled with /usr/local/cuda-X.Y/bin/nvcc when nvcc
exists and the source changed or the binary is missing — or, with
bench_tools_bwprobe_package set (a prebuilt package), that package.
"""

from __future__ import annotations

import logging
import shlex

from pyinfra import host
from pyinfra.api import deploy, operation

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.facts.system import CommandPaths, FileStates
from gpuctl.knobs import tokens
from gpuctl.operations import (
    fetch_verified,
    install_packages,
    read_template_file,
    role_knobs,
    sh,
    write_file,
)
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)
NVIDIA_BASE = "developer.download.nvidia.com"


def nccl_tests_url(spec: NodeSpec, source: str, version: str, github_url: str) -> str:
    """Where the nccl-tests tarball comes from (see defaults.yaml)."""
    mirror_root = spec.repo.url.split("/compute/cuda/repos/", 1)[0]
    has_mirror = spec.repo.origin != NVIDIA_BASE
    if source == "auto":
        source = "mirror" if has_mirror else "github"
    if source == "github":
        return github_url.format(version=version)
    if source == "mirror":
        return f"{mirror_root}/gpuctl/nccl-tests-{version}.tar.gz"
    return source.format(version=version)


@operation(is_idempotent=False)
def build_nccl_tests(tarball: str, build_dir: str, cuda_home: str, mpi_home: str, bin_dir: str, skip_reason: str = ""):
    """Unpack the verified tarball into a clean tree, `make MPI=1`, link the *_perf binaries."""
    if skip_reason:
        host.noop(skip_reason)
        return
    d = shlex.quote(build_dir)
    yield (f"rm -rf {d} && mkdir -p {d} && tar -xzf {shlex.quote(tarball)} -C {d} --strip-components=1"
           f" && make -C {d} -j\"$(nproc)\" MPI=1 MPI_HOME={shlex.quote(mpi_home)} CUDA_HOME={shlex.quote(cuda_home)}"
           f" NCCL_HOME=/usr && for b in {d}/build/*_perf; do ln -sf \"$b\" {shlex.quote(bin_dir)}/; done")


@operation(is_idempotent=False)
def compile_bwprobe(nvcc: str, source: str, binary: str, flags: list[str], skip_reason: str = ""):
    """Compile the probe with the installed nvcc; `flags` are argv tokens (each quoted)."""
    if skip_reason:
        host.noop(skip_reason)
        return
    yield f"{sh(nvcc, *flags, '-o', binary + '.new', source)} && {sh('mv', binary + '.new', binary)}"


@deploy("bench_tools")
def install() -> None:
    spec = node_spec()
    k = role_knobs("bench_tools")
    apt = spec.package_manager == "apt"
    cuda = spec.components["cuda"]
    cuda_xy = ".".join(cuda.version.split(".")[:2])
    cuda_home = f"/usr/local/cuda-{cuda_xy}"
    nvcc = f"{cuda_home}/bin/nvcc"
    ver = str(k["bench_tools_nccl_tests_version"])
    build_dir = str(k["bench_tools_nccl_tests_dir"]).format(version=ver)
    tarball = f"/opt/gpuctl/src/nccl-tests-{ver}.tar.gz"
    bin_dir = str(k["bench_tools_bin_dir"])
    probe_src, probe_bin = str(k["bench_tools_bwprobe_source_path"]), str(k["bench_tools_bwprobe_binary"])
    nccl_pkg, probe_pkg = k["bench_tools_nccl_tests_package"], k["bench_tools_bwprobe_package"]

    snap = read_packages(spec.package_manager)
    files = host.get_fact(FileStates, paths=(tarball, probe_src))
    have = host.get_fact(CommandPaths, names=(f"{build_dir}/build/all_reduce_perf", probe_bin))

    distro = list(k["bench_tools_packages_apt"] if apt else k["bench_tools_packages_dnf"])  # type: ignore[arg-type]
    extra = [str(p) for p in (nccl_pkg, probe_pkg) if p]
    install_packages(name="Install benchmark tools (" + ", ".join(distro + extra) + ")",
                     packages=distro + extra, snapshot=snap, label="benchmark tools")

    # nccl-tests from source (default) or from bench_tools_nccl_tests_package
    by_pkg = f"nccl-tests comes from package {nccl_pkg}" if nccl_pkg else ""
    url = nccl_tests_url(spec, str(k["bench_tools_nccl_tests_source"]), ver,
                         str(k["bench_tools_nccl_tests_github_url"]))
    sha = str(k["bench_tools_nccl_tests_sha256"])
    if by_pkg:
        write_file(name=f"Download nccl-tests {ver} (sha256 {sha[:12]}…)", path=tarball, content=None,
                   states=files, skip_reason=by_pkg)
        built_before = True
        fetched = None
    else:
        fetched = fetch_verified(name=f"Download nccl-tests {ver} (sha256 {sha[:12]}…)", url=url, dest=tarball,
                                 sha256=sha, states=files)
        built_before = bool(have.get(f"{build_dir}/build/all_reduce_perf"))
    mpi_home = str(k["bench_tools_mpi_home_apt"] if apt else k["bench_tools_mpi_home_dnf"])
    build_nccl_tests(name=f"Build nccl-tests {ver} (MPI=1, CUDA {cuda_xy}, NCCL {spec.components['nccl'].version})",
                     tarball=tarball, build_dir=build_dir, cuda_home=cuda_home, mpi_home=mpi_home,
                     bin_dir=bin_dir, skip_reason=by_pkg,
                     _if=lambda: bool(by_pkg) or not built_before or bool(fetched and fetched.did_change()))

    # the bandwidth probe
    by_probe_pkg = f"gpuctl-bwprobe comes from package {probe_pkg}" if probe_pkg else ""
    src = write_file(name="Write the GPU bandwidth probe source", path=probe_src,
                     content=read_template_file("bench_tools", "bwprobe.cu"), states=files,
                     skip_reason=by_probe_pkg)
    probe_built = bool(have.get(probe_bin))

    def nvcc_present() -> bool:
        found = bool(host.get_fact(CommandPaths, names=(nvcc,)).get(nvcc))
        if not found:
            log.info("%s: %s not found; the bandwidth probe is not compiled", host.name, nvcc)
        return found

    compile_bwprobe(name=f"Compile the GPU bandwidth probe with CUDA {cuda_xy} nvcc", nvcc=nvcc, source=probe_src,
                    binary=probe_bin, skip_reason=by_probe_pkg,
                    flags=tokens("bench_tools_bwprobe_nvcc_flags", k["bench_tools_bwprobe_nvcc_flags"]),  # type: ignore[arg-type]
                    _if=[lambda: bool(by_probe_pkg) or src.did_change() or not probe_built,
                         lambda: bool(by_probe_pkg) or nvcc_present()])
