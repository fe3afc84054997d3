"""Checks of the nvme_raid role: the md array is clean with every member in its slot, and
its file system is mounted where the spec says."""

from __future__ import annotations

from gpuctl.checks.api import Remediation, expect, fail, for_each

ROLE = "nvme_raid"


def slot_items(spec):
    return [f"slot{i}" for i in range(spec.raid.expected_members)] if spec.raid else []


def _md(spec, probe):
    md = probe.md_detail()
    if md is None:
        fail(f"the md array {spec.raid.name} does not exist", expected=f"/dev/{spec.raid.name} "
             f"raid{spec.raid.level} of {spec.raid.expected_members} devices", found="no such array",
             remediation=Remediation.RECONFIGURE)
    return md


def test_raid_state(host, spec, probe):
    raid = spec.raid
    md = _md(spec, probe)
    state = {s.strip() for s in md.state.split(",")}
    bad = state - {"clean", "active"}
    expect(not bad, f"{md.device} is {md.state}", expected="clean", found=md.state,
           remediation=Remediation.RESEAT_OR_REPLACE)
    expect(md.level == f"raid{raid.level}", f"{md.device} is {md.level}", expected=f"raid{raid.level}",
           found=md.level, remediation=Remediation.RECONFIGURE)
    expect(md.raid_devices == raid.expected_members and (md.working_devices or 0) >= raid.expected_members,
           f"{md.device}: {md.working_devices} working of {md.raid_devices} devices",
           expected=f"{raid.expected_members} working devices",
           found=f"{md.working_devices} working, {md.failed_devices} failed, {md.raid_devices} in the array",
           remediation=Remediation.RESEAT_OR_REPLACE)


@for_each(slot_items)
def test_raid_member(host, spec, probe, item):
    slot = int(item.removeprefix("slot"))
    md = _md(spec, probe)
    member = md.slot(slot)
    if member is None:
        fail(f"{md.device}: no device in slot {slot} (array of {md.raid_devices})",
             expected=f"slot {slot} active sync", found="no such slot", remediation=Remediation.RESEAT_OR_REPLACE)
    want_dev = None
    if spec.raid.devices != "auto":
        want_dev = spec.raid.devices[slot]
    expect("active" in member.state and "faulty" not in member.state and member.device is not None,
           f"{md.device} slot {slot}: {member.state}" + (f" ({member.device})" if member.device else ""),
           expected=f"slot {slot} active sync" + (f" on {want_dev}" if want_dev else ""),
           found=f"{member.state} {member.device or ''}".strip(), remediation=Remediation.RESEAT_OR_REPLACE)
    if want_dev:
        expect(member.device == want_dev, f"{md.device} slot {slot} holds {member.device}", expected=want_dev,
               found=member.device, remediation=Remediation.RECONFIGURE)


def test_raid_mounted(host, spec, probe):
    raid = spec.raid
    mount = probe.mounts().get(raid.mount)
    if mount is None:
        fail(f"nothing mounted at {raid.mount}", expected=f"{raid.fs} on {raid.mount}", found="not mounted",
             remediation=Remediation.RECONFIGURE)
    expect(mount.fstype == raid.fs and "/md" in mount.source, f"{raid.mount} holds {mount.source} ({mount.fstype})",
           expected=f"/dev/md* ({raid.fs}) on {raid.mount}", found=f"{mount.source} ({mount.fstype})",
           remediation=Remediation.RECONFIGURE)
    expect(mount.options.split(",")[0] == "rw", f"{raid.mount} is mounted {mount.options.split(',')[0]}",
           expected="rw", found=mount.options, remediation=Remediation.RESEAT_OR_REPLACE)
