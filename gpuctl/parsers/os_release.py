"""/etc/os-release (KEY=VALUE, values optionally quoted): read by preflight and the lock."""

from __future__ import annotations

import shlex


def parse_os_release(lines: list[str]) -> dict[str, str]:
    """``ID=ubuntu`` / ``VERSION_ID="22.04"`` lines → {"ID": "ubuntu", "VERSION_ID": "22.04"};
    comments, blank and malformed lines are skipped."""
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if not sep or not key or key.startswith("#"):
            continue
        try:
            words = shlex.split(value)
        except ValueError:
            words = [value.strip().strip("\"'")]
        out[key] = words[0] if words else ""
    return out


def os_name(fields: dict[str, str]) -> str | None:
    """"<ID> <VERSION_ID>" (what the lock records: "debian 12"), or None without an ID."""
    if not fields.get("ID"):
        return None
    return f"{fields['ID']} {fields.get('VERSION_ID', '')}"
