"""nvme_raid role on @fake hosts: create, converge, assemble, and every refusal path.

Each refusal test asserts that the host failed, that the failure names the device and the
signature, and that no command that could write to a disk ran (no mdadm --create, wipefs -a,
mkfs) — so removing any refusal makes its test fail.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuctl.deploy_context import RunOptions
from gpuctl.runner.roles import load_role
from gpuctl.spec import NodeSpec, RaidSpec

pytestmark = pytest.mark.deploy

DATA = Path(__file__).parents[1] / "data" / "storage"  # tests/deploy/data: shared recordings
NVME = [f"/dev/nvme{i}n1" for i in range(4)]
UUID_MD = "6f1b2c3d:11111111:22222222:33333333"
UUID_FS = "0b7e0a6c-2b4e-4c36-9b1e-0d2f0c4b7a11"
DETAIL = f"ARRAY /dev/md0 metadata=1.2 name=gpu-01:md0 UUID={UUID_MD}"
MDSTAT_EMPTY = "Personalities : \nunused devices: <none>\n"
MDSTAT_MD0 = ("Personalities : [raid0]\nmd0 : active raid0 nvme3n1[3] nvme2n1[2] nvme1n1[1] nvme0n1[0]\n"
              "      8378368 blocks super 1.2 512k chunks\n\nunused devices: <none>\n")
EXAMINE_MD0 = (f"ARRAY /dev/md/md0  level=raid0 metadata=1.2 num-devices=4 UUID={UUID_MD} name=gpu-01:md0\n"
               "   devices=/dev/nvme3n1,/dev/nvme2n1,/dev/nvme1n1,/dev/nvme0n1\n")
FAMILIES = {
    "debian12": ("lab.yaml", {}),
    "ubuntu2204": ("lab.yaml", {"os_family": "ubuntu2204", "os": "ubuntu-22.04"}),
    "rhel9": ("lab.yaml", {"os_family": "rhel9", "os": "rocky-9", "package_manager": "dnf"}),
}
WRITES = ("mdadm --create", "wipefs -a", "mkfs.", "mdadm --assemble", "update-initramfs", "dracut")


def signatures(sigs: dict[str, list[tuple[str, str]]]) -> Any:
    """A response for the DeviceSignatures fact: answers per device named in the command."""
    def answer(command: str) -> list[str]:
        out = []
        for dev in re.findall(r"wipefs -n -J (\S+) \|\|", command):
            out.append(f"### gpuctl-device {dev}")
            out.append(json.dumps({"signatures": [
                {"device": dev[5:], "offset": off, "type": t, "uuid": None, "label": None}
                for t, off in sigs.get(dev, [])]}))
        return out
    return answer


def responses(*, lsblk: str = "lsblk-fresh.json", sigs: dict[str, list[tuple[str, str]]] | None = None,
              mdstat: str = MDSTAT_EMPTY, examine: str = "", root: str = "/dev/vda", detail: str = "",
              fs_uuid: str = "", mdadm_conf: str = "", fstab: str = "", mounted: str = "",
              resolved: dict[str, str] | None = None) -> dict[Any, Any]:
    return {
        "dpkg -l": ["ii  mdadm      4.2-5        amd64  tool to administer Linux MD arrays",
                    "ii  xfsprogs   6.1.0-1      amd64  Utilities for managing the XFS filesystem"],
        "rpm --queryformat": ["mdadm 4.2-8.el9", "xfsprogs 6.3.0-1.el9"],
        "lsblk -J -b": (DATA / lsblk).read_text(),
        "readlink -f": [f"{k} {v}" for k, v in (resolved or {}).items()],
        "wipefs -n -J": signatures(sigs or {}),
        "cat /proc/mdstat": mdstat,
        "mdadm --examine --scan": examine,
        "findmnt -n -o SOURCE /": root,
        "mdadm --detail --brief /dev/md0 2>/dev/null": detail,
        "blkid -s UUID -o value /dev/md0 2>": fs_uuid,
        "cat /etc/mdadm/mdadm.conf": mdadm_conf,
        "cat /etc/mdadm.conf": mdadm_conf,
        "cat /etc/fstab": fstab,
        "findmnt -n -o SOURCE,FSTYPE --mountpoint": mounted,
    }


def converged(fs_uuid: str = UUID_FS) -> dict[Any, Any]:
    return responses(
        lsblk="lsblk-converged.json", sigs={d: [("linux_raid_member", "0x1000")] for d in NVME},
        mdstat=MDSTAT_MD0, examine=EXAMINE_MD0, detail=DETAIL, fs_uuid=fs_uuid, mdadm_conf=DETAIL + "\n",
        fstab=f"/dev/vda / ext4 errors=remount-ro 0 1\nUUID={fs_uuid} /raid xfs defaults,nofail,noatime 0 0\n",
        mounted="/dev/md0 xfs")


def specs(fake: Any, family: str = "debian12", **raid: Any) -> list[NodeSpec]:
    inv, update = FAMILIES[family]
    out = fake.specs(inv, limit=("gpu-01",), **update)
    if raid:
        base = out[0].raid
        assert base is not None
        out = [s.model_copy(update={"raid": RaidSpec(**{**base.model_dump(), **raid})}) for s in out]
    return out


def run(fake: Any, family: str = "debian12", options: RunOptions | None = None, **kw: Any) -> Any:
    raid = kw.pop("raid", {})
    return fake.run(load_role("nvme_raid").install, specs(fake, family, **raid), responses=responses(**kw)
                    if "preset" not in kw else kw["preset"], options=options)["gpu-01"]


def names(ops: list[str]) -> list[str]:
    """Operation names without the deploy prefix ("nvme_raid: install | ")."""
    return [o.split(" | ", 1)[-1] for o in ops]


def writes(h: Any) -> list[str]:
    return [c for c in h.execute_commands if any(w in c for w in WRITES)]


# ------------------------------------------------------------------ fresh / converged per OS family

@pytest.mark.parametrize("family", list(FAMILIES))
def test_fresh_host_creates_raid0_mkfs_mdadm_conf_fstab_mount(fake: Any, family: str) -> None:
    h = run(fake, family)
    assert h.status == "ok", h.error
    cmds = "\n".join(h.execute_commands)
    create = [c for c in h.execute_commands if "mdadm --create" in c]
    assert len(create) == 1
    assert "mdadm --create /dev/md0 --level=0 --raid-devices=4 --metadata=1.2 --name=md0 --run --chunk=512K " \
           "/dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1 /dev/nvme3n1" in create[0]
    assert "now carries" in create[0]  # execution-time re-check before create
    assert "mkfs.xfs -q /dev/md0" in cmds and "refusing mkfs" in cmds
    assert "wipefs -a" not in cmds
    conf = "/etc/mdadm.conf" if family == "rhel9" else "/etc/mdadm/mdadm.conf"
    assert f"mv {conf}.gpuctl {conf}" in cmds
    assert ("dracut -f" if family == "rhel9" else "update-initramfs -u") in cmds
    assert "/raid xfs defaults,nofail,noatime 0 0" in cmds and "blkid -s UUID -o value /dev/md0" in cmds
    assert "mkdir -p /raid && mount /raid" in cmds
    assert "vda" not in " ".join(create)
    assert names(h.changed_ops)[-4:] == [
        "Record /dev/md0 in " + conf, "Rebuild the initramfs so the array assembles at boot",
        "Mount /dev/md0 at /raid from /etc/fstab (nofail)", "Mount /raid"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_converged_host_changes_nothing(fake: Any, family: str) -> None:
    h = run(fake, family, preset=converged())
    assert h.status == "ok", h.error
    assert h.changed_ops == []
    assert {o.status for o in h.ops} == {"unchanged"}
    # at execution only facts are re-read (operations re-check the host); nothing else runs
    assert set(h.execute_commands) <= set(h.prepare_commands)


def test_fresh_host_ext4_and_raid10_explicit(fake: Any) -> None:
    h = run(fake, raid={"level": 10, "fs": "ext4", "devices": tuple(NVME)})
    assert h.status == "ok", h.error
    cmds = "\n".join(h.execute_commands)
    assert "--level=10 --raid-devices=4" in cmds and "mkfs.ext4 -q /dev/md0" in cmds


def test_existing_array_is_kept_but_missing_fstab_line_is_added(fake: Any) -> None:
    pre = converged()
    pre["cat /etc/fstab"] = "/dev/vda / ext4 errors=remount-ro 0 1\n"
    pre["findmnt -n -o SOURCE,FSTYPE --mountpoint"] = ""
    h = run(fake, preset=pre)
    assert h.status == "ok", h.error
    assert writes(h) == []
    assert names(h.changed_ops) == ["Mount /dev/md0 at /raid from /etc/fstab (nofail)", "Mount /raid"]


def test_stopped_array_is_assembled_never_created(fake: Any) -> None:
    pre = responses(sigs={d: [("linux_raid_member", "0x1000")] for d in NVME}, examine=EXAMINE_MD0)
    h = run(fake, preset=pre)
    assert h.status == "ok", h.error
    cmds = "\n".join(h.execute_commands)
    assert f"mdadm --assemble /dev/md0 --uuid={UUID_MD} /dev/nvme0n1 /dev/nvme1n1 /dev/nvme2n1 /dev/nvme3n1" in cmds
    assert "mdadm --create" not in cmds and "mkfs" not in cmds and "wipefs -a" not in cmds


def test_os_disk_never_selected_by_auto(fake: Any) -> None:
    h = run(fake, lsblk="lsblk-nvme-root.json", root="/dev/nvme0n1p2")
    assert h.status == "ok", h.error
    (create,) = [c for c in h.execute_commands if "mdadm --create" in c]
    assert "/dev/nvme0n1 " not in create and not create.endswith("/dev/nvme0n1")
    assert "/dev/nvme1n1 /dev/nvme2n1 /dev/nvme3n1 /dev/nvme4n1" in create


def test_allow_wipe_with_inventory_entry_wipes_only_that_device(fake: Any) -> None:
    h = run(fake, raid={"devices": tuple(NVME), "wipe": (NVME[2],)}, options=RunOptions(allow_wipe=True),
            sigs={NVME[2]: [("xfs", "0x0")]})
    assert h.status == "ok", h.error
    assert [c for c in h.execute_commands if "wipefs -a" in c] == [f"wipefs -a {NVME[2]}"]
    assert h.execute_commands.index(f"wipefs -a {NVME[2]}") < next(
        i for i, c in enumerate(h.execute_commands) if "mdadm --create" in c)


# ------------------------------------------------------------------ refusals: fail the host, write nothing

def assert_refused(h: Any, *needles: str) -> None:
    assert h.status == "failed"
    assert writes(h) == [], writes(h)
    text = h.error + "\n" + "\n".join(h.execute_commands)
    for n in needles:
        assert n in text, f"{n!r} not in failure: {h.error}"


def test_filesystem_on_listed_device_is_refused_naming_device_and_signature(fake: Any) -> None:
    h = run(fake, raid={"devices": tuple(NVME)}, sigs={NVME[1]: [("xfs", "0x0")]})
    assert_refused(h, NVME[1], "xfs", "not listed under storage.raid.wipe")
    assert "Refuse to build /dev/md0" in names(h.failed_ops)


def test_allow_wipe_without_inventory_entry_still_refuses(fake: Any) -> None:
    h = run(fake, raid={"devices": tuple(NVME)}, options=RunOptions(allow_wipe=True),
            sigs={NVME[1]: [("ext4", "0x438")]})
    assert_refused(h, NVME[1], "ext4", "--allow-wipe alone is not enough")


def test_inventory_entry_without_allow_wipe_still_refuses(fake: Any) -> None:
    h = run(fake, raid={"devices": tuple(NVME), "wipe": (NVME[1],)}, sigs={NVME[1]: [("xfs", "0x0")]})
    assert_refused(h, NVME[1], "xfs", "lacks --allow-wipe")


def test_os_disk_listed_explicitly_is_refused_even_with_wipe_and_allow(fake: Any) -> None:
    devs = ("/dev/nvme0n1", "/dev/nvme1n1")
    h = run(fake, raid={"devices": devs, "wipe": ("/dev/nvme0n1",)}, options=RunOptions(allow_wipe=True),
            lsblk="lsblk-nvme-root.json", root="/dev/nvme0n1p2", sigs={"/dev/nvme0n1": [("gpt", "0x200")]})
    assert_refused(h, "/dev/nvme0n1", "OS disk")


def test_auto_with_every_namespace_used_is_refused(fake: Any) -> None:
    h = run(fake, sigs={d: [("ext4", "0x438")] for d in NVME})
    assert_refused(h, "found 0 blank", NVME[0], "ext4")


def test_degraded_array_is_reported_not_repaired(fake: Any) -> None:
    mdstat = ("Personalities : [raid1]\nmd0 : active raid1 nvme1n1[1](F) nvme0n1[0]\n"
              "      2094080 blocks super 1.2 [2/1] [U_]\n\nunused devices: <none>\n")
    h = run(fake, raid={"level": 1, "devices": tuple(NVME[:2])}, mdstat=mdstat,
            sigs={d: [("linux_raid_member", "0x1000")] for d in NVME[:2]})
    assert_refused(h, "degraded", "1/2", NVME[1])
    assert "Report degraded /dev/md0" in names(h.failed_ops)


def test_existing_array_without_filesystem_is_not_mkfsed(fake: Any) -> None:
    pre = converged(fs_uuid="")
    h = run(fake, preset=pre)
    assert_refused(h, "carries no filesystem")


def test_something_else_mounted_at_the_mount_point_fails(fake: Any) -> None:
    pre = converged()
    pre["findmnt -n -o SOURCE,FSTYPE --mountpoint"] = "/dev/vdb1 ext4"
    h = run(fake, preset=pre)
    assert h.status == "failed"
    assert "Mount /raid" in h.error
    assert any("mounted from /dev/vdb1" in c and "exit 1" in c for c in h.execute_commands)
