"""Files read from a host: a `tail -n +1 FILE...` bundle, KEY=VALUE files (nccl.conf), the
sha256/mode listing of managed files, `command -v` paths.

Pure functions: text in, data out, shared by the provisioning facts, verify's probe and the
lock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ---------------------------------------------------------------- tail -n +1 bundle

# "==> /proc/modules <=="
_TAIL_HEADER = re.compile(r"^==> (.+) <==$")
# "tail: cannot open '/etc/nccl.conf' for reading: No such file or directory"
_TAIL_MISSING = re.compile(r"^tail: cannot open '(.+)' for reading: (.+)$")


def parse_tail_bundle(stdout: str, stderr: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """Split `tail -n +1 A B C` output into {path: text} and {path: error} (unreadable files)."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.split("\n"):
        m = _TAIL_HEADER.match(line)
        if m:
            current = files.setdefault(m.group(1), [])
            continue
        if current is not None:
            current.append(line)
    out = {}
    for path, lines in files.items():
        # tail separates files with one blank line; the last file has none.
        text = "\n".join(lines)
        out[path] = text[:-1] if text.endswith("\n\n") else text.rstrip("\n") + ("\n" if text.strip() else "")
    errors = {m.group(1): m.group(2) for line in stderr.splitlines() if (m := _TAIL_MISSING.match(line.strip()))}
    return out, errors


# ---------------------------------------------------------------- KEY=VALUE files

def parse_key_values(text: str) -> dict[str, str]:
    """nccl.conf-style 'KEY=VALUE' lines; '#' comments and blank lines ignored."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out[key.strip()] = value.strip()
    return out


# ---------------------------------------------------------------- managed files, programs

@dataclass(frozen=True)
class FileState:
    path: str
    sha256: str | None  # None: missing
    mode: str | None    # octal string as stat prints it ("644")

    @property
    def exists(self) -> bool:
        return self.sha256 is not None


def parse_file_states(lines: list[str]) -> dict[str, FileState]:
    """Lines ``<sha256> <mode> <path>`` or ``missing - <path>``."""
    out: dict[str, FileState] = {}
    for line in lines:
        parts = line.split(" ", 2)
        if len(parts) != 3:
            continue
        sha, mode, path = parts
        if sha == "missing":
            out[path] = FileState(path, None, None)
        else:
            out[path] = FileState(path, sha, mode)
    return out


def parse_command_paths(lines: list[str]) -> dict[str, str | None]:
    """Lines ``<name>=<path or empty>``."""
    out: dict[str, str | None] = {}
    for line in lines:
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v or None
    return out


_SHA256 = re.compile(r"[0-9a-f]{64}")


def parse_sha256sum(lines: list[str]) -> dict[str, str | None]:
    """``<sha256>  <path>`` lines (`sha256sum`), or ``-  <path>`` for a file that is absent →
    {path: sha256 or None}."""
    out: dict[str, str | None] = {}
    for line in lines:
        digest, _, path = line.partition("  ")
        path = path.strip()
        if path:
            out[path] = digest if _SHA256.fullmatch(digest) else None
    return out

