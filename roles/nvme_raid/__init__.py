"""nvme_raid: the NVMe scratch array (md RAID), its filesystem and mount."""

from gpuctl.components import Component, ManagedFile
from gpuctl.knobs import INITRAMFS_COMMANDS, MKFS_EXT4, MKFS_XFS, PACKAGE, Choice, MountOptions, Path

from .validate import raid_problems

COMPONENT = Component(
    name="nvme_raid", order=130,
    summary="the NVMe RAID scratch array",
    validate=(raid_problems,),
    files=(ManagedFile("/etc/mdadm/mdadm.conf", knob="nvme_raid_mdadm_conf", per_node=True,
                       when=lambda s: s.raid is not None),),
    applies=lambda w: "" if w.raid else "no storage.raid in the inventory",
    container="has no block devices of its own for md RAID",
    probes=("md_detail",),
    knobs={
        "nvme_raid_metadata": Choice(("1.2", "1.1", "1.0"), "mdadm superblock format"),
        "nvme_raid_mount_options": MountOptions(),
        "nvme_raid_mkfs_options": {"xfs": MKFS_XFS, "ext4": MKFS_EXT4},
        "nvme_raid_mdadm_conf": Path(files=("/etc/mdadm/mdadm.conf", "/etc/mdadm.conf")),
        "nvme_raid_initramfs_command": Choice(INITRAMFS_COMMANDS, "initramfs command"),
        "nvme_raid_packages": PACKAGE,
    },
)
