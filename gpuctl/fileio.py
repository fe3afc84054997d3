"""The one way gpuctl reads a file it did not write in this process, and writes JSON.

Every input (inventory, matrix, SKU, lock file, run.json, stage JSON, a mirror's
Packages.gz, tool outputs for `analyze`) goes through `read_bytes`: regular files only
(a FIFO, a device or a folder is refused at once instead of hanging or reading forever),
a size bound checked before and while reading, read once. `read_text` decodes strict
UTF-8 and names the line of a bad byte; `load_json` names the line of a syntax error and
refuses NaN/Infinity. Every failure is an `InputError` naming the file (exit 2).

`dumps_json` is the one JSON writer (stdout `--json` and run records): a non-finite
float is written as null, never as the non-JSON `NaN`/`Infinity`.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuctl.errors import InputError

#: An inventory, matrix, lock file or run.json is a few KiB; a tool output for `analyze`
#: a few MiB at most. Far above any real one, far below what exhausts memory.
MAX_FILE_BYTES = 16 * 2**20
#: A mirror's Packages index: Debian main amd64 is ~60 MiB uncompressed (2025); a
#: GPU-stack mirror is far smaller.
MAX_INDEX_BYTES = 256 * 2**20
#: Nesting bound for JSON documents (json.loads recurses; deep input overflows the stack).
MAX_JSON_DEPTH = 64


def _a(what: str) -> str:
    return f"an {what}" if what[:1].lower() in "aeiou" else f"a {what}"


def read_bytes(path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "file",
               follow_symlinks: bool = True) -> bytes:
    """The whole content of a regular file, at most `limit` bytes; InputError otherwise."""
    p = str(path)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY  # O_NONBLOCK: a FIFO opens at once
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{p}: is a directory, not {_a(what)}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise InputError(f"{p}: is a symbolic link; refusing to follow it") from None
        raise InputError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{p}: is a directory, not {_a(what)}")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                    or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
            raise InputError(f"{p}: is {kind}, not a regular file; gpuctl reads {_a(what)} only from a regular file")
        if st.st_size > limit:
            raise InputError(f"{p}: over {limit} bytes ({st.st_size}); {_a(what)} is at most that")
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 2**20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{p}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while we read it
        raise InputError(f"{p}: over {limit} bytes; {_a(what)} is at most that")
    return data


def decode_text(raw: bytes, name: str) -> str:
    """Strict UTF-8; InputError naming the line of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{name}:{line}: not UTF-8: byte 0x{raw[exc.start]:02x} cannot be decoded "
                         f"({exc.reason})") from None


def read_text(path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "file",
              follow_symlinks: bool = True) -> str:
    return decode_text(read_bytes(path, limit=limit, what=what, follow_symlinks=follow_symlinks), str(path))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, name: str) -> Any:
    """Parse JSON text; InputError naming file:line on bad syntax, NaN/Infinity or deep nesting."""
    depth = cur = 0
    in_str = esc = False
    for ch in text:  # bound nesting before json recurses into it
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            cur += 1
            depth = max(depth, cur)
            if depth > MAX_JSON_DEPTH:
                raise InputError(f"{name}: nested too deep (more than {MAX_JSON_DEPTH} levels)")
        elif ch in "]}":
            cur -= 1
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{name}: not valid JSON: {exc}") from None


def load_json(path: str | Path, *, limit: int = MAX_FILE_BYTES, what: str = "JSON file") -> Any:
    return parse_json(read_text(path, limit=limit, what=what), str(path))


def gunzip(data: bytes, name: str, *, limit: int = MAX_INDEX_BYTES) -> bytes:
    """Decompress a gzip member, at most `limit` bytes out; InputError if corrupt,
    truncated or too big (a gzip bomb)."""
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InputError(f"{name}: corrupt gzip data ({exc})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise InputError(f"{name}: decompresses to over {limit} bytes; refusing it")
    if not d.eof:
        raise InputError(f"{name}: truncated gzip data (the stream ends early)")
    return out


def finite_only(obj: Any) -> Any:
    """A copy of `obj` with every non-finite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_only(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_only(v) for v in obj]
    return obj


def dumps_json(obj: Any, *, indent: int | None = 2, default: Callable[[Any], Any] = str) -> str:
    """The one JSON writer: sorted keys, `default` (str) for unknown types, non-finite
    floats as null (an unknown type's `default` result is checked too)."""
    return json.dumps(finite_only(obj), indent=indent, sort_keys=True,
                      default=lambda o: finite_only(default(o)), allow_nan=False)


# ------------------------------------------------------------------ private folders and files

def _fchmod_nofollow(path: str | Path, mode: int) -> None:
    """chmod the folder we just made, opened without following a symlink (a folder swapped
    for a symlink between mkdir and chmod is refused, its target never changed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"{path}: the folder just created is gone or was replaced ({exc.strerror})") from None
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def private_dir(path: str | Path) -> None:
    """mkdir -p where every folder it creates is 0700 whatever the umask; folders that
    already exist (or symlinks to folders) are used as they are, never chmodded.
    InputError when `path` or a parent exists and is not a folder."""
    p = Path(path)
    missing = []
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue  # made meanwhile by another process: used as it is
        except NotADirectoryError:
            raise InputError(f"{path}: a part of this path is a file, not a folder") from None
        except OSError as exc:
            raise InputError(f"{d}: cannot create the folder: {exc.strerror}") from None
        _fchmod_nofollow(d, 0o700)
    if not Path(path).is_dir():
        raise InputError(f"{path}: exists and is not a folder")


def new_private_dir(path: str | Path) -> None:
    """Create one new folder 0700 (FileExistsError if the name is taken: mkdir is the claim)."""
    os.mkdir(path, 0o700)
    _fchmod_nofollow(path, 0o700)


def write_private(target: str | Path, data: str, *, append: bool = False) -> None:
    """Write a file with mode 0600 whatever the umask; a symlink at `target` is refused."""
    mode = os.O_APPEND if append else os.O_TRUNC
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | mode | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{target}: is a symbolic link; refusing to write through it") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise InputError(f"{target}: not a plain file of its own (a device, FIFO or hard link); "
                             "refusing to write it")
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as fh:
            fh.write(data)
    finally:
        os.close(fd)
