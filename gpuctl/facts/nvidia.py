"""NVIDIA kernel module state: the version loaded now and the version built for the
kernel the node will boot next.

`NvidiaModule` answers, in one command, the two questions the nvidia_driver role asks
at execution time (after the packages changed in the same run):

- loaded: ``/sys/module/nvidia/version`` (absent when no nvidia module is loaded), read
  by `gpuctl.parsers.kernel.loaded_nvidia_version` as verify and the lock read it;
- installed for the boot kernel: ``modinfo -k <kver> -F version nvidia``, where kver is
  the kernel the next boot uses (GRUB's default on RHEL via grubby, the newest
  ``/boot/vmlinuz-*`` on Debian/Ubuntu with GRUB, the running kernel on hosts that do
  not boot through GRUB — e.g. the lab's QEMU ``-kernel`` boot, where the next boot
  uses the same kernel image).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyinfra.api import FactBase

from gpuctl.facts import marker, one_line
from gpuctl.parsers._common import key_values
from gpuctl.parsers.boot import BOOT_SCRIPT, BootState, parse_boot
from gpuctl.parsers.kernel import NVIDIA_MODULE_VERSION_FILE, loaded_nvidia_version

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NvidiaModuleState:
    boot: BootState
    loaded_version: str | None     # /sys/module/nvidia/version now
    installed_version: str | None  # modinfo -k <boot kernel> -F version nvidia

    def needs_reboot(self, pinned: str) -> bool:
        """The pinned module is not the loaded one (a reboot would load the installed one)."""
        return self.loaded_version != pinned


def parse_nvidia_module(lines: list[str]) -> NvidiaModuleState:
    kv = key_values(lines)
    return NvidiaModuleState(
        boot=parse_boot(lines),
        loaded_version=loaded_nvidia_version(kv.get("loaded"))[0],
        installed_version=kv.get("installed") or None,
    )


class NvidiaModule(FactBase[NvidiaModuleState]):
    """Loaded nvidia module version and the one built for the next boot's kernel."""

    def command(self) -> str:
        return (marker("nvidia-module") + " " + one_line(BOOT_SCRIPT)
                + f"; echo \"loaded=$(cat {NVIDIA_MODULE_VERSION_FILE} 2>/dev/null)\""
                + "; echo \"installed=$(modinfo -k \"$boot\" -F version nvidia 2>/dev/null)\"")

    @staticmethod
    def default() -> NvidiaModuleState:
        return parse_nvidia_module([])

    def process(self, output: list[str]) -> NvidiaModuleState:
        return parse_nvidia_module(output)
