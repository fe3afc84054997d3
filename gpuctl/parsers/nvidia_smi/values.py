"""nvidia-smi's value readers, one place for its three forms (`q_text`, `q_xml`, `query_gpu`):
what nvidia-smi prints for a value it cannot read (N/A, Not Supported) becomes None; a value of
the wrong shape raises ParseError naming where it was read."""

from __future__ import annotations

import re

from gpuctl.errors import ParseError
from gpuctl.parsers.nvidia_smi.model import TOOL

_MISSING = {"", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", "[Unknown Error]"}


def clean(value: str | None) -> str | None:
    """The value stripped; None for what nvidia-smi prints when it cannot read one."""
    if value is None:
        return None
    value = value.strip()
    return None if value in _MISSING else value


_PERCENT = re.compile(r"^(\d+)\s*%?$")
# "81559 MiB", "16x", "5": the unit is what `nounits` would have removed
_NUMBER = re.compile(r"^(-?\d+)\s*(?:x|MiB|MB|bank\(s\))?$")


def _integer(value: str | None, where: str, shape: re.Pattern[str], what: str) -> int | None:
    value = clean(value)
    if value is None:
        return None
    m = shape.match(value)
    if not m:
        raise ParseError(f"{TOOL}: expected {what}, got {value!r} for {where}")
    return int(m.group(1))


def percent(value: str | None, where: str) -> int | None:
    """'0 %' (the -q and XML forms of a utilization)."""
    return _integer(value, where, _PERCENT, "a percentage")


def number(value: str | None, where: str) -> int | None:
    """'81559 MiB', '16x', '5' (a count or size with nvidia-smi's unit)."""
    return _integer(value, where, _NUMBER, "a number")


def flag(value: str | None, where: str) -> bool | None:
    value = clean(value)
    if value is None:
        return None
    low = value.lower()
    if low in ("enabled", "yes", "true", "active", "1"):
        return True
    if low in ("disabled", "no", "false", "not active", "0"):
        return False
    raise ParseError(f"{TOOL}: expected Enabled/Disabled or Yes/No, got {value!r} for {where}")


def total(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def active(value: str | None, where: str) -> bool | None:
    value = clean(value)
    if value is None:
        return None
    if value in ("Active", "Not Active"):
        return value == "Active"
    raise ParseError(f"{TOOL}: expected Active or Not Active, got {value!r} for {where}")
