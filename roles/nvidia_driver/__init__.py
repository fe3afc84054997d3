"""nvidia_driver: the driver at the matrix version, held; nvidia-persistenced enabled and
running; a rolling reboot only when the loaded module is not the pinned one."""

from gpuctl.components import Component, Module, Part, Service
from gpuctl.knobs import CONFIRM_COMMANDS, UNIT, Choice, Word

COMPONENT = Component(
    name="nvidia_driver", order=30,
    summary="the NVIDIA driver and its persistence daemon",
    parts=(
        Part("driver", lambda m: m.driver.version),
        Part("persistenced", lambda m: m.driver.version),
    ),
    services=(Service(knob="nvidia_driver_persistenced_service", part="persistenced"),),
    modules=(Module("nvidia", part="driver", versioned=True), Module("nvidia_uvm", part="driver")),
    container="shares the host kernel; cannot load the nvidia module or reboot",
    probes=("nvidia_smi", "topo", "kernel_log", "nvlink_errors", "pci_sysfs"),
    knobs={
        "nvidia_driver_confirm_command": Choice(CONFIRM_COMMANDS, "confirm command"),
        "nvidia_driver_dnf_stream_suffix_open": Word(r"(-[a-z0-9]+)?", "dnf stream suffix (like -open)"),
        "nvidia_driver_dnf_stream_suffix_proprietary": Word(r"(-[a-z0-9]+)?", "dnf stream suffix (like -dkms)"),
        "nvidia_driver_persistenced_service": UNIT,
    },
)
