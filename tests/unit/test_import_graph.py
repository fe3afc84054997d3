"""The package's imports flow one way: no import circle, no function-local import hiding one.

The graph is built from the source (ast), not by importing: every module of gpuctl/, roles/
and deploy/, every `import` and `from … import` — module-level and inside functions alike
(a function-local import is still an edge: it only hides a circle until the function runs).
Imports under `if TYPE_CHECKING:` are not edges (they never run).

Issue 18's flow: model (inventory, catalog, matrix, rules, NodeSpec) → parsers and rules →
components → runners → workflows → results → CLI. A lower layer never imports a higher one,
so the graph has no strongly connected component of more than one module.

A function-local import of a gpuctl module is refused unless `LOCAL_IMPORT_REASONS` names a
real reason for it (each entry says which).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gpuctl", "roles", "deploy")

# -- the reasons a function-local import of a gpuctl module is allowed ------------------------
PATCH_ORDER = ("the imported module brings pyinfra or paramiko, which must come after gevent patches the "
               "standard library (gpuctl.runner.bootstrap.ensure_patched); the importer is loaded before that")
VERIFY_ONLY = "pytest and testinfra (gpuctl.checks) are loaded only when verification runs"
CLI_ON_DEMAND = ("the CLI loads a command's workflow when the command runs: `gpuctl --help` and other commands "
                 "stay fast, and runner modules come after ensure_patched (PATCH_ORDER)")
RUNS_ALONE = "gpuctl/wheelhouse.py is also copied to a host and run alone there, where gpuctl is not installed"

#: (importer, imported) → reason; an importer ending in "." covers every module under it, which
#: only the CLI may use (`BLANKET_IMPORTERS`): every other entry names one import.
LOCAL_IMPORT_REASONS: dict[tuple[str, str], str] = {
    ("gpuctl.cli.", "*"): CLI_ON_DEMAND,
    ("gpuctl.wheelhouse", "gpuctl.errors"): RUNS_ALONE,
    ("gpuctl.wheelhouse", "gpuctl.shellcmd"): RUNS_ALONE,
    ("gpuctl.wheelhouse", "gpuctl.spec"): RUNS_ALONE,
    ("gpuctl.handover", "gpuctl.bench.remote"): PATCH_ORDER,
    ("gpuctl.handover", "gpuctl.operations"): PATCH_ORDER,
    ("gpuctl.handover", "gpuctl.rolerun"): PATCH_ORDER,
    ("gpuctl.handover", "gpuctl.runner.inventory"): PATCH_ORDER,
    ("gpuctl.mirror", "gpuctl.bench.remote"): PATCH_ORDER,
    ("gpuctl.mirror", "gpuctl.rolerun"): PATCH_ORDER,
    ("gpuctl.preflight", "gpuctl.bench.remote"): PATCH_ORDER,
    ("gpuctl.rolerun", "gpuctl.runner.engine"): PATCH_ORDER,
    ("gpuctl.rolerun", "gpuctl.runner.inventory"): PATCH_ORDER,
    ("gpuctl.turnkey_stages", "gpuctl.runner.run"): PATCH_ORDER,
    ("gpuctl.turnkey_stages", "gpuctl.bench.run"): PATCH_ORDER,
    ("gpuctl.turnkey_stages", "gpuctl.checks.runner"): VERIFY_ONLY,
    ("gpuctl.runner.run", "gpuctl.checks.runner"): VERIFY_ONLY,
    ("gpuctl.lock.read", "gpuctl.bench.remote"): PATCH_ORDER,
    ("gpuctl.lock.rebuilding", "gpuctl.rolerun"): PATCH_ORDER,
    ("gpuctl.lock.rebuilding", "gpuctl.runner.run"): PATCH_ORDER,
    ("gpuctl.lock.rebuilding", "gpuctl.bench.run"): PATCH_ORDER,
    ("gpuctl.lock.rebuilding", "gpuctl.checks.runner"): VERIFY_ONLY,
}

#: the importers an entry may cover as a whole package, each with its reason
BLANKET_IMPORTERS = {"gpuctl.cli.": CLI_ON_DEMAND}


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    local: bool  # inside a function


def modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _owner(name: str, known: dict[str, Path]) -> str | None:
    """The module of ours a dotted name lives in (a module, or a name inside one)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def edges_of(name: str, path: Path, known: dict[str, Path]) -> Iterator[Edge]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, local: bool) -> Iterator[Edge]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                yield from (e for c in child.orelse for e in walk(c, local))
                continue
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                # `from pkg import sub` imports the submodule; `from mod import name`, the module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in child.names]
            for t in targets:
                owner = _owner(t, known)
                if owner is not None and owner != name:
                    yield Edge(name, owner, child.lineno, local)
            yield from walk(child, inner)

    yield from walk(ast.parse(path.read_text(), str(path)), False)


def graph() -> tuple[dict[str, set[str]], list[Edge]]:
    known = modules()
    edges = [e for name, path in known.items() for e in edges_of(name, path, known)]
    out: dict[str, set[str]] = {m: set() for m in known}
    for e in edges:
        out[e.importer].add(e.imported)
    return out, edges


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp: list[str] = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def reason_for(edge: Edge) -> str | None:
    for (importer, imported), reason in LOCAL_IMPORT_REASONS.items():
        who = edge.importer.startswith(importer) if importer.endswith(".") else edge.importer == importer
        if who and imported in ("*", edge.imported):
            return reason
    return None


def test_the_package_has_no_import_circle() -> None:
    g, _ = graph()
    found = circles(g)
    assert not found, "import circles (module-level and function-local imports): " + "; ".join(
        " ↔ ".join(c) for c in found)


def test_no_function_local_import_of_a_gpuctl_module_without_a_reason() -> None:
    _, edges = graph()
    bad = sorted({f"{e.importer}:{e.line} imports {e.imported} inside a function"
                  for e in edges if e.local and e.imported.startswith("gpuctl") and reason_for(e) is None})
    assert not bad, "\n".join(bad)


def test_every_allowed_local_import_is_still_there() -> None:
    """An allow-list entry whose import is gone is removed, so the list stays the real reasons."""
    _, edges = graph()
    used = {(imp, tgt) for e in edges if e.local for (imp, tgt), r in LOCAL_IMPORT_REASONS.items()
            if reason_for(e) == r and (e.importer == imp or (imp.endswith(".") and e.importer.startswith(imp)))
            and tgt in ("*", e.imported)}
    assert set(LOCAL_IMPORT_REASONS) - used == set()


def test_allow_list_entries_are_narrow() -> None:
    """Each entry names one importer and one imported module, except the CLI's: a package
    allowed whole hides every lazy import added to it later (gpuctl/lab/ was, with 41
    function-local imports of gpuctl modules never reviewed; they are at module level now)."""
    wide = sorted(f"{imp} → {tgt}" for (imp, tgt), reason in LOCAL_IMPORT_REASONS.items()
                  if (imp.endswith(".") or tgt == "*") and BLANKET_IMPORTERS.get(imp) != reason)
    assert wide == []


def test_the_circle_finder_finds_circles() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_a_function_local_import_is_an_edge(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpuctl import spec\n"
                   "def f():\n    from gpuctl.inventory import Inventory\n    from . import n\n")
    known = {"gpuctl.spec": src, "gpuctl.inventory": src, "pkg.m": src, "pkg.n": src}
    got = {(e.imported, e.local) for e in edges_of("pkg.m", src, known)}
    assert got == {("gpuctl.inventory", True), ("pkg.n", True)}


#: results → report: the report reads the typed results (gpuctl.results) and renders them; it
#: imports no workflow that makes them (bench, checks) and resolves no inventory itself (spec,
#: inventory, runcontext: an older record's snapshot is gpuctl.results' one conversion)
REPORT_MAY_NOT_IMPORT = ("gpuctl.bench", "gpuctl.checks", "gpuctl.spec", "gpuctl.inventory", "gpuctl.runcontext")


def report_reaches_back(edges: list[Edge]) -> list[str]:
    return sorted({f"{e.importer}:{e.line} imports {e.imported}" for e in edges
                   if (e.importer == "gpuctl.report" or e.importer.startswith("gpuctl.report."))
                   and any(e.imported == m or e.imported.startswith(m + ".") for m in REPORT_MAY_NOT_IMPORT)})


def test_the_report_reads_results_only() -> None:
    _, edges = graph()
    bad = report_reaches_back(edges)
    assert not bad, "the report reaches back into workflows or the model (read gpuctl.results):\n" + "\n".join(bad)
