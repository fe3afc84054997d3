"""One mutating run per inventory at a time.

`hold(inventory, command, root)` takes an exclusive `fcntl.flock` on
`<runs root>/.locks/<inventory stem>-<hash of its absolute path>.lock` and writes the
holder (pid, host, command, start time, run id) into it. A second mutating command on the
same inventory gets `InventoryBusy` (exit 3) naming the holder. The kernel drops a flock
when its process dies, so a lock file left by a dead process is simply taken over; when
its recorded holder was a dead pid on this host, `Held.note` says so. Re-entrant within
one process (turnkey runs provision under its own lock).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuctl.errors import ExecutionError

#: Commands that change nodes or deliver them; read-only ones (plan, verify, report) never lock.
MUTATING = frozenset({"provision", "rebuild", "turnkey", "handover", "mirror", "bench"})


class InventoryBusy(ExecutionError):
    """Another gpuctl process is running a mutating command on the same inventory."""


@dataclass
class Held:
    path: Path
    fd: int
    note: str | None = None
    depth: int = 1


_HELD: dict[Path, Held] = {}


def lock_path(inventory: str | Path, root: Path) -> Path:
    inv = Path(inventory).resolve()
    digest = hashlib.sha256(str(inv).encode()).hexdigest()[:12]
    return Path(root).resolve() / ".locks" / f"{inv.stem}-{digest}.lock"


def _read_holder(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "null")
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(h: dict[str, Any]) -> str:
    return (f"pid {h.get('pid')} on {h.get('host')}, {h.get('command')} started {h.get('started')}, "
            f"run {h.get('run_id') or '(starting)'}")


def set_run_id(inventory: str | Path, root: Path, run_id: str) -> None:
    """Record the run id of the holder (known only once its run folder exists)."""
    held = _HELD.get(lock_path(inventory, root))
    if held is None:
        return
    h = _read_holder(held.path) or {}
    if not h.get("run_id"):
        h["run_id"] = run_id
        _write(held.fd, h)


def _write(fd: int, holder: dict[str, Any]) -> None:
    data = (json.dumps(holder, sort_keys=True) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


@contextlib.contextmanager
def hold(inventory: str | Path, command: str, root: Path) -> Iterator[Held]:
    """Hold the inventory's lock for the block (see the module doc)."""
    held = acquire(inventory, command, root)
    try:
        yield held
    finally:
        release(held)


def acquire(inventory: str | Path, command: str, root: Path) -> Held:
    path = lock_path(inventory, root)
    if path in _HELD:
        _HELD[path].depth += 1
        return _HELD[path]
    for d in (path.parent.parent, path.parent):
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(d, 0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = _read_holder(path)
            who = _describe(holder) if holder else f"an unknown process (lock file {path} is unreadable or corrupt)"
            raise InventoryBusy(f"{inventory}: another gpuctl run holds this inventory: {who}; "
                                f"wait for it to finish (lock file {path})") from None
        previous = _read_holder(path)
        note = None
        if previous and previous.get("pid") is not None:
            same_host = previous.get("host") == socket.gethostname()
            if same_host and not _pid_alive(previous.get("pid")):
                note = f"took over a stale lock {path} from a dead process ({_describe(previous)})"
            elif not same_host:
                note = f"took over lock {path} last held by {_describe(previous)} (released)"
        _write(fd, {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                    "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "run_id": None})
    except BaseException:
        os.close(fd)
        raise
    held = Held(path, fd, note)
    _HELD[held.path] = held
    return held


def release(held: Held) -> None:
    held.depth -= 1
    if held.depth > 0:
        return
    _HELD.pop(held.path, None)
    with contextlib.suppress(OSError):
        os.ftruncate(held.fd, 0)
    os.close(held.fd)  # closing drops the flock


def release_all() -> None:
    for held in list(_HELD.values()):
        held.depth = 1
        release(held)
