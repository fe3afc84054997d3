"""lustre_client's rules for the inventory: `storage.lustre`'s MGS NIDs and LNet networks
well formed, and its mount point apart from the RAID's (a check on two components' mounts,
kept here: the Lustre client mounts last, so it is the one that would land on or under the
array's folder). Declared in roles/lustre_client/__init__.py (`Component.validate`)."""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING

from gpuctl.boundary import mounts_overlap
from gpuctl.catalog import Sku
from gpuctl.validation import Findings

if TYPE_CHECKING:
    from gpuctl.inventory import Inventory

# Lustre NID: "10.0.0.5@o2ib", "10.0.0.5@tcp1", "192.168.1.2@o2ib0"
_NID = re.compile(r"(?P<addr>[0-9.]+)@(?P<net>(tcp|o2ib|kfi|gni)\d*)")
# LNet networks: "o2ib0(ib0)", "tcp0(eth0),o2ib1(ib1)"
_LNET = re.compile(r"(tcp|o2ib)\d*\([A-Za-z0-9_.-]+\)(,(tcp|o2ib)\d*\([A-Za-z0-9_.-]+\))*")


def lustre_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Lustre: NIDs and the LNet string well formed; its mount apart from the RAID's."""
    raid = inv.storage.raid
    lustre = inv.storage.lustre
    if lustre is not None:
        for k, nid in enumerate(lustre.mgs_nids):
            m = _NID.fullmatch(nid)
            if not m:
                found.err(("storage", "lustre", "mgs_nids", k), f"'{nid}' is not a Lustre NID like 10.0.0.5@o2ib")
                continue
            try:
                ipaddress.IPv4Address(m.group("addr"))
            except ValueError:
                found.err(("storage", "lustre", "mgs_nids", k),
                          f"'{m.group('addr')}' in '{nid}' is not an IPv4 address")
        if not _LNET.fullmatch(lustre.lnet):
            found.err(("storage", "lustre", "lnet"), f"'{lustre.lnet}' is not an LNet networks string like o2ib0(ib0)")
        if raid is not None and mounts_overlap(lustre.mount, raid.mount):
            found.err(("storage", "lustre", "mount"), f"{lustre.mount} and the RAID's mount point {raid.mount} are the "
                "same folder or one lies inside the other; give each its own folder")
