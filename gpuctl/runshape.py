"""The shapes of the run-record files gpuctl reads back: `run.json` and the stages that
`report`, `turnkey --resume` and `handover` consume (verify, bench, turnkey).

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


@dataclass(frozen=True)
class Pair:
    """[number, number] (an NCCL series point: size in bytes, bus bandwidth)."""


class _Any:
    pass


ANY = _Any()
TEXT = (str, type(None))
NUMBER = (int, float)


_CHECK = {"check": TEXT, "role": TEXT, "status": TEXT, "message": TEXT, "remediation": TEXT}
_RESULT = {"subject": TEXT, "test": TEXT, "check": TEXT, "status": TEXT, "unit": TEXT, "source": TEXT,
           "remediation": TEXT, "message": TEXT, "raw": TEXT}
_THRESHOLD = {"min": NUMBER, "max": NUMBER, "warn_below": NUMBER, "warn_above": NUMBER, "not_applicable": bool,
              "source": TEXT}

RUN_JSON: dict[str, Any] = {
    "id": TEXT, "command": TEXT, "argv": ListOf(TEXT), "gpuctl_version": TEXT, "started": TEXT,
    "finished": TEXT, "resumed": TEXT, "status": TEXT, "bundle": TEXT,
    "inventory": {"path": TEXT, "sha256": TEXT}, "matrix": {"path": TEXT, "sha256": TEXT},
}

STAGES: dict[str, dict[str, Any]] = {
    "verify": {
        "status": TEXT,
        "hosts": MapOf({"status": TEXT, "unreachable_reason": TEXT, "counts": MapOf(int),
                        "failed": ListOf(_CHECK), "could_not_run": ListOf(_CHECK), "checks": ListOf(_CHECK)}),
    },
    "bench": {
        "status": TEXT, "suite": TEXT, "run_id": TEXT,
        "thresholds": MapOf(_THRESHOLD),
        "hosts": MapOf({"status": TEXT, "results": ListOf(_RESULT), "thresholds": MapOf(_THRESHOLD)}),
        "cluster": {"results": ListOf(_RESULT)},
        "nccl_series": ListOf({"label": TEXT, "test": TEXT, "points": ListOf(Pair())}),
        "inventory": {"nodes": ListOf(TEXT), "cluster": TEXT, "sku": TEXT, "gpu_model": TEXT, "os": TEXT,
                      "matrix": TEXT},
        "matrix": {"name": TEXT},
        "localisation": {"trigger": TEXT, "rounds": int, "bound": int, "nodes": ListOf(TEXT),
                         "findings": ListOf({"kind": TEXT, "nodes": ListOf(TEXT), "message": TEXT,
                                             "evidence": ListOf(int), "hcas": ListOf(TEXT),
                                             "interfaces": ListOf(TEXT)}),
                         "steps": ListOf({"round": int, "stage": TEXT, "text": TEXT, "raw": TEXT,
                                          "value": (*NUMBER, type(None)), "slow": (bool, type(None))}),
                         "limits": ListOf(TEXT), "slow_fraction": NUMBER, "slow_fraction_source": TEXT},
    },
    "turnkey": {
        "stages": MapOf({"status": TEXT, "detail": TEXT, "started": TEXT, "seconds": NUMBER, "data": {}}),
        "history": ListOf({}),
    },
}


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "true/false", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _want(shape: Any) -> str:
    if isinstance(shape, (dict, MapOf)):
        return "an object"
    if isinstance(shape, (ListOf, Pair)):
        return "an array" if isinstance(shape, ListOf) else "[number, number]"
    types = shape if isinstance(shape, tuple) else (shape,)
    names = sorted({_kind(t()) if t is not type(None) else "null" for t in types})
    return " or ".join(names)


def problems(value: Any, shape: Any, path: tuple[str | int, ...] = (), out: list[str] | None = None) -> list[str]:
    """Where `value` does not have `shape`: 'field.path: expected X, found Y' (at most 20)."""
    out = [] if out is None else out
    if len(out) >= 20 or shape is ANY:
        return out
    where = format_path(path)
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            out.append(f"{where}: expected {_want(shape)}, found {_kind(value)}")
            return out
        for key, sub in shape.items():
            if key in value:
                problems(value[key], sub, (*path, key), out)
    elif isinstance(shape, MapOf):
        if not isinstance(value, dict):
            out.append(f"{where}: expected {_want(shape)}, found {_kind(value)}")
            return out
        for key, item in value.items():
            problems(item, shape.value, (*path, str(key)), out)
    elif isinstance(shape, ListOf):
        if not isinstance(value, list):
            out.append(f"{where}: expected {_want(shape)}, found {_kind(value)}")
            return out
        for i, item in enumerate(value):
            problems(item, shape.item, (*path, i), out)
    elif isinstance(shape, Pair):
        if not (isinstance(value, list) and len(value) == 2
                and all(isinstance(x, NUMBER) and not isinstance(x, bool) for x in value)):
            out.append(f"{where}: expected [number, number], found {_kind(value)}")
    else:
        types = shape if isinstance(shape, tuple) else (shape,)
        numeric = any(t in (int, float) for t in types) and bool not in types
        if not isinstance(value, types) or (numeric and isinstance(value, bool)):
            out.append(f"{where}: expected {_want(shape)}, found {_kind(value)}")
    return out
