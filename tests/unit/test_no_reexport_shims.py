"""A package re-exports nothing: each name is imported from the module it lives in (issue 18: the
re-export lists of gpuctl.lock, gpuctl.checks and gpuctl.parsers.nvidia_smi kept old import paths
alive, so a name had two addresses and a package import loaded every submodule)."""

from __future__ import annotations

import ast
from pathlib import Path

import gpuctl

ROOT = Path(gpuctl.__file__).parent
#: packages still re-exporting, each with why it was left (say so in the issue's closing note)
LEFT: dict[str, str] = {
    "gpuctl/verdicts/__init__.py": "47 importers, most in analyze/bench/report that another branch rewrites now",
    "gpuctl/lab/__init__.py": "a lazy __getattr__ API kept so CLI commands load no QEMU plumbing; the lab's "
                              "imports are not reviewed yet (allow-listed whole in test_import_graph)",
}


def _reexports(init: Path) -> list[str]:
    package = ".".join(init.parent.relative_to(ROOT.parent).parts)
    tree = ast.parse(init.read_text())
    out = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith(package + ".")):
            out += [a.name for a in node.names]
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            out.append("__all__")
    return out


def test_no_package_re_exports_its_submodules_names() -> None:
    found = {str(p.relative_to(ROOT.parent)): names for p in sorted(ROOT.rglob("__init__.py"))
             if (names := _reexports(p))}
    assert set(found) - set(LEFT) == set(), {k: v[:5] for k, v in found.items() if k not in LEFT}
    assert set(LEFT) <= set(found), "a package left in LEFT re-exports nothing now: drop it from the list"
