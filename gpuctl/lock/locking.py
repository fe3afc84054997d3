"""`gpuctl lock`: read the selected nodes and write the lock file (a lock must be whole).
"""


from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuctl.errors import ExecutionError
from gpuctl.inventory import LoadedInventory
from gpuctl.lock import read as reading
from gpuctl.lock.model import LockFile, build_lock, load_lock, lock_path, write_lock
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve

log = logging.getLogger(__name__)


@dataclass
class LockOutcome:
    lock: LockFile
    path: Path
    errors: dict[str, str]
    run_id: str | None = None


def lock(loaded: LoadedInventory, limit: Sequence[str] = (), record: RunRecord | None = None,
         path: str | Path | None = None) -> LockOutcome:
    """Read the selected nodes and write the lock file (nodes outside --limit keep their
    entries). ExecutionError when any selected node cannot be read: a lock must be whole."""

    specs = resolve(loaded, tuple(limit))
    target = Path(path) if path else lock_path(loaded.path)
    previous = load_lock(target) if limit and target.is_file() else None
    read = reading.read_nodes(loaded, specs, record)
    if read.errors:
        raise ExecutionError(
            f"could not read {len(read.errors)} node(s); {target} not written: "
            + "; ".join(f"{n}: {e}" for n, e in sorted(read.errors.items())))
    lockfile = build_lock(loaded, read.nodes, previous)
    write_lock(lockfile, target)
    if record is not None:
        record.stage("lock", {"path": str(target), "nodes": sorted(read.nodes),
                              "lock": lockfile.model_dump(mode="json")})
    return LockOutcome(lockfile, target, read.errors, record.id if record else None)
