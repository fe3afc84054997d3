"""nccl: the NCCL build for the matrix's CUDA (`+cudaX.Y`), pinned and held."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.operations import install_and_hold


@deploy("nccl")
def install() -> None:
    spec = node_spec()
    comp = spec.components["nccl"]
    install_and_hold(f"NCCL {comp.version}", comp.packages, read_packages(spec.package_manager))
