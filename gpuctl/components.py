"""The component registry: one declaration per component, read from its own folder.

Each `roles/<component>/__init__.py` declares `COMPONENT = Component(...)`: its matrix
parts (the package groups of the version matrix it installs), services, kernel modules,
the configuration files it owns (and on which nodes), its knobs with their types
(`gpuctl.knobs`) and defaults (its defaults.yaml), when it applies on a node, its rules
for the inventory (`validate`, in roles/<component>/validate.py, imported by the
declaration as `from .validate import ...`) and its place in the provision order. This
module loads those declarations (by path, like the roles' install.py and checks.py; each
folder as a package, so the declaration may import the files beside it) into one ordered
registry; spec resolution, inventory validation, install, checks, lock/drift and the CLI
read the registry, never a list of their own (tests/unit/test_components.py refuses a
list of component names spelled out anywhere else).

Why Python and not YAML: a knob's type is a `gpuctl.knobs` object (allowlists, path
folders, command argv) and "when it applies" is a condition on the inventory; both are
code, and a declaration in the folder's existing `__init__.py` keeps them beside the data.

This module imports no other gpuctl module that reads the registry (knobs, spec, lock
import it), so the declarations can import `gpuctl.knobs` and this module freely.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuctl.errors import InputError
from gpuctl.paths import roles_dir
from gpuctl.validation import Validator
from gpuctl.yamlsrc import load_yaml

if TYPE_CHECKING:  # a file's condition reads the node's spec; gpuctl.spec imports this module
    from gpuctl.spec import NodeSpec

_MODULE_PREFIX = "gpuctl_components"
#: a knob's place in a declared path template (`ManagedFile.path`, `.covers`)
PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class When:
    """What decides whether a component applies on a node (built by `gpuctl.spec`)."""

    sku: str
    package_manager: str  # "apt" | "dnf"
    nvswitch: bool
    fabric: str  # "infiniband" | "roce" | "none"
    soft_roce: bool
    vlans: bool
    raid: bool
    lustre: bool  # the inventory has storage.lustre
    matrix: Any  # gpuctl.matrix.Matrix
    role_vars: Mapping[str, Any]
    #: reasons of the components resolved so far (provision order): "" = it applies
    reasons: dict[str, str] = field(default_factory=dict)

    def skipped(self, component: str) -> str:
        """Why an earlier component does not apply ("" when it does)."""
        return self.reasons[component]

    def knob(self, key: str) -> Any:
        """A knob as the inventory sets it (role_vars), else its default."""
        return knob_value(key, self.role_vars)


Applies = Callable[[When], str]
Condition = Callable[[When], bool]
#: whether a component renders a managed file on a node, judged on the node's resolved spec
FileCondition = Callable[["NodeSpec"], bool]


def on_apt(spec: NodeSpec) -> bool:
    """A FileCondition: the node installs with apt (Debian, Ubuntu)."""
    return spec.package_manager == "apt"


def on_dnf(spec: NodeSpec) -> bool:
    """A FileCondition: the node installs with dnf (Rocky, RHEL)."""
    return spec.package_manager == "dnf"


@dataclass(frozen=True)
class Part:
    """A matrix part: one package group of the version matrix (`packages.<os>.<name>`)."""

    name: str
    #: the version the part is pinned at, from the matrix ("" where the matrix pins none)
    version: Callable[[Any], str]


@dataclass(frozen=True)
class Service:
    """A systemd unit the component installs, enables and runs; its name is the knob's
    value (roles/<component>/defaults.yaml, overridable in role_vars), read into the
    NodeSpec once so install and verify name the same unit."""

    knob: str  # its value: the unit, or {apt: unit, dnf: unit} where the distributions differ
    part: str = ""  # the matrix part whose packages bring the unit; "" = the component's own


@dataclass(frozen=True)
class Module:
    """A kernel module the component loads: a fixed `name` or the value of `knob`; it
    belongs to `part` (a matrix part) or, when empty, to the component itself."""

    name: str = ""
    knob: str = ""
    part: str = ""
    versioned: bool = False  # its version is the part's (the nvidia module's is the driver's)
    when: Condition | None = None


@dataclass(frozen=True)
class ManagedFile:
    """A configuration file the component renders. `path` is a literal path or a glob, and may
    hold `{knob}` placeholders (a folder or a file-name prefix the role takes from a knob);
    `knob` names the knob whose value is the whole path; `covers` are the files (path templates,
    `{knob}` placeholders) a glob `path` stands for at their knobs' defaults, read as well where
    an override moves one out of the glob. Every knob is read as the node's inventory resolves
    it (role_vars, else the default), so the role, verify and the lock read the same file;
    `per_node` files hold node-specific content (addresses, array UUIDs) and are compared with
    the node's own lock entry, never with its peers. `when` says on which nodes the component
    renders it: a condition on the node's spec, declared by the component (None = on every
    node); the lock calls it, nothing parses it."""

    path: str
    knob: str | None = None
    covers: tuple[str, ...] = ()
    per_node: bool = False
    when: FileCondition | None = None
    role: str = ""  # the component that renders it (filled in by the registry)

    def knobs(self) -> tuple[str, ...]:
        """The knobs its path is made of (`knob`, and the placeholders of `path` and `covers`)."""
        found = PLACEHOLDER.findall(" ".join((self.path, *self.covers)))
        return tuple(dict.fromkeys([*([self.knob] if self.knob else []), *found]))


@dataclass(frozen=True)
class Component:
    """One component: everything the engine needs to know about it, in its folder."""

    name: str
    order: int  # provision order (ascending); delivery components are outside it
    summary: str
    parts: tuple[Part, ...] = ()
    services: tuple[Service, ...] = ()
    modules: tuple[Module, ...] = ()
    files: tuple[ManagedFile, ...] = ()
    #: knob → its type (`gpuctl.knobs`); a map knob may give a type per entry (a dict)
    knobs: Mapping[str, Any] = field(default_factory=dict)
    #: "" when it applies on the node, else why not; None = always applies
    applies: Applies | None = None
    #: why it cannot run on a container lab node (shares the host kernel); "" = it can
    container: str = ""
    #: outputs its checks read, fetched up front (`gpuctl.checks.probe.Probe.prefetch`);
    #: the package list and holds are read for every component with matrix parts
    probes: tuple[str, ...] = ()
    #: a delivery role (handover, package mirror): run by its own command, never by provision
    delivery: bool = False
    #: its rules for the inventory beyond the schema (`gpuctl.validation.Validator`), run in
    #: this order after the shared model's (gpuctl.inventory_semantics); each records its
    #: problems at the inventory field it judges
    validate: tuple[Validator, ...] = ()

    @property
    def folder(self) -> Path:
        return roles_dir() / self.name


def load_module_file(mod_name: str, path: Path, what: str, package: bool = False) -> Any:
    """Import the Python file `path` as module `mod_name` (registered in sys.modules; dropped
    again when executing it fails). `what` names it in the error ("role nccl", …). A
    `package` (a folder's __init__.py) may import the files beside it (`from .x import y`)."""
    search = [str(path.parent)] if package else None
    spec = importlib.util.spec_from_file_location(mod_name, path, submodule_search_locations=search)
    if spec is None or spec.loader is None:  # pragma: no cover - only for odd paths
        raise InputError(f"{what}: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop(mod_name, None)
        raise
    return module


def _load(folder: Path) -> Component:
    path = folder / "__init__.py"
    module = load_module_file(f"{_MODULE_PREFIX}.{folder.name}", path, f"component {folder.name}", package=True)
    comp = getattr(module, "COMPONENT", None)
    if not isinstance(comp, Component):
        raise InputError(f"{path}: declares no COMPONENT = Component(...)")
    if comp.name != folder.name:
        raise InputError(f"{path}: COMPONENT.name is {comp.name!r}, not its folder's name {folder.name!r}")
    return comp


@cache
def _registry(root: Path) -> tuple[Component, ...]:
    found = [_load(p.parent) for p in sorted(root.glob("*/__init__.py"))]
    orders = [c.order for c in found if not c.delivery]
    if len(orders) != len(set(orders)):
        raise InputError(f"{root}: two components declare the same order")
    return tuple(sorted(found, key=lambda c: (c.delivery, c.order)))


def registry() -> tuple[Component, ...]:
    """Every component: the provisioned ones in provision order, then the delivery ones."""
    return _registry(roles_dir())


def component(name: str) -> Component:
    for c in registry():
        if c.name == name:
            return c
    raise KeyError(name)


def provisioned() -> tuple[Component, ...]:
    """The components `gpuctl provision` runs, in order."""
    return tuple(c for c in registry() if not c.delivery)


def provision_order() -> tuple[str, ...]:
    """The names of the provisioned components, in order (the roles of `gpuctl provision`)."""
    return tuple(c.name for c in provisioned())


def delivery_roles() -> tuple[str, ...]:
    """Roles run by their own delivery command (handover, package mirror), never by provision."""
    return tuple(c.name for c in registry() if c.delivery)


def matrix_parts() -> tuple[str, ...]:
    """Every matrix part (the package groups a matrix may list), in provision order."""
    return tuple(p.name for c in provisioned() for p in c.parts)


def required_parts() -> tuple[str, ...]:
    """The matrix parts every node installs (of the components that always apply): a matrix
    must pin them for every OS it lists."""
    return tuple(p.name for c in provisioned() if c.applies is None for p in c.parts)


def part_owner() -> dict[str, str]:
    """Matrix part → the component that installs (and so verifies) it."""
    return dict(_part_owner(roles_dir()))


@cache
def _part_owner(root: Path) -> tuple[tuple[str, str], ...]:
    return tuple((p.name, c.name) for c in _registry(root) if not c.delivery for p in c.parts)


def container_reasons() -> dict[str, str]:
    """Component → why it cannot run on a container lab node (only those that cannot)."""
    return {c.name: c.container for c in provisioned() if c.container}


def managed_files() -> tuple[ManagedFile, ...]:
    """Every configuration file a component renders (`role` filled in), in provision order."""
    return _managed_files(roles_dir())


@cache
def _managed_files(root: Path) -> tuple[ManagedFile, ...]:
    return tuple(replace(f, role=c.name) for c in _registry(root) if not c.delivery for f in c.files)


def validators() -> tuple[Validator, ...]:
    """Every component's rules for the inventory, in registry order (the provisioned
    components in provision order, then the delivery ones)."""
    return tuple(v for c in registry() for v in c.validate)


def knob_types() -> dict[str, Any]:
    """Every knob of every component → its type (`gpuctl.knobs`)."""
    return _knob_types(roles_dir())


@cache
def _knob_types(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in _registry(root):
        for key, t in c.knobs.items():
            if key in out:
                raise InputError(f"knob {key} is declared by two components")
            out[key] = t
    return out


def spec_knobs() -> frozenset[str]:
    """Knobs install, verify and the lock all read from the NodeSpec (service and module names,
    the paths of the files the lock hashes), so only the inventory's role_vars may set them."""
    return frozenset(k for c in registry() for k in (*(s.knob for s in c.services),
                                                      *(m.knob for m in c.modules if m.knob),
                                                      *(k for f in c.files for k in f.knobs())))


def knob_owner(key: str) -> str | None:
    """The component whose knob `key` is (knobs are prefixed with their component's name)."""
    return max((c.name for c in registry() if key.startswith(c.name + "_")), key=len, default=None)


def defaults(name: str) -> dict[str, Any]:
    """roles/<name>/defaults.yaml: the component's knobs with their defaults ({} without one);
    a copy the caller may change."""
    return copy.deepcopy(_defaults(roles_dir(), name))


@cache
def _defaults(root: Path, name: str) -> dict[str, Any]:
    path = root / name / "defaults.yaml"
    if not path.is_file():
        return {}
    return dict(load_yaml(path)[0] or {})


def all_defaults() -> dict[str, Any]:
    """Every knob of every component with its default (each component's defaults.yaml, in
    registry order); a copy the caller may change."""
    out: dict[str, Any] = {}
    for c in registry():
        out.update(defaults(c.name))
    return out


def knob_value(key: str, role_vars: Mapping[str, Any]) -> Any:
    """A knob as the inventory sets it (role_vars), else its component's default; a map
    override (per OS, per filesystem) changes only the entries it names, as in install
    (`gpuctl.operations.role_knobs`)."""
    owner = knob_owner(key)
    default = defaults(owner).get(key) if owner else None
    return merge_override(default, role_vars[key]) if key in role_vars else default


def merge_override(default: Any, override: Any) -> Any:
    """The one rule for a knob's override: a map (per OS, per filesystem) changes only the
    entries it names; any other value replaces the default."""
    if isinstance(default, dict) and isinstance(override, dict):
        return {**default, **override}
    return override


def resolve_reasons(when: When) -> dict[str, str]:
    """Component → "" when it applies on this node, else why not (provision order)."""
    for c in provisioned():
        when.reasons[c.name] = c.applies(when) if c.applies is not None else ""
    return dict(when.reasons)
