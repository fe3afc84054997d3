"""nccl: the NCCL build for the matrix's CUDA (`+cudaX.Y`), held; its checks read the fabric."""

from gpuctl.components import Component, Part

COMPONENT = Component(
    name="nccl", order=70,
    summary="NCCL",
    parts=(Part("nccl", lambda m: f"{m.nccl.version}+cuda{m.nccl.cuda}"),),
    probes=("interfaces", "fabric"),
)
