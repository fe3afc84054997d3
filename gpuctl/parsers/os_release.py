"""/etc/os-release (KEY=VALUE, values optionally quoted): read by preflight and the lock."""

from __future__ import annotations


def parse_os_release(lines: list[str]) -> dict[str, str]:
    """``ID=ubuntu`` / ``VERSION_ID="22.04"`` lines → {"ID": "ubuntu", "VERSION_ID": "22.04"};
    comments, blank and malformed lines are skipped."""
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if not sep or not key or key.startswith("#"):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key] = value
    return out


def os_name(fields: dict[str, str]) -> str | None:
    """"<ID> <VERSION_ID>" (what the lock records: "debian 12"), or None without an ID."""
    if not fields.get("ID"):
        return None
    return f"{fields['ID']} {fields.get('VERSION_ID', '')}"
