"""ofed: DOCA-OFED / MLNX_OFED at the matrix version, held; only with a fabric."""

from gpuctl.components import Component, Part


def _applies(w):
    if w.fabric == "none":
        return "no fabric in the inventory"
    return "" if w.matrix.ofed is not None else "matrix pins no OFED"


COMPONENT = Component(
    name="ofed", order=90,
    summary="the OFED RDMA stack",
    parts=(Part("ofed", lambda m: m.ofed.version if m.ofed else ""),),
    applies=_applies,
    container="shares the host kernel; cannot load HCA kernel modules",
)
