"""Boot state of a host: GRUB flavour, running kernel, the kernel the next boot uses.

`BOOT_SCRIPT` reads it in one shell command; `parse_boot` turns its `key=value` lines into
a `BootState`. Shared by the provisioning fact (`gpuctl.facts.system.BootInfo`) and the
node checks, which must not import pyinfra to read it (verify's start-up, issue 8).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.parsers._common import key_values


@dataclass(frozen=True)
class BootState:
    grub: str | None  # "debian" (update-grub), "rhel" (grubby), or None: not booted through GRUB
    running_kernel: str
    boot_kernel: str  # the kernel the next boot uses
    boot_kernel_source: str  # how boot_kernel was found
    default_args: str  # RHEL: grubby args of the default entry; "" elsewhere

    @property
    def boots_through_grub(self) -> bool:
        return self.grub is not None


BOOT_SCRIPT = r"""
running=$(uname -r)
grub=""
if [ -d /boot/grub ] && command -v update-grub >/dev/null 2>&1; then grub=debian; fi
if [ -z "$grub" ] && [ -d /boot/grub2 ] && command -v grubby >/dev/null 2>&1; then grub=rhel; fi
boot=""; src=""; args=""
if [ "$grub" = rhel ]; then
  boot=$(grubby --default-kernel 2>/dev/null | sed 's|.*/vmlinuz-||'); src="grubby --default-kernel"
  args=$(grubby --info=DEFAULT 2>/dev/null | sed -n 's/^args="\(.*\)"$/\1/p')
elif [ -n "$grub" ]; then
  boot=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sed 's|.*/vmlinuz-||' | sort -V | tail -n1); src="newest /boot/vmlinuz-*"
fi
if [ -z "$boot" ]; then boot=$running; src="running kernel (no GRUB: the next boot uses the same kernel)"; fi
echo "grub=$grub"; echo "running=$running"; echo "boot=$boot"; echo "boot_source=$src"; echo "args=$args"
"""


def parse_boot(lines: list[str]) -> BootState:
    kv = key_values(lines)
    running = kv.get("running", "")
    return BootState(
        grub=kv.get("grub") or None,
        running_kernel=running,
        boot_kernel=kv.get("boot") or running,
        boot_kernel_source=kv.get("boot_source", ""),
        default_args=kv.get("args", ""),
    )
