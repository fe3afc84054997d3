"""cuda: the CUDA toolkit pinned and held; /etc/profile.d/gpuctl-cuda.sh for its paths."""

from __future__ import annotations

import logging

from pyinfra import host
from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.facts.system import FileStates
from gpuctl.operations import install_and_hold, render, role_knobs, write_file

log = logging.getLogger(__name__)


def cuda_home(full_version: str, pattern: str) -> str:
    """'13.0.2' → '/usr/local/cuda-13.0' (the toolkit packages' install prefix)."""
    major_minor = ".".join(full_version.split(".")[:2])
    return pattern.format(version=major_minor)


@deploy("cuda")
def install() -> None:
    spec = node_spec()
    k = role_knobs("cuda")
    comp = spec.components["cuda"]
    home = cuda_home(comp.version, str(k["cuda_home_pattern"]))
    profile = str(k["cuda_profile_file"])
    snap = read_packages(spec.package_manager)
    files = host.get_fact(FileStates, paths=(profile,))
    install_and_hold(f"CUDA toolkit {comp.version}", comp.packages, snap)
    write_file(name=f"Put CUDA {comp.version} on PATH and LD_LIBRARY_PATH ({profile})", path=profile,
               content=render("cuda", "profile.sh.j2", version=comp.version, cuda_home=home), states=files)
