"""fabricmanager: NVIDIA Fabric Manager at exactly the driver's version, on NVSwitch SKUs only."""

from gpuctl.components import Component, Part, Service
from gpuctl.knobs import UNIT

COMPONENT = Component(
    name="fabricmanager", order=40,
    summary="NVIDIA Fabric Manager (NVSwitch systems)",
    parts=(Part("fabricmanager", lambda m: m.fabricmanager.version),),
    services=(Service(knob="fabricmanager_service", part="fabricmanager"),),
    applies=lambda w: "" if w.nvswitch else f"{w.sku} has no NVSwitch",
    container="shares the host kernel; needs the nvidia module and NVSwitch devices",
    knobs={"fabricmanager_service": UNIT},
)
