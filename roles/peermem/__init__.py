"""peermem: nvidia-peermem (GPUDirect RDMA) loaded now and at boot, after OFED."""

from gpuctl.components import Component, Module
from gpuctl.knobs import MODULE, Path

COMPONENT = Component(
    name="peermem", order=100,
    summary="GPUDirect RDMA (nvidia-peermem)",
    modules=(Module(knob="peermem_module"),),
    applies=lambda w: "" if not w.skipped("ofed") else "nvidia-peermem needs OFED on a fabric",
    container="shares the host kernel; cannot load nvidia_peermem",
    knobs={
        "peermem_modules_load_file": Path(("/etc/modules-load.d",)),
        "peermem_module": MODULE,
    },
)
