"""The lab's stand-in NVIDIA apt repository, generated from the shipped matrices.

For each OS family (``debian12`` for the lab guests; ``ubuntu2204``/``ubuntu2404`` on
request) and every matrix in `gpuctl.matrix.matrix_names()`, real ``.deb`` packages are
built with ``dpkg-deb`` carrying the matrix's exact names and versions (epochs
included) and the real dependency pins (driver meta → its kernel module, utils and
libraries at the same version; fabric manager → the driver's kernel module package at
the *same* version, so the two cannot differ; ``libnccl-dev`` → ``libnccl2`` …). Their
contents: systemd units whose daemons are harmless stand-ins, files at the real paths
(``/usr/local/cuda-X.Y/bin/nvcc``, ``version.json``, ``libnccl.so.2.27.7``,
``cudnn_version_v9.h`` …), the emulated hardware tools (``tools/labhw.py``) and the
real stand-in kernel modules (`gpuctl.lab.standin.kmod`).

Layout, like NVIDIA's flat CUDA network repository::

    <root>/compute/cuda/repos/<family>/x86_64/{*.deb, Packages, Packages.gz, Release,
                                               InRelease, Release.gpg, <key>.pub}

signed with a lab GPG key generated once (kept outside the served tree). The build is
cached: it reruns only when the matrices, this generator, the tools, the module
template, the guest kernel or the key change (a hash in ``<root>/.gpuctl-standin.json``).
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gpuctl.errors import ExecutionError, InputError
from gpuctl.lab.netcache import repo_dir
from gpuctl.lab.standin import kmod
from gpuctl.lab.state import cache_root
from gpuctl.matrix import Matrix, Package, load_matrix, matrix_names

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
LABHW = HERE / "tools" / "labhw.py"
STAMP = ".gpuctl-standin.json"
REPO_PATH = "compute/cuda/repos/{family}/x86_64"
APT_FAMILIES: tuple[str, ...] = ("debian12", "ubuntu2204", "ubuntu2404")
KEY_UID = "gpuctl lab stand-in NVIDIA repository <lab-repo@gpuctl.invalid>"
NCCL_TESTS_VERSION = "2.17.6-1"
BWPROBE_VERSION = "1.0-1"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
#: CUDA version each driver branch supports (nvidia-smi "CUDA Version").
_DRIVER_CUDA = {"535": "12.2", "550": "12.4", "570": "12.8", "575": "12.9", "580": "13.0"}


# ---------------------------------------------------------------------------- package model


@dataclass
class Deb:
    """One stand-in package: control fields and contents."""

    name: str
    version: str
    description: str
    depends: list[str] = field(default_factory=list)
    recommends: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # path → (content, mode)
    symlinks: dict[str, str] = field(default_factory=dict)  # path → target
    conffiles: list[str] = field(default_factory=list)
    postinst: str = ""
    prerm: str = ""
    postrm: str = ""
    section: str = "multiverse/devel"

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version.split(':', 1)[-1]}_amd64.deb"

    def add(self, path: str, content: str | bytes, mode: int = 0o644) -> None:
        self.files[path] = (content.encode() if isinstance(content, str) else content, mode)

    def paths(self) -> set[str]:
        return set(self.files) | set(self.symlinks)


def upstream(version: str) -> str:
    return Package(name="x0", version=version).upstream


def _pin(pkg: Package) -> str:
    return f"{pkg.name} (= {pkg.version})"


def _tool(deb: Deb, tool: str, path: str, info: dict[str, str]) -> None:
    """Install the emulator copy for `deb` and a wrapper at the tool's real `path`."""
    base = f"/usr/lib/gpuctl-lab/{deb.name}"
    if f"{base}/labhw.py" not in deb.files:
        deb.add(f"{base}/labhw.py", LABHW.read_bytes(), 0o755)
        deb.add(f"{base}/package.json", json.dumps({"package": deb.name, "version": deb.version,
                                                    "upstream": upstream(deb.version), **info}, indent=2) + "\n")
    deb.add(path, f"#!/bin/sh\n# gpuctl lab stand-in for {tool} (package {deb.name} {deb.version}); "
                  f"see {base}/labhw.py\nexec /usr/bin/python3 {base}/labhw.py {tool} \"$@\"\n", 0o755)


def _stub(deb: Deb, path: str, soname: str, stubs: dict[str, bytes]) -> None:
    """A real (empty) ELF shared object at a library's real path, plus its soname link."""
    deb.add(path, stubs.get(soname) or f"gpuctl lab stand-in for {soname}\n".encode())
    link = f"{LIBDIR}/{soname}"
    if link != path:
        deb.symlinks[link] = Path(path).name


def _daemon_reload() -> str:
    return "if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n"


def _depmod(kver: str) -> str:
    return f"if [ -d /lib/modules/{kver} ]; then depmod -a {kver}; fi\n"


def _unit(description: str, exec_start: str, kind: str = "forking", extra: str = "", pidfile: str = "") -> str:
    pid = f"PIDFile={pidfile}\n" if pidfile else ""
    return (f"[Unit]\nDescription={description}\n{extra}\n[Service]\nType={kind}\n{pid}ExecStart={exec_start}\n"
            "\n[Install]\nWantedBy=multi-user.target\n")


def _nccl_header(version: str) -> str:
    major, minor, patch = (int(x) for x in version.split(".")[:3])
    return (f"/* gpuctl lab stand-in for nccl.h {version} (the version macros of the real header) */\n"
            "#ifndef NCCL_H_\n#define NCCL_H_\n"
            f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n"
            '#define NCCL_SUFFIX ""\n\n'
            f"#define NCCL_VERSION_CODE {major * 10000 + minor * 100 + patch}\n"
            "#define NCCL_VERSION(X,Y,Z) ((X <= 2 && Y <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : "
            "(X) * 10000 + (Y) * 100 + (Z))\n#endif\n")


def _cudnn_header(version: str) -> str:
    major, minor, patch = (int(x) for x in version.split(".")[:3])
    return (f"/* gpuctl lab stand-in for cudnn_version.h {version} */\n"
            "#ifndef CUDNN_VERSION_H_\n#define CUDNN_VERSION_H_\n\n"
            f"#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n#define CUDNN_PATCHLEVEL {patch}\n\n"
            "#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n\n"
            "#endif /* CUDNN_VERSION_H */\n")


CUFILE_JSON = """{
    // gpuctl lab stand-in: the default /etc/cufile.json of libcufile (abridged)
    "logging": {
        "dir": "/var/log/cufile",
        "level": "ERROR"
    },
    "profile": {
        "nvtx": false,
        "cufile_stats": 0
    },
    "execution": {
        "max_io_queue_depth": 128,
        "max_io_threads": 4,
        "parallel_io": true,
        "min_io_threshold_size_kb": 8192,
        "max_request_parallelism": 4
    },
    "properties": {
        "max_direct_io_size_kb": 16384,
        "max_device_cache_size_kb": 131072,
        "max_device_pinned_mem_size_kb": 33554432,
        "use_poll_mode": false,
        "poll_mode_max_size_kb": 4,
        "allow_compat_mode": true,
        "rdma_dev_addr_list": []
    },
    "fs": {
        "generic": {
            "posix_unaligned_writes": false
        },
        "lustre": {
            "posix_gds_min_kb": 0
        }
    }
}
"""

FM_CFG = """# gpuctl lab stand-in: fabricmanager.cfg (the keys of the real default configuration)
LOG_LEVEL=4
LOG_FILE_NAME=/var/log/fabricmanager.log
LOG_APPEND_TO_LOG=1
LOG_FILE_MAX_SIZE=1024
LOG_USE_SYSLOG=0
DAEMONIZE=1
BIND_INTERFACE_IP=127.0.0.1
STARTING_TCP_PORT=16000
FABRIC_MODE=0
FABRIC_MODE_RESTART=0
STATE_FILE_NAME=/tmp/fabricmanager.state
FM_CMD_BIND_INTERFACE=127.0.0.1
FM_CMD_PORT_NUMBER=6666
FM_STAY_RESIDENT_ON_FAILURES=0
ACCESS_LINK_FAILURE_MODE=0
TRUNK_LINK_FAILURE_MODE=0
NVSWITCH_FAILURE_MODE=0
ABORT_CUDA_JOBS_ON_FM_EXIT=1
TOPOLOGY_FILE_PATH=/usr/share/nvidia/nvswitch
"""


# ---------------------------------------------------------------------------- from a matrix


@dataclass(frozen=True)
class BuildInputs:
    """What package contents depend on beyond the matrix."""

    kernel_version: str
    modules: dict[tuple[str, str], dict[str, Path]]  # (kind, version) → file → .ko
    stubs: dict[str, bytes]  # soname → ELF bytes


def _driver_debs(m: Matrix, family: str, inp: BuildInputs) -> list[Deb]:
    drv = m.packages_for(family, "driver")
    if len(drv) < 4:
        raise InputError(f"matrix {m.name}: {family} driver lists {len(drv)} packages; the stand-in "
                         "expects [meta, kernel module, utils, compute library]")
    meta, kmod, utils, lib = drv[:4]
    dv = m.driver.version
    kver = inp.kernel_version
    cuda = _DRIVER_CUDA.get(m.driver.branch, m.cuda.version)
    info = {"driver_version": dv, "cuda_version": cuda}
    debs: list[Deb] = []
    nvml_owner = lib
    if family == "debian12":
        nvml_owner = Package(name="libnvidia-ml1", version=lib.version)
    d_meta = Deb(meta.name, meta.version, f"NVIDIA driver metapackage {dv} (gpuctl lab stand-in)",
                 depends=[_pin(kmod), _pin(utils), _pin(lib)] + ([_pin(nvml_owner)] if nvml_owner is not lib else []),
                 recommends=["nvidia-persistenced"])
    d_meta.add(f"/usr/share/doc/{meta.name}/README.gpuctl-lab",
               f"gpuctl lab stand-in for {meta.name} {meta.version}: see gpuctl/lab/standin/README.md\n")
    debs.append(d_meta)
    d_kmod = Deb(kmod.name, kmod.version, f"NVIDIA open kernel modules {dv} (gpuctl lab stand-in, prebuilt "
                 f"for {kver})", section="multiverse/kernel")
    for file, ko in inp.modules[("nvidia", dv)].items():
        d_kmod.add(f"/lib/modules/{kver}/updates/dkms/{file}.ko", ko.read_bytes())
    d_kmod.add(f"/usr/src/nvidia-{dv}/dkms.conf",
               f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{dv}"\nAUTOINSTALL="yes"\n'
               "# gpuctl lab stand-in: the modules are prebuilt for the lab kernel and shipped in this package\n")
    d_kmod.postinst = _depmod(kver)
    d_kmod.postrm = _depmod(kver)
    debs.append(d_kmod)
    d_utils = Deb(utils.name, utils.version, f"NVIDIA System Management Interface {dv} (gpuctl lab stand-in)",
                  depends=[_pin(nvml_owner)])
    _tool(d_utils, "nvidia-smi", "/usr/bin/nvidia-smi", info)
    debs.append(d_utils)
    d_lib = Deb(lib.name, lib.version, f"NVIDIA CUDA driver library {dv} (gpuctl lab stand-in)")
    _stub(d_lib, f"{LIBDIR}/libcuda.so.{dv}", "libcuda.so.1", inp.stubs)
    if nvml_owner is lib:
        _stub(d_lib, f"{LIBDIR}/libnvidia-ml.so.{dv}", "libnvidia-ml.so.1", inp.stubs)
    else:
        d_nvml = Deb(nvml_owner.name, nvml_owner.version, f"NVIDIA Management Library (NVML) {dv} "
                     "(gpuctl lab stand-in)")
        _stub(d_nvml, f"{LIBDIR}/libnvidia-ml.so.{dv}", "libnvidia-ml.so.1", inp.stubs)
        debs.append(d_nvml)
    debs.append(d_lib)

    for pkg in m.packages_for(family, "persistenced"):
        d = Deb(pkg.name, pkg.version, f"NVIDIA Persistence Daemon {dv} (gpuctl lab stand-in)")
        _tool(d, "nvidia-persistenced", "/usr/bin/nvidia-persistenced", info)
        d.add("/lib/systemd/system/nvidia-persistenced.service", _unit(
            "NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced --verbose",
            extra="Wants=syslog.target\n", pidfile="/run/nvidia-persistenced/nvidia-persistenced.pid")
            .replace("[Install]", "Restart=always\nExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n[Install]"))
        d.postinst = _daemon_reload()
        debs.append(d)

    # NVIDIA's repository also ships the NV-CONTROL client library at the driver's version;
    # Debian's hwloc plugins (pulled in by Open MPI) depend on it, and gpuctl's pinning keeps
    # the distro's copy out, as it does on a real cluster.
    d_xnv = Deb("libxnvctrl0", f"{dv}-1", f"NV-CONTROL X extension client library {dv} (gpuctl lab stand-in)")
    _stub(d_xnv, f"{LIBDIR}/libXNVCtrl.so.{dv}", "libXNVCtrl.so.0", inp.stubs)
    debs.append(d_xnv)

    fm = m.packages_for(family, "fabricmanager")
    for pkg in fm:
        if "nscq" in pkg.name:
            d = Deb(pkg.name, pkg.version, f"NVSwitch Configuration and Query library {m.fabricmanager.version} "
                    "(gpuctl lab stand-in)")
            _stub(d, f"{LIBDIR}/libnvidia-nscq.so.{m.fabricmanager.version}", "libnvidia-nscq.so.2", inp.stubs)
        else:
            d = Deb(pkg.name, pkg.version, f"Fabric Manager for NVSwitch based systems {m.fabricmanager.version} "
                    "(gpuctl lab stand-in)", depends=[_pin(kmod)])
            _tool(d, "nv-fabricmanager", "/usr/bin/nv-fabricmanager",
                  {**info, "upstream": m.fabricmanager.version})
            d.add("/usr/share/nvidia/nvswitch/fabricmanager.cfg", FM_CFG)
            d.conffiles.append("/usr/share/nvidia/nvswitch/fabricmanager.cfg")
            d.add("/lib/systemd/system/nvidia-fabricmanager.service", _unit(
                "NVIDIA fabric manager service",
                "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg",
                pidfile="/run/nvidia-fabricmanager/nv-fabricmanager.pid")
                .replace("[Service]\n", "[Service]\nUser=root\nPrivateTmp=false\nTimeoutStartSec=240\n"))
            d.postinst = _daemon_reload()
        debs.append(d)
    return debs


def _cuda_debs(m: Matrix, family: str, inp: BuildInputs) -> list[Deb]:
    debs: list[Deb] = []
    xy = m.cuda.version
    full = m.cuda.full_version
    for pkg in m.packages_for(family, "cuda"):
        d = Deb(pkg.name, pkg.version, f"CUDA Toolkit {xy} meta-package (gpuctl lab stand-in)")
        prefix = f"/usr/local/cuda-{xy}"
        _tool(d, "nvcc", f"{prefix}/bin/nvcc", {"cuda_version": xy})
        d.files[f"/usr/lib/gpuctl-lab/{d.name}/package.json"] = (json.dumps(
            {"package": d.name, "version": d.version, "upstream": full, "cuda_version": xy}, indent=2).encode()
            + b"\n", 0o644)
        d.add(f"{prefix}/version.json", json.dumps({
            "cuda": {"name": "CUDA SDK", "version": full},
            "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": full},
            "cuda_nvcc": {"name": "CUDA NVCC", "version": full},
        }, indent=3) + "\n")
        _stub(d, f"{prefix}/targets/x86_64-linux/lib/libcudart.so.{full}", f"libcudart.so.{xy.split('.')[0]}",
              inp.stubs)
        d.symlinks.pop(f"{LIBDIR}/libcudart.so.{xy.split('.')[0]}", None)
        d.symlinks[f"{prefix}/lib64"] = "targets/x86_64-linux/lib"
        prio = int(xy.split(".")[0]) * 10 + int(xy.split(".")[1])
        d.postinst = (f"update-alternatives --install /usr/local/cuda cuda {prefix} {prio}\n"
                      f"update-alternatives --install /usr/local/cuda-{xy.split('.')[0]} "
                      f"cuda-{xy.split('.')[0]} {prefix} {prio}\n")
        d.prerm = (f'if [ "$1" = remove ]; then update-alternatives --remove cuda {prefix}; '
                   f"update-alternatives --remove cuda-{xy.split('.')[0]} {prefix}; fi\n")
        debs.append(d)
    for pkg in m.packages_for(family, "cudnn"):
        v = upstream(pkg.version)
        three = ".".join(v.split(".")[:3])
        if "dev" in pkg.name:
            runtime = next(p for p in m.packages_for(family, "cudnn") if "dev" not in p.name)
            d = Deb(pkg.name, pkg.version, f"cuDNN {v} development files for CUDA {m.cudnn.cuda_major} "
                    "(gpuctl lab stand-in)", depends=[_pin(runtime)])
            d.add("/usr/include/x86_64-linux-gnu/cudnn_version_v9.h", _cudnn_header(v))
            d.symlinks["/usr/include/cudnn_version.h"] = "x86_64-linux-gnu/cudnn_version_v9.h"
            d.symlinks[f"{LIBDIR}/libcudnn.so"] = "libcudnn.so.9"
        else:
            d = Deb(pkg.name, pkg.version, f"cuDNN {v} runtime for CUDA {m.cudnn.cuda_major} (gpuctl lab stand-in)")
            _stub(d, f"{LIBDIR}/libcudnn.so.{three}", "libcudnn.so.9", inp.stubs)
        debs.append(d)
    nccl = m.packages_for(family, "nccl")
    for pkg in nccl:
        v = m.nccl.version
        if "dev" in pkg.name:
            runtime = next(p for p in nccl if "dev" not in p.name)
            d = Deb(pkg.name, pkg.version, f"NCCL {v} development files for CUDA {m.nccl.cuda} (gpuctl lab stand-in)",
                    depends=[_pin(runtime)])
            d.add("/usr/include/nccl.h", _nccl_header(v))
            d.symlinks[f"{LIBDIR}/libnccl.so"] = "libnccl.so.2"
        else:
            d = Deb(pkg.name, pkg.version, f"NCCL {v} runtime for CUDA {m.nccl.cuda} (gpuctl lab stand-in)")
            _stub(d, f"{LIBDIR}/libnccl.so.{v}", "libnccl.so.2", inp.stubs)
        debs.append(d)
    return debs


def _dcgm_ofed_gds_lustre_debs(m: Matrix, family: str, inp: BuildInputs) -> list[Deb]:
    debs: list[Deb] = []
    kver = inp.kernel_version
    dcgm = m.packages_for(family, "dcgm")
    core = next((p for p in dcgm if p.name.endswith("-core")), None)
    for pkg in dcgm:
        if pkg is core:
            d = Deb(pkg.name, pkg.version, f"NVIDIA DCGM {upstream(pkg.version)} core (gpuctl lab stand-in)")
            _tool(d, "dcgmi", "/usr/bin/dcgmi", {})
            _tool(d, "nv-hostengine", "/usr/bin/nv-hostengine", {})
            d.add("/lib/systemd/system/nvidia-dcgm.service",
                  "[Unit]\nDescription=NVIDIA DCGM service\nConflicts=dcgm.service\n\n[Service]\nUser=root\n"
                  "PrivateTmp=false\nEnvironment=\"DCGM_HOME_DIR=/var/log/nvidia-dcgm\"\n"
                  "ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm\nRestart=on-abort\n\n"
                  "[Install]\nWantedBy=multi-user.target\n")
            d.postinst = _daemon_reload()
        else:
            d = Deb(pkg.name, pkg.version, f"NVIDIA DCGM {upstream(pkg.version)} for CUDA {m.dcgm.cuda_major} "
                    "(gpuctl lab stand-in)", depends=[_pin(core)] if core else [])
            d.add(f"/usr/libexec/datacenter-gpu-manager-4/plugins/cuda{m.dcgm.cuda_major}/README.gpuctl-lab",
                  "gpuctl lab stand-in: the diagnostic plugins are emulated by dcgmi\n")
        debs.append(d)
    for pkg in m.packages_for(family, "ofed"):
        d = Deb(pkg.name, pkg.version, f"{'DOCA-OFED' if m.ofed and m.ofed.kind == 'doca' else 'MLNX_OFED'} "
                f"{m.ofed.version if m.ofed else ''} (gpuctl lab stand-in: Debian's rdma-core verbs stack)",
                depends=["rdma-core", "ibverbs-utils", "infiniband-diags", "perftest"])
        label = (f"OFED-internal-{m.ofed.version}" if m.ofed and m.ofed.kind == "doca"
                 else f"MLNX_OFED_LINUX-{m.ofed.version if m.ofed else ''}")
        _tool(d, "ofed_info", "/usr/bin/ofed_info", {"ofed_label": label})
        debs.append(d)
    gds = m.packages_for(family, "gds")
    fs_dkms = next((p for p in gds if p.name == "nvidia-fs-dkms"), None)
    fs = next((p for p in gds if p.name == "nvidia-fs"), None)
    for pkg in gds:
        gv = m.gds.version if m.gds else upstream(pkg.version)
        if pkg is fs_dkms:
            d = Deb(pkg.name, pkg.version, f"NVIDIA GPUDirect Storage kernel module {gv} (gpuctl lab stand-in, "
                    f"prebuilt for {kver})", section="multiverse/kernel")
            for file, ko in inp.modules[("nvidia-fs", gv)].items():
                d.add(f"/lib/modules/{kver}/updates/dkms/{file}.ko", ko.read_bytes())
            d.postinst = _depmod(kver)
            d.postrm = _depmod(kver)
        elif pkg is fs:
            d = Deb(pkg.name, pkg.version, f"NVIDIA GPUDirect Storage {gv} (gpuctl lab stand-in)",
                    depends=[_pin(fs_dkms)] if fs_dkms else [])
            d.add(f"/usr/share/doc/{pkg.name}/README.gpuctl-lab", "gpuctl lab stand-in for nvidia-fs\n")
        else:
            xy = m.cuda.version
            d = Deb(pkg.name, pkg.version, f"NVIDIA GPUDirect Storage for CUDA {xy} (gpuctl lab stand-in)",
                    depends=[_pin(fs)] if fs else [])
            _tool(d, "gdsio", f"/usr/local/cuda-{xy}/gds/tools/gdsio", {})
            d.add(f"/usr/local/cuda-{xy}/gds/cufile.json", CUFILE_JSON)
            d.postinst = f"[ -e /etc/cufile.json ] || cp /usr/local/cuda-{xy}/gds/cufile.json /etc/cufile.json\n"
        debs.append(d)
    lustre = m.packages_for(family, "lustre")
    mods = next((p for p in lustre if "modules" in p.name or "dkms" in p.name), None)
    for pkg in lustre:
        lv = m.lustre.version if m.lustre else upstream(pkg.version)
        if pkg is mods:
            d = Deb(pkg.name, pkg.version, f"Lustre client kernel modules {lv} (gpuctl lab stand-in, prebuilt "
                    f"for {kver})", section="kernel")
            for file, ko in inp.modules[("lustre", lv)].items():
                d.add(f"/lib/modules/{kver}/updates/dkms/{file}.ko", ko.read_bytes())
            d.postinst = _depmod(kver)
            d.postrm = _depmod(kver)
        else:
            d = Deb(pkg.name, pkg.version, f"Lustre client utilities {lv} (gpuctl lab stand-in)",
                    depends=[_pin(mods)] if mods else [])
            _tool(d, "lctl", "/usr/sbin/lctl", {})
        debs.append(d)
    return debs


def _bench_debs(m: Matrix) -> list[Deb]:
    """Lab-only packages for the benchmark programs (not from NVIDIA's repository)."""
    d = Deb("nccl-tests", NCCL_TESTS_VERSION, "NVIDIA nccl-tests (gpuctl lab stand-in; built from source on real "
            "nodes)", depends=["libnccl2"])
    for tool in ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf"):
        _tool(d, tool, f"/usr/bin/{tool}", {})
    p = Deb("gpuctl-bwprobe", BWPROBE_VERSION, "gpuctl GPU bandwidth probe (gpuctl lab stand-in)")
    _tool(p, "gpuctl-bwprobe", "/usr/bin/gpuctl-bwprobe", {})
    return [d, p]


def debs_for(m: Matrix, family: str, inp: BuildInputs) -> list[Deb]:
    """All stand-in packages of matrix `m` for OS family `family`."""
    if family not in APT_FAMILIES:
        raise InputError(f"the stand-in repository is apt only; known families: {', '.join(APT_FAMILIES)}")
    return [*_driver_debs(m, family, inp), *_cuda_debs(m, family, inp),
            *_dcgm_ofed_gds_lustre_debs(m, family, inp), *_bench_debs(m)]


def _dedupe_and_conflict(debs: list[Deb]) -> list[Deb]:
    """One Deb per (name, version); packages of *different* names that install the same path
    conflict with and replace each other (as the real branch-named packages do)."""
    seen: dict[tuple[str, str], Deb] = {}
    for d in debs:
        seen.setdefault((d.name, d.version), d)
    unique = list(seen.values())
    owners: dict[str, set[str]] = {}
    for d in unique:
        for path in d.paths():
            owners.setdefault(path, set()).add(d.name)
    for d in unique:
        others = sorted({n for path in d.paths() for n in owners[path]} - {d.name})
        d.conflicts = others
    return unique


# ---------------------------------------------------------------------------- building


def _control(d: Deb, installed_kib: int) -> str:
    lines = [f"Package: {d.name}", f"Version: {d.version}", "Architecture: amd64",
             "Maintainer: gpuctl lab <lab-repo@gpuctl.invalid>", f"Installed-Size: {installed_kib}",
             f"Section: {d.section}", "Priority: optional"]
    if d.depends:
        lines.append("Depends: " + ", ".join(d.depends))
    if d.recommends:
        lines.append("Recommends: " + ", ".join(d.recommends))
    if d.conflicts:
        lines.append("Conflicts: " + ", ".join(d.conflicts))
        lines.append("Replaces: " + ", ".join(d.conflicts))
    lines.append(f"Description: {d.description}")
    lines.append(" Stand-in package generated by gpuctl for its QEMU lab; not NVIDIA software.")
    return "\n".join(lines) + "\n"


def build_deb(d: Deb, out_dir: Path) -> Path:
    """Build one .deb with dpkg-deb; returns its path."""
    out = out_dir / d.filename
    with tempfile.TemporaryDirectory(prefix="gpuctl-deb-") as tmp:
        tree = Path(tmp) / "tree"
        size = 0
        for path, (content, mode) in d.files.items():
            target = tree / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            target.chmod(mode)
            size += len(content)
        for path, dest in d.symlinks.items():
            target = tree / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(dest)
        debian = tree / "DEBIAN"
        debian.mkdir(parents=True, exist_ok=True)
        (debian / "control").write_text(_control(d, max(1, size // 1024)))
        if d.conffiles:
            (debian / "conffiles").write_text("\n".join(d.conffiles) + "\n")
        for script, body in (("postinst", d.postinst), ("prerm", d.prerm), ("postrm", d.postrm)):
            if body:
                (debian / script).write_text("#!/bin/sh\nset -e\n" + body)
                (debian / script).chmod(0o755)
        proc = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(tree), str(out)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ExecutionError(f"dpkg-deb failed for {d.name} {d.version}: {proc.stderr.strip()}")
    return out


def _stub_libs(sonames: Sequence[str]) -> dict[str, bytes]:
    """Empty but real ELF shared objects (so ldconfig accepts them), built with the host's gcc."""
    if shutil.which("gcc") is None:
        log.warning("no gcc on the host: library stand-ins are text placeholders")
        return {}
    out: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="gpuctl-stub-") as tmp:
        src = Path(tmp) / "stub.c"
        src.write_text("/* gpuctl lab stand-in library: no functions */\n"
                       "const char gpuctl_lab_standin[] = \"gpuctl lab stand-in\";\n")
        for soname in sonames:
            target = Path(tmp) / soname
            proc = subprocess.run(["gcc", "-shared", "-fPIC", "-nostdlib", f"-Wl,-soname,{soname}", "-o",
                                   str(target), str(src)], capture_output=True, text=True, check=False)
            if proc.returncode == 0:
                out[soname] = target.read_bytes()
    return out


# ---------------------------------------------------------------------------- signing key


def default_key_dir() -> Path:
    return cache_root() / "standin-key"


def _gpg(home: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--yes", "--no-tty", *args],
                          capture_output=True, text=True, input=input, check=False)
    if proc.returncode != 0:
        raise ExecutionError(f"gpg {' '.join(args[:2])} failed: {proc.stderr.strip()[-1500:]}")
    return proc


def _stop_agent(home: Path) -> None:
    """Stop the gpg-agent that key generation or signing started for `home`: it would
    otherwise outlive the build (one per test folder, never reaped)."""
    if shutil.which("gpgconf"):
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)


def ensure_key(key_dir: Path | None = None) -> tuple[Path, str]:
    """The lab signing key (generated once, no passphrase): (GNUPGHOME, fingerprint)."""
    home = key_dir or default_key_dir()
    fpr_file = home / "fingerprint"
    if fpr_file.is_file():
        return home, fpr_file.read_text().strip()
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    with _locked(home / ".lock"):
        if fpr_file.is_file():
            return home, fpr_file.read_text().strip()
        try:
            _gpg(home, "--passphrase", "", "--quick-generate-key", KEY_UID, "rsa3072", "sign", "never")
            listing = _gpg(home, "--with-colons", "--list-secret-keys").stdout
        finally:
            _stop_agent(home)
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        fpr_file.write_text(fpr + "\n")
        log.info("stand-in repository: generated signing key %s in %s", fpr, home)
    return home, fpr


def key_file_name(fingerprint: str) -> str:
    """``<last 8 hex digits>.pub``, named like NVIDIA's ``3bf863cc.pub``."""
    return f"{fingerprint[-8:].lower()}.pub"


def export_public_key(key_dir: Path | None = None) -> tuple[str, str]:
    """(file name, ASCII-armoured public key)."""
    home, fpr = ensure_key(key_dir)
    return key_file_name(fpr), _gpg(home, "--armor", "--export", fpr).stdout


def keyring_info(key_dir: Path | None = None) -> tuple[str, str]:
    """(key file name at the repository's distro directory, its sha256) for the lab inventory's
    ``repos.keyring_file`` / ``repos.keyring_sha256``. Generates the key on first use."""
    name, text = export_public_key(key_dir)
    return name, hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------- the repository


@dataclass(frozen=True)
class RepoBuild:
    root: Path
    dirs: dict[str, Path]  # family → distro directory
    packages: int
    keyring_file: str
    keyring_sha256: str
    kernel_version: str
    cached: bool
    seconds: float
    timings: dict[str, float]


#: The generator's own sources, the files the packages carry (the emulated tools) and the module
#: template: what the cache stamp hashes. Only these patterns: never a byte-code cache, an editor's
#: backup or a folder (an installed wheel has ``tools/__pycache__``; reading it failed the build).
SOURCE_PATTERNS: tuple[str, ...] = ("*.py", "tools/*.py", "kmod_src/*.c.in")


def source_files(here: Path = HERE) -> list[Path]:
    """The regular files under `here` that `SOURCE_PATTERNS` name, sorted by relative path."""
    found = {p for pattern in SOURCE_PATTERNS for p in here.glob(pattern)
             if p.is_file() and "__pycache__" not in p.relative_to(here).parts}
    return sorted(found, key=lambda p: p.relative_to(here).as_posix())


def _inputs_hash(families: Sequence[str], names: Sequence[str], kver: str, fpr: str) -> str:
    h = hashlib.sha256()
    for p in source_files():
        h.update(p.relative_to(HERE).as_posix().encode())
        h.update(p.read_bytes())
    for name in names:
        h.update(load_matrix(name).path.read_bytes())
    h.update(json.dumps([list(families), list(names), kver, fpr, kmod.source_hash()]).encode())
    return h.hexdigest()


def _index(dist: Path, home: Path, fpr: str) -> None:
    proc = subprocess.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=dist,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ExecutionError(f"dpkg-scanpackages failed in {dist}: {proc.stderr.strip()[-1500:]}")
    packages = proc.stdout.replace("Filename: ./", "Filename: ")
    (dist / "Packages").write_text(packages)
    (dist / "Packages.gz").write_bytes(gzip.compress(packages.encode(), compresslevel=9, mtime=0))
    sums: dict[str, list[str]] = {"MD5Sum": [], "SHA1": [], "SHA256": [], "SHA512": []}
    for name in ("Packages", "Packages.gz"):
        data = (dist / name).read_bytes()
        for field_name, algo in (("MD5Sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"), ("SHA512", "sha512")):
            sums[field_name].append(f" {hashlib.new(algo, data).hexdigest()} {len(data):>16} {name}")
    date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime())
    release = ["Origin: gpuctl-lab", "Label: gpuctl lab stand-in for the NVIDIA CUDA repository",
               "Architecture: x86_64", f"Date: {date}"]
    for field_name, lines in sums.items():
        release.append(f"{field_name}:")
        release.extend(lines)
    (dist / "Release").write_text("\n".join(release) + "\n")
    _gpg(home, "--local-user", fpr, "--digest-algo", "SHA256", "--clearsign", "-o", str(dist / "InRelease"),
         str(dist / "Release"))
    _gpg(home, "--local-user", fpr, "--digest-algo", "SHA256", "--armor", "--detach-sign", "-o",
         str(dist / "Release.gpg"), str(dist / "Release"))


def _module_versions(ms: Sequence[Matrix]) -> set[tuple[str, str]]:
    wanted: set[tuple[str, str]] = set()
    for m in ms:
        wanted.add(("nvidia", m.driver.version))
        if m.gds:
            wanted.add(("nvidia-fs", m.gds.version))
        if m.lustre:
            wanted.add(("lustre", m.lustre.version))
    return wanted


def build_repo(
    root: Path | None = None,
    *,
    families: Sequence[str] = ("debian12",),
    matrices: Sequence[str] | None = None,
    image_root: Path | None = None,
    kernel_version: str | None = None,
    key_dir: Path | None = None,
    force: bool = False,
) -> RepoBuild:
    """Build (or reuse) the stand-in repository under `root` (default: the lab's
    `gpuctl.lab.netcache.repo_dir()`). Modules are compiled against the lab image
    (`image_root`/`kernel_version`, default `gpuctl.lab.image`)."""
    start = time.monotonic()
    if root is None:
        root = repo_dir()
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    names = list(matrices) if matrices is not None else matrix_names()
    unknown = [f for f in families if f not in APT_FAMILIES]
    if unknown:
        raise InputError(f"unknown or non-apt OS families {unknown}; known: {', '.join(APT_FAMILIES)}")
    img_root, kver = kmod._image(image_root, kernel_version)
    home, fpr = ensure_key(key_dir)
    key_name, key_text = export_public_key(home)
    key_sha = hashlib.sha256(key_text.encode()).hexdigest()
    dirs = {f: root / REPO_PATH.format(family=f) for f in families}
    digest = _inputs_hash(families, names, kver, fpr)
    stamp = root / STAMP
    with _locked(root.parent / f".{root.name}.lock"):
        if not force and stamp.is_file():
            try:
                old = json.loads(stamp.read_text())
            except ValueError:
                old = {}
            if old.get("hash") == digest and all((d / "InRelease").is_file() for d in dirs.values()):
                return RepoBuild(root, dirs, int(old.get("packages", 0)), key_name, key_sha, kver, True,
                                 round(time.monotonic() - start, 2), {})
        timings: dict[str, float] = {}
        t = time.monotonic()
        ms = [load_matrix(n).matrix for n in names]
        modules: dict[tuple[str, str], dict[str, Path]] = {}
        for kind, version in sorted(_module_versions(ms)):
            modules[(kind, version)] = kmod.build_modules(kind, version, image_root=img_root, kernel_version=kver)
        timings["modules"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        sonames = ["libcuda.so.1", "libnvidia-ml.so.1", "libXNVCtrl.so.0", "libnvidia-nscq.so.2", "libcudnn.so.9",
                   "libnccl.so.2",
                   *sorted({f"libcudart.so.{m.cuda.version.split('.')[0]}" for m in ms})]
        inp = BuildInputs(kver, modules, _stub_libs(sonames))
        timings["stubs"] = round(time.monotonic() - t, 2)
        total = 0
        for family in families:
            t = time.monotonic()
            debs = _dedupe_and_conflict([d for m in ms for d in debs_for(m, family, inp)])
            dist = dirs[family]
            partial = dist.with_name(dist.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
                list(pool.map(build_deb, debs, [partial] * len(debs)))
            timings[f"{family}:debs"] = round(time.monotonic() - t, 2)
            t = time.monotonic()
            (partial / key_name).write_text(key_text)
            try:
                _index(partial, home, fpr)
            finally:
                _stop_agent(home)
            old_dir = dist.with_name(dist.name + ".old")
            shutil.rmtree(old_dir, ignore_errors=True)
            if dist.exists():
                dist.rename(old_dir)
            partial.rename(dist)
            shutil.rmtree(old_dir, ignore_errors=True)
            timings[f"{family}:index+sign"] = round(time.monotonic() - t, 2)
            total += len(debs)
        stamp.write_text(json.dumps({"hash": digest, "packages": total, "families": list(families),
                                     "matrices": names, "kernel_version": kver, "key": key_name,
                                     "timings_s": timings}, indent=2) + "\n")
    took = round(time.monotonic() - start, 2)
    log.info("stand-in repository: %d packages for %s in %.1f s (%s)", total, ", ".join(families), took, timings)
    return RepoBuild(root, dirs, total, key_name, key_sha, kver, False, took, timings)


def build_lab_repo() -> RepoBuild:
    """`build_repo` for a lab being brought up (the lab's repo dir, image and key): the lab
    cannot install the stack without it, so every failure is an `ExecutionError` that says so
    and names the cause, never a warning followed by an inventory without a keyring."""
    try:
        return build_repo()
    except (ExecutionError, InputError) as exc:
        raise ExecutionError(f"the lab's stand-in NVIDIA repository could not be built in {repo_dir()}: {exc}") from exc
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ExecutionError(f"the lab's stand-in NVIDIA repository could not be built in {repo_dir()}: "
                             f"{type(exc).__name__}: {exc}") from exc
