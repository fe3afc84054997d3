"""cuda: the CUDA toolkit at the matrix version, held, and its paths for login shells."""

from gpuctl.components import Component, Part
from gpuctl.knobs import Path

COMPONENT = Component(
    name="cuda", order=50,
    summary="the CUDA toolkit",
    parts=(Part("cuda", lambda m: m.cuda.full_version),),
    knobs={
        "cuda_profile_file": Path(("/etc/profile.d",)),
        "cuda_home_pattern": Path(("/usr/local", "/opt"), template=True),
    },
)
