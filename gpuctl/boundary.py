"""The typed boundary every inventory string crosses before anything reaches a host.

One rule per kind of value, each a full match (never `re.match(...$)`, whose `$` also
matches before a final newline), none splitting a value on whitespace before it looks:

- `control_problems(data, smap)`: no string anywhere in a document (keys, values, list
  items, at any depth) holds a control character: C0 (newline, CR, tab, NUL ...), DEL, C1
  (U+0080-U+009F, NEL among them) or the Unicode line/paragraph separators U+2028/U+2029.
  Whatever a field means, such a character is never data there: it splits a shell command,
  an fstab or sudoers line, a YAML or INI file written from it.
- `path_problem(value, ...)`: an absolute path in normal form (what `posixpath.normpath`
  gives: no `..`, `.`, `//`, no trailing `/`), outside the system folders, optionally
  confined to allowed folders.
- `mount_problem` / `mounts_overlap`: a mount point is such a path, never a system folder
  or a folder above one, and two mount points never nest.
- `catalog_name_problem`: a SKU or matrix named by the inventory is a plain name (no path
  separator, no `..`), resolved inside its catalog folder only.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Any

from gpuctl.yamlsrc import FieldPath, SourceMap

#: Every character refused in any inventory string.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def control_character(value: str) -> str | None:
    """'U+000A (line feed)' for the first control character in `value`, None when it has none."""
    m = _CONTROL.search(value)
    if m is None:
        return None
    ch = m.group()
    name = {"\n": "line feed", "\r": "carriage return", "\t": "tab", "\x00": "NUL", "\x7f": "DEL",
            "\x85": "next line", "\u2028": "line separator", "\u2029": "paragraph separator"}.get(ch)
    return f"U+{ord(ch):04X} ({name or unicodedata.name(ch, 'control character').lower()})"


def _walk(data: Any, path: FieldPath) -> Iterator[tuple[FieldPath, str, bool]]:
    """(path, string, is_key) for every string in `data`: mapping keys, values, list items."""
    if isinstance(data, dict):
        for k, v in data.items():
            child = (*path, k if isinstance(k, (str, int)) else str(k))
            if isinstance(k, str):
                yield child, k, True
            yield from _walk(v, child)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _walk(v, (*path, i))
    elif isinstance(data, str):
        yield path, data, False


def control_problems(data: Any, smap: SourceMap) -> list[tuple[str, FieldPath, str]]:
    """(where, path, message) for every string in the document holding a control character."""
    out = []
    for path, value, is_key in _walk(data, ()):
        bad = control_character(value)
        if bad:
            what = "this key" if is_key else "the value"
            out.append((smap.where(path), path, f"{what} holds the control character {bad}; no inventory "
                        "string may hold one (newline, carriage return, tab, NUL, C1, U+2028/U+2029): "
                        "it would split a command or a line of a file written on the nodes"))
    return out


# ------------------------------------------------------------------ paths

#: Linux PATH_MAX (4096 with the NUL) and NAME_MAX: longer is never a real path.
PATH_MAX = 4095
NAME_MAX = 255

#: a package name as dpkg and rpm allow it (Debian policy 5.6.1 is stricter: lowercase)
PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_~-]*")


def length_problem(value: str, what: str = "path") -> str | None:
    """Why `value` is too long for a path on Linux (a component over NAME_MAX, the whole over
    PATH_MAX); None when it is not."""
    if len(value) > PATH_MAX:
        return f"a {what} of {len(value)} characters (at most {PATH_MAX})"
    longest = max((len(p) for p in value.split("/")), default=0)
    if longest > NAME_MAX:
        return f"a {what} with a {longest}-character component (at most {NAME_MAX})"
    return None


#: Folders no mount point and no path knob may be, or (except where a knob's own folder
#: allows it) lie under: the OS, its package database, kernel interfaces, boot files.
SYSTEM_DIRS: tuple[str, ...] = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run",
    "/sbin", "/sys", "/usr", "/var/lib/dpkg", "/var/lib/rpm", "/var/lib/apt", "/var/lib/dnf", "/var/log",
    "/var/run", "/var/spool", "/var/cache/apt", "/var/cache/dnf",
)
#: Folders a mount point may not be (it would hide what is there) though one may lie below them.
_NOT_ITSELF: tuple[str, ...] = ("/", "/home", "/opt", "/srv", "/tmp", "/var", "/var/lib", "/var/tmp", "/mnt",
                                "/media", "/var/cache")
#: Characters a path written on a node may hold (no space, quote, glob or shell character).
_PATH_CHARS = re.compile(r"/[A-Za-z0-9_.+@=/-]*")


def normal_path(value: str) -> str:
    """`value` in posix normal form (`//etc/./x/` -> `/etc/x`; `..` folded)."""
    out = posixpath.normpath(value)
    return "/" + out.lstrip("/") if out.startswith("//") else out


def under(path: str, folder: str) -> bool:
    """`path` is `folder` or lies below it (both normal)."""
    return folder == "/" or path == folder or path.startswith(folder.rstrip("/") + "/")


def path_problem(value: str, *, allowed: Iterable[str] = (), what: str = "path",
                 extra_chars: str = "") -> str | None:
    """Why `value` is not an absolute path in normal form outside the system folders (or,
    with `allowed`, inside one of those folders, which may themselves be system folders);
    None when it is. `extra_chars` are more characters allowed (e.g. `{}` of `{version}`)."""
    if not isinstance(value, str) or not value.startswith("/"):
        return f"{value!r} is not an absolute {what}"
    too_long = length_problem(value, what)
    if too_long:
        return too_long
    chars = re.compile(rf"/[A-Za-z0-9_.+@=/{re.escape(extra_chars)}-]*") if extra_chars else _PATH_CHARS
    if not chars.fullmatch(value):
        return f"{value!r} holds a character no {what} needs (spaces, quotes, $, `, ;, |, &, <, >, *, ? ...)"
    if normal_path(value) != value or (value.endswith("/") and value != "/"):
        return (f"{value!r} is not in normal form: write {normal_path(value)!r} "
                "(no '..', '.', '//' or trailing '/')")
    allowed = tuple(allowed)
    if allowed:
        if not any(under(value, a) and value != a for a in allowed) and value not in allowed:
            return f"{value!r} is outside the folder(s) this {what} may name: {', '.join(allowed)}"
        return None
    for d in SYSTEM_DIRS:
        if under(value, d):
            return f"{value!r} is the system folder {d}" + ("" if value == d else " or lies under it")
    return None


def mount_problem(value: str) -> str | None:
    """Why `value` cannot be a mount point gpuctl creates (None when it can)."""
    problem = path_problem(value, what="mount point")
    if problem:
        return problem
    if value in _NOT_ITSELF:
        return f"{value!r} is a system folder; mount below it (e.g. {value.rstrip('/')}/data)"
    return None


def mounts_overlap(a: str, b: str) -> bool:
    """Two mount points that are the same folder or one inside the other (compared normalised)."""
    na, nb = normal_path(a), normal_path(b)
    return under(na, nb) or under(nb, na)


# ------------------------------------------------------------------ catalog names

_CATALOG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def catalog_name_problem(value: str, what: str) -> str | None:
    """Why `value` is not a plain name of a file in the catalog (SKU, matrix); None when it is."""
    if not _CATALOG_NAME.fullmatch(value) or ".." in value or value.endswith((".yaml", ".yml")):
        return (f"{value!r} is not a {what} name: give the catalog name (letters, digits, . _ + -; no '/', "
                f"'..' or .yaml), e.g. one listed by `gpuctl {what} list`" if what == "matrix" else
                f"{value!r} is not a {what} name: give the catalog name (letters, digits, . _ + -; no '/', "
                "'..' or .yaml)")
    return None


_HOSTNAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


def is_host(value: str) -> bool:
    """An IPv4/IPv6 address or an RFC 1123 host name."""
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(value))
