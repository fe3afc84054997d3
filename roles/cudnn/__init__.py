"""cudnn: cuDNN at the matrix version (built for the matrix's CUDA major), held."""

from gpuctl.components import Component, Part

COMPONENT = Component(
    name="cudnn", order=60,
    summary="cuDNN",
    parts=(Part("cudnn", lambda m: m.cudnn.version),),
)
