"""bench_tools: what the smoke benchmarks run (nccl-tests, perftest, fio, Open MPI, bwprobe)."""

from gpuctl.components import Component
from gpuctl.knobs import NVCC_FLAGS, PACKAGE, SHA256, VERSION, Path, Url

_LIBS = ("/usr/lib", "/usr/lib64", "/usr/local", "/opt")
_BINS = ("/usr/local/bin", "/usr/local/sbin", "/opt/gpuctl")

COMPONENT = Component(
    name="bench_tools", order=150,
    summary="the benchmark tools",
    knobs={
        "bench_tools_packages_apt": PACKAGE,
        "bench_tools_packages_dnf": PACKAGE,
        "bench_tools_mpi_home_apt": Path(_LIBS, is_dir=True),
        "bench_tools_mpi_home_dnf": Path(_LIBS, is_dir=True),
        "bench_tools_nccl_tests_version": VERSION,
        "bench_tools_nccl_tests_sha256": SHA256,
        "bench_tools_nccl_tests_source": Url(schemes=("https", "http", "file"), words=("auto", "github", "mirror")),
        "bench_tools_nccl_tests_github_url": Url(schemes=("https",)),
        "bench_tools_nccl_tests_dir": Path(("/opt/gpuctl",), template=True),
        "bench_tools_bin_dir": Path(_BINS, is_dir=True),
        "bench_tools_nccl_tests_package": PACKAGE,
        "bench_tools_bwprobe_source_path": Path(("/opt/gpuctl",)),
        "bench_tools_bwprobe_binary": Path(_BINS),
        "bench_tools_bwprobe_nvcc_flags": NVCC_FLAGS,
        "bench_tools_bwprobe_package": PACKAGE,
    },
)
