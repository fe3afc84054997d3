"""Checks of the lustre_client role: client packages pinned and held, the file system mounted."""

from __future__ import annotations

from gpuctl.checks.api import (
    Remediation,
    component_checks,
    expect,
    fail,
)

ROLE = "lustre_client"

globals().update(component_checks(ROLE))  # packages pinned/held, services, modules (declared)


def test_lustre_mounted(host, spec, probe):
    lustre = spec.lustre
    mount = probe.mounts().get(lustre.mount)
    if mount is None:
        fail(f"Lustre {lustre.source} is not mounted at {lustre.mount}", expected=f"{lustre.source} on "
             f"{lustre.mount} type lustre", found="not mounted", remediation=Remediation.RECONFIGURE)
    expect(mount.fstype == "lustre" and mount.source == lustre.source,
           f"{lustre.mount} holds {mount.source} ({mount.fstype})", expected=f"{lustre.source} type lustre",
           found=f"{mount.source} type {mount.fstype}", remediation=Remediation.RECONFIGURE)
