"""The configuration files the roles render, as each component declares them (`Component.files`,
read through the registry `gpuctl.components`): which apply to a node (`managed_files`) and which
hold node-specific content (`per_node_file`).
"""


from __future__ import annotations

import fnmatch
import logging

from gpuctl.components import ManagedFile, defaults
from gpuctl.components import managed_files as declared_files
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)


# ------------------------------------------------------------------- managed files

#: The rendered configuration files (order = report order) are declared by each component
#: (`Component.files` in roles/<component>/__init__.py); `declared_files()` lists them all.


def _resolve_path(mf: ManagedFile, package_manager: str) -> str:
    if mf.knob is None:
        return mf.path
    value = defaults(mf.role).get(mf.knob)
    if isinstance(value, dict):
        value = value.get(package_manager)
    return str(value) if isinstance(value, str) and value.startswith("/") else mf.path


def _applies(mf: ManagedFile, spec: NodeSpec) -> bool:
    """The component's own condition for the file (`ManagedFile.when`; None = every node)."""
    return mf.when is None or mf.when(spec)


def managed_files(spec: NodeSpec) -> list[str]:
    """Paths (or globs) of the configuration files the roles render on this node."""
    out: list[str] = []
    for mf in declared_files():
        if _applies(mf, spec):
            path = _resolve_path(mf, spec.package_manager)
            if path not in out:
                out.append(path)
    return out


def per_node_file(path: str, package_manager: str = "apt") -> bool:
    """True when `path` (a file found on a node) has node-specific content."""
    return any(mf.per_node and fnmatch.fnmatchcase(path, _resolve_path(mf, package_manager))
               for mf in declared_files())
