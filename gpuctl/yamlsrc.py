"""YAML loading that remembers where every value came from.

`load_yaml(path)` returns plain Python data plus a `SourceMap` that answers "which line
of which file holds the value at this field path?". Validation errors use it to name
`file:line: field.path: message`. Duplicate mapping keys are errors, not last-wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuctl.errors import InputError
from gpuctl.fileio import MAX_FILE_BYTES, read_text

FieldPath = tuple[str | int, ...]


@dataclass
class SourceMap:
    """Line numbers (1-based) of every mapping key and sequence item in a document."""

    file: str
    lines: dict[FieldPath, int] = field(default_factory=dict)

    def line_of(self, path: FieldPath) -> int | None:
        """Line of the deepest known prefix of `path` (the field itself if known)."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def where(self, path: FieldPath) -> str:
        line = self.line_of(path)
        return f"{self.file}:{line}" if line else self.file


def format_path(path: FieldPath) -> str:
    """('nodes', 2, 'rack') → 'nodes[2].rack'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(document)"


#: Bounds on hostile input (alias bombs, huge numbers, deep nesting): far above any real
#: inventory or matrix, far below what hangs the process or overflows the stack.
MAX_DEPTH = 64
MAX_NODES = 200_000          # values after alias expansion
MAX_SCALAR = 65_536          # characters of one string
MAX_NUMBER_DIGITS = 100      # characters of one plain number


class _TooBig(Exception):
    pass


def _is_number(value: str) -> bool:
    """Whether a plain scalar resolves to a YAML int or float (as safe_load would read it)."""
    tag = _SCALAR_LOADER.resolve(yaml.ScalarNode, value, (True, False))
    return tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


#: libyaml's parser when PyYAML was built with it (the same events, nodes, marks and tag
#: resolution as the pure-Python one, ~5× less CPU: 0.17 s of every command's start-up
#: went into parsing the ~30 inventory, matrix, catalog and role files, issue 18).
_FAST_LOADER: type | None = getattr(yaml, "CSafeLoader", None)


def _check_events(text: str, loader: type = yaml.SafeLoader) -> None:
    """Depth and scalar-size bounds, checked on the event stream (the parser is not
    recursive, the composer and constructor are) before anything is composed."""
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1
                raise _TooBig(f":{line}: nested too deep (more than {MAX_DEPTH} levels)")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.ScalarEvent):
            value = event.value
            line = event.start_mark.line + 1
            if len(value) > MAX_SCALAR:
                raise _TooBig(f":{line}: a value is too long ({len(value)} characters, at most {MAX_SCALAR})")
            if event.implicit[0] and len(value) > MAX_NUMBER_DIGITS and _is_number(value):
                # any YAML 1.1 number: decimal, 0x/0o/0b, sexagesimal 1:2:3, with _ separators
                raise _TooBig(f":{line}: a number is too long ({len(value)} digits, at most {MAX_NUMBER_DIGITS})")


def _construct(node: yaml.Node, path: FieldPath, smap: SourceMap, problems: list[str],
               budget: list[int] | None = None) -> Any:
    if budget is not None:
        budget[0] -= 1
        if budget[0] < 0:
            raise _TooBig(f": too many values after expanding aliases (more than {MAX_NODES}; "
                          "an alias bomb?)")
    smap.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                problems.append(f"{smap.file}:{key_node.start_mark.line + 1}: YAML merge keys (<<) are not supported")
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                line = key_node.start_mark.line + 1
                problems.append(f"{smap.file}:{line}: {format_path(path)}: a mapping key must be a plain value")
                continue
            key = _scalar(key_node)
            child = (*path, key if isinstance(key, (str, int)) else str(key))
            if key in result:
                problems.append(
                    f"{smap.file}:{key_node.start_mark.line + 1}: {format_path(child)}: "
                    f"duplicate key (first at line {smap.lines.get(child, '?')})"
                )
                continue
            smap.lines[child] = key_node.start_mark.line + 1
            result[key] = _construct(value_node, child, smap, problems, budget)
        return result
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            child = (*path, index)
            smap.lines[child] = item.start_mark.line + 1
            items.append(_construct(item, child, smap, problems, budget))
        return items
    value = _scalar(node)
    if isinstance(value, float) and not math.isfinite(value):
        problems.append(f"{smap.file}:{node.start_mark.line + 1}: {format_path(path)}: {node.value!r} is not "
                        "a finite number (NaN and infinity are refused)")
    return value


_SCALAR_LOADER = yaml.SafeLoader("")


def _scalar(node: yaml.Node) -> Any:
    return _SCALAR_LOADER.construct_object(node, deep=True)


def _compose_fast(text: str) -> yaml.Node | bool | None:
    """The document's node tree through libyaml; False when libyaml is missing or the text
    is not clean YAML within the bounds (the pure-Python parser then reads it again and
    words the error exactly as it always has)."""
    if _FAST_LOADER is None:
        return False
    try:
        _check_events(text, _FAST_LOADER)
        return yaml.compose(text, Loader=_FAST_LOADER)
    except (_TooBig, yaml.YAMLError, ValueError, UnicodeError):
        return False


def parse_yaml(text: str, file: str) -> tuple[Any, SourceMap]:
    """Parse one YAML document from text; InputError with file:line on bad YAML."""
    smap = SourceMap(file)
    try:
        fast = _compose_fast(text)
        if fast is False:
            _check_events(text)
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        else:
            root = fast
    except _TooBig as exc:
        raise InputError(f"{file}{exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise InputError(f"{file}{line}: not valid YAML: {exc.problem or exc}") from None
    except yaml.reader.ReaderError as exc:  # a control character or bad encoding: name its line
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        what = (f"character U+{exc.character:04X}" if isinstance(exc.character, int)
                else f"byte {exc.character!r}")
        raise InputError(f"{file}{f':{line}' if line else ''}: not valid YAML: {what} is not allowed "
                         f"({exc.reason})") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{file}: not valid YAML: {exc}") from None
    if root is None:
        return None, smap
    problems: list[str] = []
    try:
        data = _construct(root, (), smap, problems, [MAX_NODES])
    except _TooBig as exc:
        raise InputError(f"{file}{exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{file}: not valid YAML: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{file}: a value cannot be read: {exc}") from None
    if problems:
        raise InputError(f"{file}: {len(problems)} problem(s) in the YAML", problems)
    return data, smap


def load_yaml(path: str | Path) -> tuple[Any, SourceMap]:
    """Read (bounded, regular files only, once) and parse a YAML file; InputError if it
    cannot be read."""
    data, smap, _ = load_yaml_text(path)
    return data, smap


def load_yaml_text(path: str | Path, *, what: str = "YAML file") -> tuple[Any, SourceMap, str]:
    """`load_yaml` that also returns the text it parsed (read once: the caller hashes or
    keeps that text instead of reading the file again)."""
    text = read_text(path, limit=MAX_FILE_BYTES, what=what)
    data, smap = parse_yaml(text, str(path))
    return data, smap, text
