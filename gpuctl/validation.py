"""Turning pydantic validation errors into `file:line: field.path: message` lines.

Every data file gpuctl reads (inventory, matrix, SKU catalog) goes through
`validate_document`, so all of them report problems the same way: every problem at
once, each with its line, the field path, what was expected and — for unknown keys —
the nearest known key.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpuctl.boundary import control_problems
from gpuctl.errors import InputError
from gpuctl.yamlsrc import FieldPath, SourceMap, format_path

if TYPE_CHECKING:  # the inventory's rules take its typed model; gpuctl.inventory imports this module
    from gpuctl.catalog import Sku
    from gpuctl.inventory import Inventory

M = TypeVar("M", bound=BaseModel)


class Problem:
    """One located problem; `warning` problems do not fail validation."""

    __slots__ = ("message", "path", "warning", "where")

    def __init__(self, where: str, path: FieldPath, message: str, warning: bool = False) -> None:
        self.where = where
        self.path = path
        self.message = message
        self.warning = warning

    def __str__(self) -> str:
        prefix = "warning: " if self.warning else ""
        return f"{prefix}{self.where}: {format_path(self.path)}: {self.message}"


@dataclass
class Findings:
    """The problems an inventory rule found so far, each at its field path
    (`file:line: field: message`, through the source map)."""

    smap: SourceMap
    problems: list[Problem] = field(default_factory=list)

    def err(self, path: FieldPath, msg: str) -> None:
        self.problems.append(Problem(self.smap.where(path), path, msg))

    def warn(self, path: FieldPath, msg: str) -> None:
        self.problems.append(Problem(self.smap.where(path), path, msg, warning=True))


#: one rule of the inventory beyond its schema: the typed inventory, its SKU (None when the
#: SKU name did not load) and the Findings it records problems in (gpuctl.inventory_semantics
#: holds the shared model's; each component declares its own, `Component.validate`)
Validator = Callable[["Inventory", "Sku | None", Findings], None]


def _known_fields(model: type[BaseModel], path: FieldPath) -> list[str]:
    """Field names (aliases) allowed at `path` inside `model`, best effort."""
    current: Any = model
    for part in path:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields:
            return []
        info = next((f for n, f in fields.items() if (f.alias or n) == part), None)
        if info is None:
            return []
        current = _inner_model(info.annotation)
        if current is None:
            return []
    fields = getattr(current, "model_fields", None) or {}
    return [f.alias or n for n, f in fields.items()]


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _message(err: dict[str, Any], model: type[BaseModel], path: FieldPath) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(path[-1]) if path else ""
        known = _known_fields(model, path[:-1])
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"; did you mean '{near[0]}'?" if near else (f"; expected one of: {', '.join(known)}" if known else "")
        return f"unknown key '{key}'{hint}"
    if kind == "missing":
        return "required field is missing"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    given = err.get("input")
    if kind not in ("missing",) and not isinstance(given, (dict, list)) and given is not None:
        return f"{msg} (got {given!r})"
    return msg


def pydantic_problems(exc: ValidationError, model: type[BaseModel], smap: SourceMap) -> list[Problem]:
    problems = []
    for err in exc.errors():
        path = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
        # pydantic puts union/tagged-union member names into loc; drop non-data parts
        path = tuple(p for p in path if not (isinstance(p, str) and (p.startswith("function-") or "[" in p)))
        problems.append(Problem(smap.where(path), path, _message(err, model, path)))
    return problems


def refuse_control_characters(data: Any, smap: SourceMap, what: str) -> None:
    """The typed boundary's first rule, for every data file (inventory, matrix, SKU): no
    string anywhere holds a control character (gpuctl.boundary); InputError naming each
    `file:line: field`, before any value is interpreted."""

    bad = [Problem(where, path, message) for where, path, message in control_problems(data, smap)]
    if bad:
        raise InputError(f"{smap.file}: {len(bad)} problem(s) in this {what}", [str(p) for p in bad])


def validate_document(model: type[M], data: Any, smap: SourceMap, what: str) -> M:
    """Validate `data` against `model`; InputError listing every problem with its line."""
    if not isinstance(data, dict):
        raise InputError(f"{smap.file}: {what} must be a YAML mapping, got {type(data).__name__}")
    refuse_control_characters(data, smap, what)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = pydantic_problems(exc, model, smap)
        raise InputError(
            f"{smap.file}: {len(problems)} problem(s) in this {what}", [str(p) for p in problems]
        ) from None


def _drop(data: Any, loc: tuple[Any, ...]) -> None:
    cur = data
    for part in loc[:-1]:
        try:
            cur = cur[part]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(cur, dict):
        cur.pop(loc[-1], None)


def validate_collecting(model: type[M], data: Any, smap: SourceMap, what: str) -> tuple[M | None, list[Problem]]:
    """Validate, and when the only problems are unknown keys, drop them and validate
    again so later (semantic) checks can still run and report everything at once."""
    import copy

    if not isinstance(data, dict):
        raise InputError(f"{smap.file}: {what} must be a YAML mapping, got {type(data).__name__}")
    refuse_control_characters(data, smap, what)
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        problems = pydantic_problems(exc, model, smap)
        errors = exc.errors()
        if any(e["type"] != "extra_forbidden" for e in errors):
            return None, problems
        trimmed = copy.deepcopy(data)
        for e in sorted(errors, key=lambda e: len(e["loc"]), reverse=True):
            _drop(trimmed, tuple(e["loc"]))
        try:
            return model.model_validate(trimmed), problems
        except ValidationError:
            return None, problems
