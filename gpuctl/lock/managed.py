"""The configuration files the roles render, as each component declares them (`Component.files`,
read through the registry `gpuctl.components`): which apply to a node and where the node has them
(`managed_files`), and which hold node-specific content (`per_node_file`).

A file whose path is a knob (a whole path, a folder or a file-name prefix) is read where this
node's inventory puts it: the knob's value from its role_vars, else the component's default —
the value install writes to and verify reads, never the default alone.
"""


from __future__ import annotations

import fnmatch
import logging
import posixpath
from re import Match

from gpuctl.components import PLACEHOLDER, ManagedFile, knob_value
from gpuctl.components import managed_files as declared_files
from gpuctl.errors import InputError
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)


# ------------------------------------------------------------------- managed files

#: The rendered configuration files (order = report order) are declared by each component
#: (`Component.files` in roles/<component>/__init__.py); `declared_files()` lists them all.


def _knob(key: str, spec: NodeSpec) -> str | None:
    """A path knob as this node resolves it; a per-package-manager map gives this node's entry."""
    value = knob_value(key, spec.role_vars)
    if isinstance(value, dict):
        value = value.get(spec.package_manager)
    return str(value) if isinstance(value, str) and value else None


def _fill(template: str, spec: NodeSpec) -> str:
    def value(m: Match[str]) -> str:
        found = _knob(m.group(1), spec)
        if found is None:
            raise InputError(f"managed file {template}: knob {m.group(1)} has no value on {spec.node}")
        return found
    return PLACEHOLDER.sub(value, template)


def in_glob(path: str, pattern: str) -> bool:
    """`path` is one of the files the shell glob `pattern` names (`*` never crosses a '/')."""
    return (posixpath.dirname(path) == posixpath.dirname(pattern)
            and fnmatch.fnmatchcase(posixpath.basename(path), posixpath.basename(pattern)))


def _patterns(mf: ManagedFile, spec: NodeSpec) -> list[str]:
    """Where this node has `mf`: its path (or glob) with the node's knob values, plus each file
    it covers that an override moved out of the glob."""
    main = (_knob(mf.knob, spec) or mf.path) if mf.knob else _fill(mf.path, spec)
    if not main.startswith("/"):
        raise InputError(f"managed file {mf.path}: {main!r} is not an absolute path")
    return [main, *(p for p in (_fill(c, spec) for c in mf.covers) if not in_glob(p, main))]


def _applies(mf: ManagedFile, spec: NodeSpec) -> bool:
    """The component's own condition for the file (`ManagedFile.when`; None = every node)."""
    return mf.when is None or mf.when(spec)


def managed_files(spec: NodeSpec) -> list[str]:
    """Paths (or globs) of the configuration files the roles render on this node."""
    out: list[str] = []
    for mf in declared_files():
        if _applies(mf, spec):
            out += [p for p in _patterns(mf, spec) if p not in out]
    return out


def per_node_file(path: str, spec: NodeSpec) -> bool:
    """True when `path` (a file found on this node) has node-specific content."""
    return any(mf.per_node and any(in_glob(path, p) for p in _patterns(mf, spec)) for mf in declared_files())
