"""One mutating run per cluster at a time, whichever folder, path or runs root it runs from.

`hold(inventory, command, cluster=...)` takes an exclusive `fcntl.flock` on
`<state dir>/locks/<cluster>-<hash of the cluster name>.lock` (`gpuctl.paths.state_dir()`:
$GPUCTL_STATE_DIR, else $XDG_STATE_HOME/gpuctl, else ~/.local/state/gpuctl) and writes the
holder (pid, host, command, start time, run id, the inventory's real path and inode) into
it. The key is the cluster's identity, not the path it was reached by: the same cluster
provisioned from another folder, through a hard link or a copy of its inventory, or with
another $GPUCTL_RUNS_DIR meets the same lock. A second mutating command gets
`InventoryBusy` (exit 3) naming the holder. The kernel drops a flock when its process
dies, so a lock file left by a dead process is simply taken over; when its recorded
holder was a dead pid on this host, `Held.note` says so. Re-entrant within one process
(turnkey runs provision under its own lock).

The lock file is opened with O_NOFOLLOW and must be a plain file of ours (one link, our
uid, empty or a holder record); anything else (a planted symlink or hard link, another
user's file, foreign content) is refused and never truncated or chmodded.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuctl.errors import ExecutionError, InputError
from gpuctl.fileio import parse_json, private_dir
from gpuctl.paths import state_dir
from gpuctl.yamlsrc import load_yaml

#: Commands that change nodes or deliver them; read-only ones (plan, verify, report) never lock.
MUTATING = frozenset({"provision", "rebuild", "turnkey", "handover", "mirror", "bench"})

#: A holder record is a few hundred bytes; read at most this much of a lock file.
_MAX_HOLDER_BYTES = 64 * 1024
#: Linux pid_max is at most 2**22.
_MAX_PID = 2**22


class InventoryBusy(ExecutionError):
    """Another gpuctl process is running a mutating command on the same cluster."""


@dataclass
class Held:
    path: Path
    fd: int
    note: str | None = None
    depth: int = 1


_HELD: dict[Path, Held] = {}


def cluster_of(inventory: str | Path) -> str:
    """The cluster name an inventory declares (for callers that did not load it); the
    inventory's inode when it names none."""

    data, _ = load_yaml(inventory)
    cluster = data.get("cluster") if isinstance(data, dict) else None
    name = cluster.get("name") if isinstance(cluster, dict) else None
    if isinstance(name, str) and name:
        return name
    st = os.stat(inventory)
    return f"inode-{st.st_dev}-{st.st_ino}"


def lock_path(inventory: str | Path, cluster: str | None = None) -> Path:
    """The lock file of the inventory's cluster (in the state folder, not the current one)."""
    name = cluster if cluster is not None else cluster_of(inventory)
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64]
    return state_dir() / "locks" / f"{safe}-{digest}.lock"


def _read_holder(fd: int) -> dict[str, Any] | None:
    try:
        raw = os.pread(fd, _MAX_HOLDER_BYTES + 1, 0)
        if not raw.strip():
            return None
        data = parse_json(raw.decode("utf-8"), "lock")
    except (OSError, UnicodeDecodeError, InputError):
        return None
    return data if isinstance(data, dict) else None


def _pid_alive(pid: object) -> bool:
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= _MAX_PID:
        return False  # not a pid this kernel can have (e.g. 2147483648): no live holder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(h: dict[str, Any]) -> str:
    def show(key: str) -> str:
        return repr(h.get(key))[:200] if not isinstance(h.get(key), str) else h[key][:200].encode(
            "unicode_escape").decode()
    return (f"pid {show('pid')} on {show('host')}, {show('command')} started {show('started')}, "
            f"run {show('run_id') if h.get('run_id') else '(starting)'}"
            + (f", inventory {show('inventory')}" if h.get("inventory") else ""))


def set_run_id(held: Held, run_id: str) -> None:
    """Record the run id of the holder (known only once its run folder exists)."""
    h = _read_holder(held.fd) or {}
    if not h.get("run_id"):
        h["run_id"] = run_id
        _write(held.fd, h)


def _write(fd: int, holder: dict[str, Any]) -> None:
    data = (json.dumps(holder, sort_keys=True) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


@contextlib.contextmanager
def hold(inventory: str | Path, command: str, cluster: str | None = None) -> Iterator[Held]:
    """Hold the cluster's lock for the block (see the module doc)."""
    held = acquire(inventory, command, cluster)
    try:
        yield held
    finally:
        release(held)


def _open_lock_file(path: Path) -> tuple[int, bool]:
    """(fd, created): our own lock file, never through a symlink, never someone else's."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600), True
    except FileExistsError:
        pass
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{path}: the lock file is a symbolic link; gpuctl never follows one "
                             "(remove it)") from None
        raise InputError(f"{path}: cannot open the lock file: {exc.strerror}") from None
    st = os.fstat(fd)
    problem = ("not a plain file" if not stat.S_ISREG(st.st_mode)
               else "has other hard links" if st.st_nlink != 1
               else "belongs to another user" if st.st_uid != os.geteuid() else None)
    if problem:
        os.close(fd)
        raise InputError(f"{path}: the lock file {problem}; it is not one gpuctl made, so gpuctl "
                         "neither uses nor changes it (remove it)")
    return fd, False


def acquire(inventory: str | Path, command: str, cluster: str | None = None) -> Held:
    path = lock_path(inventory, cluster)
    if path in _HELD:
        _HELD[path].depth += 1
        return _HELD[path]
    private_dir(path.parent)
    fd, created = _open_lock_file(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = _read_holder(fd)
            who = _describe(holder) if holder else f"an unknown process (lock file {path} is unreadable or corrupt)"
            raise InventoryBusy(f"{inventory}: another gpuctl run holds this cluster: {who}; "
                                f"wait for it to finish (lock file {path})") from None
        previous = _read_holder(fd)
        if not created and previous is None and os.pread(fd, 1, 0):
            raise InputError(f"{path}: the lock file holds something that is not a gpuctl lock record; "
                             "gpuctl does not overwrite it (remove it)")
        note = None
        if previous and previous.get("pid") is not None:
            same_host = previous.get("host") == socket.gethostname()
            if same_host and not _pid_alive(previous.get("pid")):
                note = f"took over a stale lock {path} from a dead process ({_describe(previous)})"
            elif not same_host:
                note = f"took over lock {path} last held by {_describe(previous)} (released)"
        inv = Path(inventory)
        st = inv.stat()
        _write(fd, {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                    "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "run_id": None,
                    "inventory": str(inv.resolve()), "inode": f"{st.st_dev}:{st.st_ino}"})
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
