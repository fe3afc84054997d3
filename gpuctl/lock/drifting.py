"""`gpuctl drift`: read the selected nodes now and compare them with the lock and with each other.
"""


from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from gpuctl.inventory import LoadedInventory
from gpuctl.lock import read as reading
from gpuctl.lock.compare import DriftReport, diff
from gpuctl.lock.model import load_lock, lock_path
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve

log = logging.getLogger(__name__)


def drift(loaded: LoadedInventory, limit: Sequence[str] = (), record: RunRecord | None = None,
          path: str | Path | None = None) -> DriftReport:
    """Read the selected nodes now and compare them with the lock and with each other."""

    lockfile = load_lock(Path(path) if path else lock_path(loaded.path))
    specs = resolve(loaded, tuple(limit))
    read = reading.read_nodes(loaded, specs, record)
    report = diff(lockfile, read.nodes, read.errors, nodes=[s.node for s in specs],
                  spec=specs[0])
    if record is not None:
        record.stage("drift", report.as_dict())
    return report
