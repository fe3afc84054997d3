"""gds: GPUDirect Storage (nvidia-fs + GDS packages) at the matrix versions, held;
/etc/cufile.json; nvidia-fs loaded. Only where OFED runs (a fabric)."""

from gpuctl.components import Component, Module, Part
from gpuctl.knobs import MODULE, Choice, Path

COMPONENT = Component(
    name="gds", order=110,
    summary="GPUDirect Storage (nvidia-fs)",
    parts=(Part("gds", lambda m: m.gds.version if m.gds else ""),),
    modules=(Module(knob="gds_module", part="gds"),),
    applies=lambda w: "" if w.matrix.gds is not None and not w.skipped("ofed") else "GDS needs OFED on a fabric",
    container="shares the host kernel; cannot load nvidia_fs",
    knobs={
        "gds_cufile_path": Path(("/etc/gpuctl",), files=("/etc/cufile.json",)),
        "gds_modules_load_file": Path(("/etc/modules-load.d",)),
        "gds_module": MODULE,
        "gds_logging_dir": Path(("/var/log",), is_dir=True),
        "gds_logging_level": Choice(("ERROR", "WARN", "INFO", "DEBUG", "TRACE"), "cuFile log level"),
    },
)
