"""Checks of the base role: sysctl values, nouveau blacklisted and not loaded, the kernel
command line, and enough CPU memory for the SKU."""

from __future__ import annotations

import pytest

from gpuctl.checks.api import CouldNotRun, Remediation, expect, fail, for_each
from gpuctl.parsers.kernel import parse_modprobe_blacklist, sysctl_path

ROLE = "base"


@for_each(lambda spec: list(spec.sysctl))
def test_sysctl(host, spec, probe, item):
    if spec.node_kind == "container":
        pytest.skip("not applicable in this node kind (container: sysctls are the shared host kernel's)")
    want = spec.sysctl[item]
    text = probe.file(sysctl_path(item))
    if text is None:
        raise CouldNotRun(f"{sysctl_path(item)} is not readable (unknown sysctl on this kernel?)")
    found = " ".join(text.split())
    floor = item in spec.sysctl_minimums  # a node tuned higher passes (a real H200 VM: 8250340)
    expect(spec.sysctl_met(item, found), f"sysctl {item} = {found}" + (f", below {want}" if floor else ""),
           expected=f">= {want}" if floor else want, found=found, remediation=Remediation.RECONFIGURE)


@for_each(lambda spec: list(spec.blacklisted_modules))
def test_module_blacklisted(host, spec, probe, item):
    """Blacklisted in /etc/modprobe.d and not loaded now."""
    # parsed once per host, not once per module checked
    named = probe.parsed("modprobe.d blacklist",
                         lambda: parse_modprobe_blacklist(probe.files_under("/etc/modprobe.d/")))
    expect(item in named, f"{item} is not blacklisted in /etc/modprobe.d", expected=f"blacklist {item}",
           found="no 'blacklist' line", remediation=Remediation.RECONFIGURE)
    if spec.node_kind == "container":
        return  # the loaded modules are the shared host kernel's (no /proc/modules in the container)
    loaded = probe.modules()
    expect(item not in loaded, f"{item} is loaded although blacklisted in {named[item]} (initramfs not rebuilt?)",
           expected=f"{item} not loaded", found=f"{item} loaded", remediation=Remediation.REBOOT)


@for_each(lambda spec: list(spec.kernel_cmdline))
def test_kernel_cmdline(host, spec, probe, item):
    if spec.node_kind == "container":
        pytest.skip("not applicable in this node kind (container: the kernel command line is the host's)")
    args = probe.require_file("/proc/cmdline").split()
    if item not in args and not probe.boot().boots_through_grub:
        pytest.skip(f"not applicable: the host does not boot through GRUB, so its kernel command line ({item} "
                    "absent) is set outside it (e.g. QEMU -append); the base role writes no GRUB drop-in here")
    expect(item in args, f"kernel command line lacks {item}", expected=item, found=" ".join(args),
           remediation=Remediation.REBOOT)


def test_cpu_memory(host, spec, probe):
    gib = probe.memory_kib() / 1024 / 1024
    want = spec.hardware.min_cpu_memory_gib
    if gib < want:
        fail(f"{gib:.1f} GiB of CPU memory, the minimum is {want:g} GiB ({spec.hardware.min_cpu_memory_source})",
             expected=f">= {want:g} GiB", found=f"{gib:.1f} GiB", remediation=Remediation.RESEAT_OR_REPLACE)
