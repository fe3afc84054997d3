"""base: the host settings every GPU node needs before the NVIDIA stack.

- nouveau (spec.blacklisted_modules) blacklisted in modprobe.d; the initramfs rebuilt
  only when that file changed;
- kernel command line additions (spec.kernel_cmdline, e.g. iommu=pt): a GRUB drop-in +
  update-grub on Debian/Ubuntu, grubby on RHEL 9; hosts that do not boot through GRUB
  (no /boot/grub, e.g. the lab's QEMU -kernel boot) are reported "not applicable";
- sysctl drop-in from spec.sysctl, applied when it changed; a floor (spec.sysctl_minimums)
  never lowers a higher value the node already runs with;
- memlock unlimited (limits.d);
- unattended upgrades kept off the pinned packages: apt-mark hold (each role holds its
  own) plus an unattended-upgrades Package-Blacklist of every pinned NVIDIA package;
- distribution prerequisites (gnupg, curl, dnf versionlock plugin, …).

nvidia-persistenced is installed, held and enabled by nvidia_driver: its package comes
from the NVIDIA repository, which nvidia_repo configures after this role.
"""

from __future__ import annotations

import logging

from pyinfra import host
from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.facts.system import BootInfo, FileStates, SysctlValues
from gpuctl.operations import (
    grubby_args,
    install_packages,
    refresh_grub,
    refresh_initramfs,
    render,
    report,
    role_knobs,
    sysctl_apply,
    write_file,
)
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)


def unattended_blacklist_patterns(names: list[str]) -> list[str]:
    """Exact-name regexes for unattended-upgrades (re.match from the start; '+' made literal
    without backslashes, which apt.conf strings would need escaped)."""
    return [n.replace("+", "[+]").replace(".", "[.]") + "$" for n in sorted(set(names))]


def sysctl_settings(spec: NodeSpec, running: dict[str, str]) -> list[tuple[str, str]]:
    """The drop-in's (key, value) lines: a floor (spec.sysctl_minimums) keeps the running
    kernel's value when that is higher (a node tuned beyond gpuctl's floor is not lowered,
    also at the next boot, when systemd-sysctl applies this file last); the rest as given."""
    return [(key, running[key] if key in running and spec.sysctl_met(key, running[key]) else want)
            for key, want in sorted(spec.sysctl.items())]


@deploy("base")
def install() -> None:
    spec = node_spec()
    k = role_knobs("base")
    apt = spec.package_manager == "apt"
    paths = [str(k["base_blacklist_file"]), str(k["base_grub_dropin"]), str(k["base_sysctl_file"]),
             str(k["base_limits_file"]), str(k["base_unattended_upgrades_file"])]
    files = host.get_fact(FileStates, paths=tuple(paths))
    boot = host.get_fact(BootInfo)
    running = {} if spec.node_kind == "container" else host.get_fact(SysctlValues, keys=tuple(spec.sysctl_minimums))
    pkgs = read_packages(spec.package_manager)

    prereqs = list(k["base_packages_apt"] if apt else k["base_packages_dnf"])  # type: ignore[arg-type]
    install_packages(name="Install base prerequisites (" + ", ".join(prereqs) + ")",
                     packages=prereqs, snapshot=pkgs, label="base prerequisites")

    blacklist = write_file(
        name="Blacklist " + ", ".join(spec.blacklisted_modules) + " in modprobe.d",
        path=str(k["base_blacklist_file"]),
        content=render("base", "blacklist.conf.j2", modules=list(spec.blacklisted_modules)),
        states=files)
    # Container lab nodes share the host kernel: no initramfs of their own, /proc/sys read-only.
    kernel_na = ("not applicable in this node kind (container: shares the host kernel)"
                 if spec.node_kind == "container" else "")
    initramfs = "Rebuild the initramfs with " + ", ".join(spec.blacklisted_modules) + " blacklisted"
    if kernel_na:
        report(name=initramfs, message=kernel_na)
    else:
        refresh_initramfs(name=initramfs, package_manager=spec.package_manager, _if=blacklist.did_change)

    words = [*spec.kernel_cmdline, *[str(w) for w in k["base_kernel_cmdline_extra"]]]  # type: ignore[union-attr]
    cmdline = " ".join(words)
    if apt:
        no_grub = "" if boot.grub == "debian" else (
            "not applicable: host does not boot through GRUB" if boot.grub is None
            else f"GRUB flavour {boot.grub} is configured with grubby")
        dropin = write_file(name=f"Add {cmdline} to the kernel command line (GRUB drop-in)",
                            path=str(k["base_grub_dropin"]),
                            content=render("base", "grub.cfg.j2", words=cmdline),
                            states=files, skip_reason=no_grub)
        refresh_grub(name=f"Run update-grub for {cmdline}", boot=boot, _if=dropin.did_change)
        if no_grub:
            log.info("%s: kernel command line %s %s", host.name, cmdline, no_grub)
    else:
        grubby_args(name=f"Add {cmdline} to every kernel entry (grubby)", args=words, boot=boot)

    sysctl = write_file(name="Write sysctl settings (" + ", ".join(sorted(spec.sysctl)) + ")",
                        path=str(k["base_sysctl_file"]),
                        content=render("base", "sysctl.conf.j2", settings=sysctl_settings(spec, running)),
                        states=files)
    if kernel_na:
        report(name="Apply sysctl settings", message=kernel_na)
    else:
        sysctl_apply(name="Apply sysctl settings", path=str(k["base_sysctl_file"]), _if=sysctl.did_change)

    write_file(name="Set memlock unlimited", path=str(k["base_limits_file"]),
               content=render("base", "memlock.conf.j2"), states=files)

    if apt:
        names = [p.name for p in spec.all_packages()]
        write_file(name="Keep unattended-upgrades off the pinned NVIDIA packages",
                   path=str(k["base_unattended_upgrades_file"]),
                   content=render("base", "unattended-upgrades.conf.j2",
                                  patterns=unattended_blacklist_patterns(names)),
                   states=files)
