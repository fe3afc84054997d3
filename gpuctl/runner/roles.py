"""Role loading and role selection.

A role is `roles/<name>/install.py` exposing `install`, a pyinfra `@deploy`. Roles are
loaded by file path from `gpuctl.paths.roles_dir()` (the checkout's roles/ or the copy
inside an installed wheel), never imported as a package, so `roles/` needs no install.

Selection (`select_roles`) decides, once for the whole cluster, which roles of
`gpuctl.spec.ROLE_ORDER` run and why the others do not: `--only`, `--skip`, and each
NodeSpec's `roles[role]` skip reason. pyinfra identifies an operation by its position
in each host's call list, so every host must run the same roles: the NodeSpecs of one
inventory share SKU, matrix and fabric, and `select_roles` refuses specs that disagree.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from gpuctl.components import load_module_file
from gpuctl.errors import InputError
from gpuctl.paths import roles_dir
from gpuctl.spec import ROLE_ORDER, NodeSpec

log = logging.getLogger(__name__)

_MODULE_PREFIX = "gpuctl_roles"


def role_path(name: str, base: Path | None = None) -> Path:
    return (base or roles_dir()) / name / "install.py"


def role_available(name: str, base: Path | None = None) -> bool:
    return role_path(name, base).is_file()


def load_role(name: str, base: Path | None = None, known: Iterable[str] = ROLE_ORDER) -> ModuleType:
    """Load `roles/<name>/install.py` by path and return the module (cached per path).

    `known` lists the role names accepted (the provision order by default; delivery roles
    such as handover pass their own list). Raises InputError when the role does not exist
    or has no `install` deploy.
    """
    known = tuple(known)
    if name not in known:
        raise InputError(f"unknown role {name!r}; roles are: {', '.join(known)}")
    path = role_path(name, base)
    if not path.is_file():
        raise InputError(f"role {name}: {path} not found")
    mod_name = f"{_MODULE_PREFIX}.{name}.install"
    cached = sys.modules.get(mod_name)
    if cached is not None and getattr(cached, "__file__", None) == str(path):
        return cached
    module = load_module_file(mod_name, path, f"role {name}")
    if not callable(getattr(module, "install", None)):
        sys.modules.pop(mod_name, None)
        raise InputError(f"role {name}: {path} defines no `install` deploy")
    return module


@dataclass(frozen=True)
class RoleChoice:
    """One role of ROLE_ORDER and whether it runs; `reason` says why not ("" = runs)."""

    name: str
    reason: str = ""

    @property
    def runs(self) -> bool:
        return not self.reason


def parse_roles(values: Iterable[str]) -> tuple[str, ...]:
    """`--only a,b --only c` → ('a', 'b', 'c'); unknown names are an InputError."""
    names: list[str] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if part:
                names.append(part)
    unknown = [n for n in names if n not in ROLE_ORDER]
    if unknown:
        raise InputError(f"unknown role(s): {', '.join(unknown)}; roles are: {', '.join(ROLE_ORDER)}")
    return tuple(dict.fromkeys(names))


def select_roles(specs: Sequence[NodeSpec], only: Iterable[str] = (), skip: Iterable[str] = (),
                 base: Path | None = None, require_available: bool = True) -> list[RoleChoice]:
    """Every role of ROLE_ORDER with its skip reason, identical for all hosts.

    Raises InputError when the specs disagree about a role (pyinfra needs one operation
    sequence for all hosts) or when a role that should run does not exist (unless
    `require_available` is False, then it is reported as skipped).
    """
    only_t, skip_t = parse_roles(only), parse_roles(skip)
    clash = set(only_t) & set(skip_t)
    if clash:
        raise InputError(f"role(s) both in --only and --skip: {', '.join(sorted(clash))}")
    choices: list[RoleChoice] = []
    missing: list[str] = []
    for role in ROLE_ORDER:
        reasons = {s.roles.get(role, "") for s in specs}
        if len(reasons) > 1:
            detail = "; ".join(f"{s.node}: {s.roles.get(role, '') or 'runs'}" for s in specs)
            raise InputError(f"role {role} runs on some nodes only ({detail}); every node of one run must "
                             "take the same roles — split the run with --limit")
        spec_reason = reasons.pop() if reasons else ""
        if only_t and role not in only_t:
            reason = "not in --only"
        elif role in skip_t:
            reason = "--skip"
        elif spec_reason:
            reason = spec_reason
        elif not role_available(role, base):
            if require_available:
                missing.append(role)
            reason = f"roles/{role}/install.py not found"
        else:
            reason = ""
        choices.append(RoleChoice(role, reason))
    if missing:
        raise InputError(f"role(s) not found under {base or roles_dir()}: {', '.join(missing)}",
                         [f"skip them explicitly with --skip {','.join(missing)}"])
    return choices
