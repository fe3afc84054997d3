"""The shapes of the run-record files gpuctl reads back: `run.json` and the turnkey stage
(`turnkey --resume`). The verify and bench stages are read through their typed models
(`gpuctl.results`), which are their shape.

A run folder is user-writable data: a hand-edited, truncated or foreign file must be an
input error naming the file and the field (exit 2), not an AttributeError deep inside the
report. Each shape lists the fields readers use; every field is optional (older records
lack some) and fields not listed are not checked. Text leaves may be null.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuctl.yamlsrc import format_path


@dataclass(frozen=True)
class MapOf:
    """A JSON object with any keys, each value of `value`'s shape."""

    value: Any


@dataclass(frozen=True)
class ListOf:
    """A JSON array whose items all have `item`'s shape."""

    item: Any


class _Any:
    pass


ANY = _Any()
TEXT = (str, type(None))
NUMBER = (int, float)


RUN_JSON: dict[str, Any] = {
    "id": TEXT, "command": TEXT, "argv": ListOf(TEXT), "gpuctl_version": TEXT, "started": TEXT,
    "finished": TEXT, "resumed": TEXT, "status": TEXT, "bundle": TEXT,
    "inventory": {"path": TEXT, "sha256": TEXT}, "matrix": {"path": TEXT, "sha256": TEXT},
}

STAGES: dict[str, dict[str, Any]] = {
    "turnkey": {
        "stages": MapOf({"status": TEXT, "detail": TEXT, "started": TEXT, "seconds": NUMBER, "data": {}}),
        "history": ListOf({}),
    },
}


def kind_of(value: Any) -> str:
    """What a JSON value is, in words: 'an object', 'a number', …"""
    return {dict: "an object", list: "an array", str: "a string", bool: "true/false", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _want(shape: Any) -> str:
    if isinstance(shape, (dict, MapOf)):
        return "an object"
    if isinstance(shape, ListOf):
        return "an array"
    types = shape if isinstance(shape, tuple) else (shape,)
    names = sorted({kind_of(t()) if t is not type(None) else "null" for t in types})
    return " or ".join(names)


def problems(value: Any, shape: Any, path: tuple[str | int, ...] = (), out: list[str] | None = None) -> list[str]:
    """Where `value` does not have `shape`: 'field.path: expected X, found Y' (at most 20)."""
    out = [] if out is None else out
    if len(out) >= 20 or shape is ANY:
        return out
    where = format_path(path)
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            out.append(f"{where}: expected {_want(shape)}, found {kind_of(value)}")
            return out
        for key, sub in shape.items():
            if key in value:
                problems(value[key], sub, (*path, key), out)
    elif isinstance(shape, MapOf):
        if not isinstance(value, dict):
            out.append(f"{where}: expected {_want(shape)}, found {kind_of(value)}")
            return out
        for key, item in value.items():
            problems(item, shape.value, (*path, str(key)), out)
    elif isinstance(shape, ListOf):
        if not isinstance(value, list):
            out.append(f"{where}: expected {_want(shape)}, found {kind_of(value)}")
            return out
        for i, item in enumerate(value):
            problems(item, shape.item, (*path, i), out)
    else:
        types = shape if isinstance(shape, tuple) else (shape,)
        numeric = any(t in (int, float) for t in types) and bool not in types
        if not isinstance(value, types) or (numeric and isinstance(value, bool)):
            out.append(f"{where}: expected {_want(shape)}, found {kind_of(value)}")
    return out
