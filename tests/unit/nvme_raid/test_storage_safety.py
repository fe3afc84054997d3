"""plan_raid: every path (create, present, assemble, degraded, refuse) and the storage fact parsers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.errors import ParseError
from gpuctl.parsers.storage import (
    parse_detail_brief,
    parse_examine_scan,
    parse_lsblk,
    parse_mdstat,
    parse_signatures,
)
from gpuctl.spec import RaidSpec
from gpuctl.storage_safety import (
    BlockDev,
    MdArray,
    Signature,
    StorageFacts,
    Superblock,
    describe,
    os_disks,
    plan_raid,
)

NVME = [f"/dev/nvme{i}n1" for i in range(4)]


def raid(devices: str | tuple[str, ...] = "auto", wipe: tuple[str, ...] = (), level: int = 0,
         expected: int = 4) -> RaidSpec:
    return RaidSpec(level=level, devices=devices, chunk_kib=512, fs="xfs", mount="/raid", name="md0",
                    wipe=wipe, expected_members=expected)


def lab_block(extra: tuple[BlockDev, ...] = ()) -> tuple[BlockDev, ...]:
    """The lab guest: root on the whole virtio disk vda, four NVMe namespaces."""
    return (BlockDev("vda", "disk", 3 << 30, "/"),
            *(BlockDev(f"nvme{i}n1", "disk", 2 << 30) for i in range(4)), *extra)


def facts(block: tuple[BlockDev, ...] | None = None, sigs: dict[str, tuple[Signature, ...]] | None = None,
          arrays: tuple[MdArray, ...] = (), superblocks: tuple[Superblock, ...] = (), root: str = "/dev/vda",
          resolved: dict[str, str] | None = None) -> StorageFacts:
    block = lab_block() if block is None else block
    probed = {b.path: () for b in block if b.name.startswith("nvme") and b.type == "disk"}
    probed.update(sigs or {})
    return StorageFacts(block=block, signatures=probed, arrays=arrays, superblocks=superblocks,
                        root_source=root, resolved=resolved or {})


def xfs(dev: str) -> dict[str, tuple[Signature, ...]]:
    return {dev: (Signature(dev, "xfs", "0x0"),)}


# ------------------------------------------------------------------ create

def test_fresh_lab_creates_raid0_over_the_four_blank_namespaces() -> None:
    p = plan_raid(raid(), facts(), allow_wipe=False)
    assert p.action == "create"
    assert p.devices == tuple(NVME)
    assert p.wipe == ()
    assert p.array == "/dev/md0"


def test_auto_skips_the_os_disk_even_when_it_is_nvme() -> None:
    block = (BlockDev("nvme0n1", "disk", 1 << 40, None, None, "gpt"),
             BlockDev("nvme0n1p1", "part", 1 << 30, "/boot/efi", "vfat", None, "nvme0n1"),
             BlockDev("nvme0n1p2", "part", 1 << 39, "/", "ext4", None, "nvme0n1"),
             *(BlockDev(f"nvme{i}n1", "disk", 1 << 40) for i in range(1, 5)))
    f = facts(block, root="/dev/nvme0n1p2")
    assert os_disks(f) == {"nvme0n1"}
    p = plan_raid(raid(), f, allow_wipe=True)
    assert p.action == "create"
    assert "/dev/nvme0n1" not in p.devices
    assert p.devices == tuple(f"/dev/nvme{i}n1" for i in range(1, 5))
    assert any("nvme0n1: OS disk" in n for n in p.notes)


def test_auto_skips_the_os_disk_when_root_is_on_lvm() -> None:
    block = (BlockDev("nvme0n1", "disk", 1 << 40, None, None, "gpt"),
             BlockDev("nvme0n1p1", "part", 1 << 39, None, "LVM2_member", None, "nvme0n1"),
             BlockDev("vg-root", "lvm", 1 << 38, "/", "ext4", None, "nvme0n1p1"),
             BlockDev("nvme1n1", "disk", 1 << 40))
    f = facts(block, root="/dev/mapper/vg-root")
    assert os_disks(f) == {"nvme0n1"}
    p = plan_raid(raid(), f, allow_wipe=False)
    assert p.devices == ("/dev/nvme1n1",)


def test_auto_excludes_a_namespace_with_a_filesystem_and_says_so() -> None:
    p = plan_raid(raid(), facts(sigs=xfs("/dev/nvme2n1")), allow_wipe=True)
    assert p.action == "create"
    assert "/dev/nvme2n1" not in p.devices
    assert any("/dev/nvme2n1" in n and "xfs" in n for n in p.notes)
    assert any("3 members" in n for n in p.notes)


def test_auto_excludes_a_namespace_with_partitions() -> None:
    block = lab_block((BlockDev("nvme3n1p1", "part", 1 << 30, None, None, None, "nvme3n1"),))
    p = plan_raid(raid(), facts(block), allow_wipe=False)
    assert "/dev/nvme3n1" not in p.devices


def test_auto_never_takes_an_unprobed_namespace() -> None:
    f = facts()
    sigs = dict(f.signatures)
    del sigs["/dev/nvme1n1"]
    p = plan_raid(raid(), StorageFacts(f.block, sigs, root_source="/dev/vda"), allow_wipe=False)
    assert "/dev/nvme1n1" not in p.devices


def test_auto_refuses_when_nothing_is_blank() -> None:
    sigs = {d: (Signature(d, "ext4", "0x438"),) for d in NVME}
    p = plan_raid(raid(), facts(sigs=sigs), allow_wipe=True)
    assert p.action == "refuse"
    assert "found 0 blank" in p.reasons[0]
    assert all(any(d in r and "ext4" in r for r in p.reasons) for d in NVME)


def test_auto_raid10_takes_an_even_count() -> None:
    p = plan_raid(raid(level=10), facts(sigs=xfs("/dev/nvme3n1")), allow_wipe=False)
    assert p.action == "refuse"  # 3 blank -> 2 < 4


def test_auto_raid1_over_blank_namespaces() -> None:
    p = plan_raid(raid(level=1), facts(), allow_wipe=False)
    assert p.action == "create" and len(p.devices) == 4


def test_explicit_blank_devices_create() -> None:
    p = plan_raid(raid(tuple(NVME[:2]), level=1), facts(), allow_wipe=False)
    assert p.action == "create"
    assert p.devices == tuple(NVME[:2])


def test_explicit_by_id_paths_resolve() -> None:
    byid = "/dev/disk/by-id/nvme-GPUCTL01N0"
    p = plan_raid(raid((byid, NVME[1])), facts(resolved={byid: NVME[0]}), allow_wipe=False)
    assert p.action == "create"
    assert p.devices == (NVME[0], NVME[1])


# ------------------------------------------------------------------ refusals (each fails if its rule is removed)

def test_filesystem_on_explicit_device_is_refused_naming_device_and_signature() -> None:
    p = plan_raid(raid(tuple(NVME)), facts(sigs=xfs(NVME[1])), allow_wipe=False)
    assert p.action == "refuse"
    assert len(p.reasons) == 1
    assert NVME[1] in p.reasons[0] and "xfs" in p.reasons[0]
    assert "not listed under storage.raid.wipe" in p.reasons[0]


def test_allow_wipe_without_inventory_entry_still_refuses() -> None:
    p = plan_raid(raid(tuple(NVME)), facts(sigs=xfs(NVME[1])), allow_wipe=True)
    assert p.action == "refuse"
    assert NVME[1] in p.reasons[0] and "--allow-wipe alone is not enough" in p.reasons[0]


def test_inventory_entry_without_allow_wipe_still_refuses() -> None:
    p = plan_raid(raid(tuple(NVME), wipe=(NVME[1],)), facts(sigs=xfs(NVME[1])), allow_wipe=False)
    assert p.action == "refuse"
    assert NVME[1] in p.reasons[0] and "lacks --allow-wipe" in p.reasons[0]


def test_inventory_entry_and_allow_wipe_wipe_exactly_that_device() -> None:
    sigs = {**xfs(NVME[1]), NVME[2]: (Signature(NVME[2], "gpt", "0x200"),)}
    p = plan_raid(raid(tuple(NVME), wipe=(NVME[1], NVME[2])), facts(sigs=sigs), allow_wipe=True)
    assert p.action == "create"
    assert p.wipe == (NVME[1], NVME[2])


def test_wipe_entry_for_one_device_does_not_cover_another() -> None:
    sigs = {**xfs(NVME[1]), **xfs(NVME[2])}
    p = plan_raid(raid(tuple(NVME), wipe=(NVME[1],)), facts(sigs=sigs), allow_wipe=True)
    assert p.action == "refuse"
    assert [r for r in p.reasons if NVME[2] in r]
    assert not [r for r in p.reasons if NVME[1] in r]


def test_partition_table_signature_is_refused() -> None:
    sigs = {NVME[0]: (Signature(NVME[0], "gpt", "0x200"), Signature(NVME[0], "PMBR", "0x1fe"))}
    p = plan_raid(raid(tuple(NVME)), facts(sigs=sigs), allow_wipe=False)
    assert p.action == "refuse" and "gpt at offset 0x200" in p.reasons[0]


def test_lsblk_partitions_count_even_without_wipefs_signature() -> None:
    block = lab_block((BlockDev("nvme0n1p1", "part", 1 << 30, None, None, None, "nvme0n1"),))
    p = plan_raid(raid(tuple(NVME)), facts(block), allow_wipe=False)
    assert p.action == "refuse" and "partitions nvme0n1p1" in p.reasons[0]


def test_stale_raid_superblock_on_one_explicit_device_is_refused() -> None:
    sigs = {NVME[3]: (Signature(NVME[3], "linux_raid_member", "0x1000"),)}
    p = plan_raid(raid(tuple(NVME)), facts(sigs=sigs), allow_wipe=False)
    assert p.action == "refuse" and "linux_raid_member" in p.reasons[0]


@pytest.mark.parametrize("wipe,allow", [((), False), ((), True), (("/dev/nvme0n1",), False), (("/dev/nvme0n1",), True)])
def test_os_disk_listed_explicitly_is_refused_whatever_wipe_says(wipe: tuple[str, ...], allow: bool) -> None:
    block = (BlockDev("nvme0n1", "disk", 1 << 40, None, None, "gpt"),
             BlockDev("nvme0n1p1", "part", 1 << 39, "/", "ext4", None, "nvme0n1"),
             BlockDev("nvme1n1", "disk", 1 << 40))
    p = plan_raid(raid(("/dev/nvme0n1", "/dev/nvme1n1"), wipe=wipe), facts(block, root="/dev/nvme0n1p1"),
                  allow_wipe=allow)
    assert p.action == "refuse"
    assert any("/dev/nvme0n1" in r and "OS disk" in r for r in p.reasons)


def test_os_disk_found_by_findmnt_even_without_lsblk_mountpoint() -> None:
    block = (BlockDev("nvme0n1", "disk", 1 << 40), BlockDev("nvme1n1", "disk", 1 << 40))
    p = plan_raid(raid(("/dev/nvme0n1", "/dev/nvme1n1")), facts(block, root="/dev/nvme0n1"), allow_wipe=True)
    assert p.action == "refuse" and "OS disk" in p.reasons[0]


def test_unknown_root_device_refuses_everything() -> None:
    p = plan_raid(raid(), facts(root="/dev/sdz9"), allow_wipe=True)
    assert p.action == "refuse" and "cannot tell the OS disk" in p.reasons[0]


def test_mounted_device_is_never_wiped_even_when_allowed() -> None:
    block = lab_block((BlockDev("nvme2n1p1", "part", 1 << 30, "/data", "ext4", None, "nvme2n1"),))
    p = plan_raid(raid(tuple(NVME), wipe=(NVME[2],)), facts(block, sigs=xfs(NVME[2])), allow_wipe=True)
    assert p.action == "refuse"
    assert NVME[2] in p.reasons[0] and "mounted" in p.reasons[0] and "/data" in p.reasons[0]


def test_member_of_another_active_array_is_never_wiped() -> None:
    other = MdArray("/dev/md5", "active", "raid1", (NVME[0], "/dev/sdb"), raid_disks=2, working_disks=2)
    block = lab_block((BlockDev("sdb", "disk", 1 << 40),))
    p = plan_raid(raid((NVME[2], NVME[3])), facts(block, arrays=(other,)), allow_wipe=True)
    assert p.action == "create"  # md5 does not touch nvme2/3
    p = plan_raid(raid((NVME[0], NVME[1]), wipe=(NVME[0],)), facts(block, arrays=(other,)), allow_wipe=True)
    assert p.action == "refuse" and "md5" in p.reasons[0]


def test_explicit_device_that_does_not_exist_is_refused() -> None:
    p = plan_raid(raid(("/dev/nvme0n1", "/dev/nvme9n1")), facts(), allow_wipe=False)
    assert p.action == "refuse" and "/dev/nvme9n1: no such block device" in p.reasons[0]


def test_explicit_device_wipefs_could_not_probe_is_refused() -> None:
    f = facts()
    sigs = dict(f.signatures)
    del sigs[NVME[1]]
    p = plan_raid(raid(tuple(NVME)), StorageFacts(f.block, sigs, root_source="/dev/vda"), allow_wipe=True)
    assert p.action == "refuse" and NVME[1] in p.reasons[0] and "could not be probed" in p.reasons[0]


def test_explicit_raid10_needs_four() -> None:
    p = plan_raid(raid(tuple(NVME[:2]), level=10), facts(), allow_wipe=False)
    assert p.action == "refuse" and "RAID10 needs at least 4" in p.reasons[-1]


# ------------------------------------------------------------------ existing arrays: never re-created

def active_md0(members: tuple[str, ...] = tuple(NVME), level: str = "raid0", **kw: object) -> MdArray:
    return MdArray("/dev/md0", "active", level, members, **kw)  # type: ignore[arg-type]


def raid_sigs() -> dict[str, tuple[Signature, ...]]:
    return {d: (Signature(d, "linux_raid_member", "0x1000"),) for d in NVME}


def test_active_array_over_same_devices_is_present_not_created() -> None:
    for spec in (raid(), raid(tuple(NVME))):
        p = plan_raid(spec, facts(sigs=raid_sigs(), arrays=(active_md0(),)), allow_wipe=True)
        assert p.action == "present"
        assert set(p.devices) == set(NVME)


def test_active_array_under_another_name_is_adopted_in_auto_mode() -> None:
    md127 = MdArray("/dev/md127", "active", "raid0", tuple(NVME))
    p = plan_raid(raid(), facts(sigs=raid_sigs(), arrays=(md127,)), allow_wipe=False)
    assert p.action == "present" and p.array == "/dev/md127"


def test_active_array_over_other_devices_than_listed_is_refused() -> None:
    p = plan_raid(raid(tuple(NVME[:3])), facts(sigs=raid_sigs(), arrays=(active_md0(),)), allow_wipe=True)
    assert p.action == "refuse" and "never reshapes or re-creates" in p.reasons[0]


def test_active_array_of_another_level_is_refused() -> None:
    p = plan_raid(raid(level=10), facts(sigs=raid_sigs(), arrays=(active_md0(),)), allow_wipe=True)
    assert p.action == "refuse" and "raid0" in p.reasons[0] and "raid10" in p.reasons[0]


def test_superblocks_of_a_stopped_array_are_assembled_not_created() -> None:
    sb = Superblock("aa:bb:cc:dd", "raid0", 4, tuple(reversed(NVME)), "gpu-01:md0")
    for spec in (raid(), raid(tuple(NVME))):
        p = plan_raid(spec, facts(sigs=raid_sigs(), superblocks=(sb,)), allow_wipe=True)
        assert p.action == "assemble"
        assert p.uuid == "aa:bb:cc:dd"
        assert p.devices == tuple(NVME)


def test_superblocks_of_another_level_are_refused() -> None:
    sb = Superblock("aa:bb:cc:dd", "raid1", 4, tuple(NVME))
    p = plan_raid(raid(), facts(sigs=raid_sigs(), superblocks=(sb,)), allow_wipe=True)
    assert p.action == "refuse" and "aa:bb:cc:dd" in p.reasons[0]


def test_two_candidate_arrays_are_ambiguous() -> None:
    sbs = (Superblock("u1", "raid0", 2, tuple(NVME[:2])), Superblock("u2", "raid0", 2, tuple(NVME[2:])))
    p = plan_raid(raid(), facts(sigs=raid_sigs(), superblocks=sbs), allow_wipe=True)
    assert p.action == "refuse" and "several arrays" in p.reasons[0]


def test_incomplete_superblock_set_is_degraded_not_assembled() -> None:
    sb = Superblock("aa:bb", "raid1", 2, (NVME[0],))
    p = plan_raid(raid(level=1), facts(sigs=raid_sigs(), superblocks=(sb,)), allow_wipe=True)
    assert p.action == "degraded" and "1 of 2" in p.reasons[0]


def test_degraded_active_raid1_is_reported_never_recreated() -> None:
    md = active_md0((NVME[0], NVME[1]), "raid1", failed=(NVME[1],), raid_disks=2, working_disks=1)
    p = plan_raid(raid((NVME[0], NVME[1]), level=1), facts(sigs=raid_sigs(), arrays=(md,)), allow_wipe=True)
    assert p.action == "degraded"
    assert "1/2" in p.reasons[0] and NVME[1] in p.reasons[0]
    assert not p.changes


def test_inactive_array_is_reported_not_started() -> None:
    md = MdArray("/dev/md127", "inactive", None, (NVME[0],))
    p = plan_raid(raid(), facts(sigs=raid_sigs(), arrays=(md,)), allow_wipe=True)
    assert p.action == "degraded" and "inactive" in p.reasons[0]


def test_describe_names_action_and_reasons() -> None:
    p = plan_raid(raid(tuple(NVME)), facts(sigs=xfs(NVME[1])), allow_wipe=False)
    text = describe(p)
    assert text.startswith("refusing to build /dev/md0") and NVME[1] in text


# ------------------------------------------------------------------ invariants over random hosts

_sig_types = st.sampled_from(["xfs", "ext4", "gpt", "linux_raid_member", "LVM2_member", "swap"])


@st.composite
def random_hosts(draw: st.DrawFn) -> tuple[StorageFacts, RaidSpec, bool]:
    n = draw(st.integers(1, 6))
    names = [f"nvme{i}n1" for i in range(n)]
    root_on_nvme = draw(st.booleans())
    block = [BlockDev(x, "disk", 1 << 40) for x in names]
    root = "/dev/vda"
    if root_on_nvme:
        block.append(BlockDev(f"{names[0]}p1", "part", 1 << 30, "/", "ext4", None, names[0]))
        root = f"/dev/{names[0]}p1"
    else:
        block.append(BlockDev("vda", "disk", 1 << 30, "/"))
    sigs: dict[str, tuple[Signature, ...]] = {}
    for x in names:
        if draw(st.booleans()):
            sigs[f"/dev/{x}"] = tuple(Signature(f"/dev/{x}", t, "0x0") for t in draw(st.lists(_sig_types, max_size=2)))
    explicit = draw(st.booleans())
    devices: str | tuple[str, ...] = "auto"
    wipe: tuple[str, ...] = ()
    if explicit:
        devices = tuple(f"/dev/{x}" for x in draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
        wipe = tuple(d for d in devices if draw(st.booleans()))
    spec = raid(devices, wipe=wipe, level=draw(st.sampled_from([0, 1, 10])))
    return StorageFacts(tuple(block), sigs, root_source=root), spec, draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(random_hosts())
def test_invariants_no_os_disk_no_unapproved_wipe(case: tuple[StorageFacts, RaidSpec, bool]) -> None:
    f, spec, allow = case
    p = plan_raid(spec, f, allow)
    osd = {f"/dev/{d}" for d in os_disks(f)}
    if p.action == "create":
        assert not (set(p.devices) & osd)
        for d in p.devices:
            if d not in f.signatures:
                raise AssertionError(f"unprobed {d} selected")
            if f.signatures[d]:
                assert d in p.wipe
        for d in p.wipe:
            assert allow and d in spec.wipe
    if p.action == "refuse":
        assert p.reasons
    if spec.devices == "auto":
        assert not p.wipe


# ------------------------------------------------------------------ parsers

LSBLK = json.dumps({"blockdevices": [
    {"name": "vda", "type": "disk", "size": 3221225472, "mountpoint": "/", "fstype": None, "pttype": None,
     "pkname": None},
    {"name": "nvme0n1", "type": "disk", "size": 2147483648, "mountpoint": None, "fstype": "linux_raid_member",
     "pttype": None, "pkname": None, "children": [
         {"name": "md0", "type": "raid0", "size": 8579448832, "mountpoint": "/raid", "fstype": "xfs",
          "pttype": None, "pkname": "nvme0n1"}]},
]})


def test_parse_lsblk_flattens_children() -> None:
    rows = parse_lsblk(LSBLK)
    assert [r.name for r in rows] == ["vda", "nvme0n1", "md0"]
    assert rows[2].pkname == "nvme0n1" and rows[2].mountpoint == "/raid"


@pytest.mark.parametrize("text", ["", "{", '{"nope": []}'])
def test_parse_lsblk_bad_input_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_lsblk(text)


def test_parse_signatures_blank_signed_and_failed() -> None:
    text = "\n".join([
        "### gpuctl-device /dev/nvme0n1",
        '{"signatures": [{"device": "nvme0n1", "offset": "0x0", "type": "xfs", "uuid": "x", "label": null}]}',
        "### gpuctl-device /dev/nvme1n1",
        '{\n   "signatures": [\n\n   ]\n}',
        "### gpuctl-device /dev/nvme2n1",
        "### gpuctl-device /dev/nvme3n1",
        "### gpuctl-device /dev/nvme3n1 failed",
    ])
    s = parse_signatures(text)
    assert s["/dev/nvme0n1"] == (Signature("/dev/nvme0n1", "xfs", "0x0"),)
    assert s["/dev/nvme1n1"] == () and s["/dev/nvme2n1"] == ()
    assert "/dev/nvme3n1" not in s


def test_parse_signatures_garbage_raises() -> None:
    with pytest.raises(ParseError):
        parse_signatures("### gpuctl-device /dev/nvme0n1\nwipefs: error\n")


MDSTAT = """Personalities : [raid0] [raid1]
md1 : active raid1 nvme5n1[1](F) nvme4n1[0]
      2094080 blocks super 1.2 [2/1] [U_]

md0 : active raid0 nvme3n1[3] nvme2n1[2] nvme1n1[1] nvme0n1[0]
      8378368 blocks super 1.2 512k chunks

md127 : inactive nvme6n1[0](S)
      2094080 blocks super 1.2

md2 : active (auto-read-only) raid1 nvme7n1[0] nvme8n1[1]
      2094080 blocks super 1.2 [2/2] [UU]

unused devices: <none>
"""


def test_parse_mdstat() -> None:
    a = {x.device: x for x in parse_mdstat(MDSTAT)}
    assert a["/dev/md0"].level == "raid0" and not a["/dev/md0"].degraded
    assert set(a["/dev/md0"].members) == set(NVME)
    assert a["/dev/md1"].degraded and a["/dev/md1"].failed == ("/dev/nvme5n1",)
    assert (a["/dev/md1"].raid_disks, a["/dev/md1"].working_disks) == (2, 1)
    assert a["/dev/md127"].state == "inactive" and a["/dev/md127"].degraded
    assert a["/dev/md2"].level == "raid1" and not a["/dev/md2"].degraded


def test_parse_mdstat_empty() -> None:
    assert parse_mdstat("Personalities :\nunused devices: <none>\n") == ()


EXAMINE = (
    "ARRAY /dev/md/md0  level=raid0 metadata=1.2 num-devices=4 UUID=6f1b2c3d:11111111:22222222:33333333 "
    "name=gpu-01:md0\n"
    "   devices=/dev/nvme3n1,/dev/nvme2n1,/dev/nvme1n1,/dev/nvme0n1\n"
)


def test_parse_examine_scan() -> None:
    (sb,) = parse_examine_scan(EXAMINE)
    assert sb.uuid == "6f1b2c3d:11111111:22222222:33333333"
    assert sb.level == "raid0" and sb.num_devices == 4 and set(sb.devices) == set(NVME)


def test_parse_examine_scan_without_uuid_raises() -> None:
    with pytest.raises(ParseError):
        parse_examine_scan("ARRAY /dev/md/0 level=raid0\n")


def test_parse_detail_brief() -> None:
    d = parse_detail_brief("ARRAY /dev/md0 metadata=1.2 name=gpu-01:md0 UUID=6f1b2c3d:1:2:3\n")
    assert d["UUID"] == "6f1b2c3d:1:2:3"
    assert d["line"] == "ARRAY /dev/md0 metadata=1.2 name=gpu-01:md0 UUID=6f1b2c3d:1:2:3"
    assert parse_detail_brief("") == {}
