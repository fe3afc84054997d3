"""nvme_raid's rules for the inventory: `storage.raid` names NVMe namespaces, enough of them
for its level, and wipes only devices it lists. Declared in roles/nvme_raid/__init__.py
(`Component.validate`)."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from gpuctl.catalog import Sku
from gpuctl.validation import Findings

if TYPE_CHECKING:
    from gpuctl.inventory import Inventory


def raid_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """The RAID: NVMe device paths, enough devices for the level, wipe only listed devices."""
    raid = inv.storage.raid
    if raid is not None:
        if isinstance(raid.devices, list):
            counts = Counter(raid.devices)
            for k, d in enumerate(raid.devices):
                if not re.fullmatch(r"/dev/(nvme\d+n\d+|disk/by-[a-z-]+/[A-Za-z0-9_.:+@=-]+)", d):
                    found.err(("storage", "raid", "devices", k),
                        f"'{d}' is not an NVMe namespace path (/dev/nvmeXnY or /dev/disk/by-id/…)")
                if counts[d] > 1:
                    found.err(("storage", "raid", "devices", k), f"'{d}' is listed twice")
            n_dev = len(raid.devices)
            need = {0: 1, 1: 2, 10: 4}[raid.level]
            if n_dev < need:
                found.err(("storage", "raid", "devices"),
                          f"RAID{raid.level} needs at least {need} devices, {n_dev} listed")
            if raid.level == 10 and n_dev % 2:
                found.err(("storage", "raid", "devices"), "RAID10 needs an even number of devices")
            for k, w in enumerate(raid.wipe):
                if w not in raid.devices:
                    found.err(("storage", "raid", "wipe", k), f"'{w}' is not one of the RAID devices")
        else:
            for k, w in enumerate(raid.wipe):
                found.err(("storage", "raid", "wipe", k),
                    f"'{w}': wipe needs an explicit device list (devices: auto never wipes anything)")
