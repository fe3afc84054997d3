"""dcgm: DCGM at the matrix version, held; the host engine service enabled and running."""

from gpuctl.components import Component, Part, Service
from gpuctl.knobs import UNIT

COMPONENT = Component(
    name="dcgm", order=80,
    summary="NVIDIA DCGM and its host engine",
    parts=(Part("dcgm", lambda m: m.dcgm.version),),
    services=(Service(knob="dcgm_service", part="dcgm"),),
    knobs={"dcgm_service": UNIT},
)
