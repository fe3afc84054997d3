"""base: kernel command line, nouveau blacklisted, sysctl, memlock limits, package holds
against unattended upgrades (roles/base: install.py, checks.py, defaults.yaml)."""

from gpuctl.components import Component, ManagedFile, on_apt
from gpuctl.knobs import CMDLINE_WORD, PACKAGE, Path

COMPONENT = Component(
    name="base", order=10,
    summary="host settings every GPU node needs before the NVIDIA stack",
    files=(
        ManagedFile("/etc/modprobe.d/*gpuctl*", covers=("{base_blacklist_file}",)),
        ManagedFile("/etc/sysctl.d/90-gpuctl.conf", knob="base_sysctl_file"),
        ManagedFile("/etc/security/limits.d/90-gpuctl-memlock.conf", knob="base_limits_file"),
        ManagedFile("/etc/default/grub.d/gpuctl.cfg", knob="base_grub_dropin", when=on_apt),
        ManagedFile("/etc/apt/apt.conf.d/51gpuctl-unattended-upgrades", knob="base_unattended_upgrades_file",
                    when=on_apt),
    ),
    knobs={
        "base_kernel_cmdline_extra": CMDLINE_WORD,
        "base_grub_dropin": Path(("/etc/default/grub.d",)),
        "base_blacklist_file": Path(("/etc/modprobe.d",)),
        "base_sysctl_file": Path(("/etc/sysctl.d",)),
        "base_limits_file": Path(("/etc/security/limits.d",)),
        "base_unattended_upgrades_file": Path(("/etc/apt/apt.conf.d",)),
        "base_packages_apt": PACKAGE,
        "base_packages_dnf": PACKAGE,
    },
)
