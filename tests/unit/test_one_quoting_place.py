"""Issue 17 (Build): every command is built from an argv list and quoted in one place,
`gpuctl.shellcmd.sh` (shlex.join). No role, bench script, fact, the lock reader, the
wheelhouse or gpuctl.operations quotes a word itself: `shlex` is not even imported there,
so a hand-quoted f-string word (`{shlex.quote(x)}`) or an alias (`q = shlex.quote`) cannot
come back unseen."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuctl.shellcmd import OR_TRUE, QUIET, and_then, or_else, pipe, sh

ROOT = Path(__file__).resolve().parents[2]

#: the files held to the rule (globs under the repository root)
SCOPE = ("roles/**/*.py", "gpuctl/bench/*.py", "gpuctl/facts/*.py", "gpuctl/lock/*.py", "gpuctl/parsers/*.py",
         "gpuctl/wheelhouse.py", "gpuctl/operations.py")

#: path -> why it may import shlex (only the one quoting place)
ALLOWED = {"gpuctl/shellcmd.py": "the one place a word is quoted"}


def _files() -> list[Path]:
    return sorted({p for g in SCOPE for p in ROOT.glob(g)})


def _shlex_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "shlex" for a in node.names):
            out.append((node.lineno, "import shlex"))
        elif isinstance(node, ast.ImportFrom) and node.module == "shlex":
            out.append((node.lineno, "from shlex import …"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "shlex":
            out.append((node.lineno, f"shlex.{node.attr}"))
    return [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in sorted(out)]


def test_the_scope_is_not_empty() -> None:
    files = _files()
    assert len(files) > 30, files  # roles' install/checks, facts, bench: a moved folder must not pass silently
    assert ROOT / "roles/nvme_raid/install.py" in files and ROOT / "gpuctl/facts/storage.py" in files


def test_no_file_quotes_a_word_outside_sh() -> None:
    uses = [u for p in _files() if str(p.relative_to(ROOT)) not in ALLOWED for u in _shlex_uses(p)]
    assert not uses, "quote through gpuctl.shellcmd.sh (or pipe/and_then), not shlex:\n" + "\n".join(uses)


def test_the_guard_sees_a_hand_quoted_word(tmp_path: Path) -> None:
    """The AST walk finds the forms that were replaced (a call, an alias, a from-import)."""
    global ROOT
    bad = tmp_path / "x.py"
    bad.write_text("import shlex\nq = shlex.quote\ncmd = f'cat {shlex.quote(p)}'\nfrom shlex import join\n")
    saved, ROOT = ROOT, tmp_path
    try:
        uses = _shlex_uses(bad)
    finally:
        ROOT = saved
    assert uses == ["x.py:1: import shlex", "x.py:2: shlex.quote", "x.py:3: shlex.quote", "x.py:4: from shlex import …"]


@pytest.mark.parametrize(("argv", "want"), [
    (("printf", "%s\\n", "a b"), "printf '%s\\n' 'a b'"),
    (("rm", "-rf", "--", "/x;y"), "rm -rf -- '/x;y'"),
    (("echo", "it's\n"), "echo 'it'\"'\"'s\n'"),
    ((), ""),
])
def test_sh_quotes_every_word(argv: tuple[str, ...], want: str) -> None:
    assert sh(*argv) == want


def test_composers_hold_no_data() -> None:
    a, b = sh("cat", "/a b"), sh("grep", "-c", "x;y")
    assert pipe(a, b) == "cat '/a b' | grep -c 'x;y'"
    assert and_then(a, b) == "cat '/a b' && grep -c 'x;y'"
    assert or_else(a, b) == "cat '/a b' || grep -c 'x;y'"
    assert a + QUIET + OR_TRUE == "cat '/a b' 2>/dev/null || true"
