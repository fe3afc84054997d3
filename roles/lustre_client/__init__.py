"""lustre_client: the Lustre client at the matrix version, LNet, the filesystem mounted."""

from gpuctl.components import Component, Part
from gpuctl.knobs import MODULE, MountOptions, Path

from .validate import lustre_problems

COMPONENT = Component(
    name="lustre_client", order=140,
    summary="the Lustre client and its mount",
    validate=(lustre_problems,),
    parts=(Part("lustre", lambda m: m.lustre.version if m.lustre else ""),),
    applies=lambda w: "" if w.lustre and w.matrix.lustre is not None else "no Lustre in the inventory",
    container="shares the host kernel; cannot load lustre/lnet modules",
    knobs={
        "lustre_client_modprobe_conf": Path(("/etc/modprobe.d",)),
        "lustre_client_module": MODULE,
        "lustre_client_mount_options_extra": MountOptions(),
    },
)
