"""Checks of the lustre_client role: client packages pinned and held, the file system mounted."""

from __future__ import annotations

from gpuctl.checks.api import (
    Remediation,
    check_package_held,
    check_package_pinned,
    expect,
    fail,
    for_each,
    packages_of,
)

ROLE = "lustre_client"


@for_each(packages_of(ROLE))
def test_package_pinned(host, spec, probe, item):
    check_package_pinned(spec, probe, item)


@for_each(packages_of(ROLE))
def test_package_held(host, spec, probe, item):
    check_package_held(spec, probe, item)


def test_lustre_mounted(host, spec, probe):
    lustre = spec.lustre
    mount = probe.mounts().get(lustre.mount)
    if mount is None:
        fail(f"Lustre {lustre.source} is not mounted at {lustre.mount}", expected=f"{lustre.source} on "
             f"{lustre.mount} type lustre", found="not mounted", remediation=Remediation.RECONFIGURE)
    expect(mount.fstype == "lustre" and mount.source == lustre.source,
           f"{lustre.mount} holds {mount.source} ({mount.fstype})", expected=f"{lustre.source} type lustre",
           found=f"{mount.source} type {mount.fstype}", remediation=Remediation.RECONFIGURE)
