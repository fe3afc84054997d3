"""gpuctl.yamlsrc parses through libyaml when PyYAML has it, with exactly the pure-Python
parser's data, line map and errors (issue 18: start-up CPU of every command)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuctl import yamlsrc
from gpuctl.errors import InputError

REPO = Path(__file__).resolve().parents[2]
FILES = sorted(p for d in ("inventories", "matrices", "catalog", "roles", "tests")
               for p in (REPO / d).rglob("*.yaml") if p.is_file())

TRICKY = {
    "tab-indent": "a:\n\tb: 1\n",
    "control": "cluster: {name: x}\nnodes: [a\x07]\n",
    "nel": "a: b\x85c\n",
    "bom": "\ufeffa: 1\n",
    "dupe": "a: 1\nb: 2\na: 3\n",
    "merge": "base: &b {x: 1}\nc:\n  <<: *b\n",
    "nan": "x: .nan\n",
    "bignum": "n: " + "9" * 200 + "\n",
    "deep": "x: " + "[" * 100 + "]" * 100 + "\n",
    "unclosed": "a: [1, 2\n",
    "bad-indent": "a:\n  b: 1\n c: 2\n",
    "two-docs": "a: 1\n---\nb: 2\n",
    "empty": "",
    "comment-only": "# nothing\n",
    "key-not-scalar": "? [a, b]\n: 1\n",
    "unicode": "name: café ☃ \U0001F600\nx: [1, 2]\n",
    "anchors": "a: &x [1, 2]\nb: *x\n",
    "bad-alias": "a: *nope\n",
    "timestamp": "t: 2025-01-01T00:00:00Z\nd: 2025-01-01\n",
    "sexagesimal": "t: 1:20:30\no: 0o17\nh: 0x1f\n",
}


def _outcome(text: str, name: str) -> object:
    try:
        data, smap = yamlsrc.parse_yaml(text, name)
    except InputError as exc:
        return ("error", str(exc), tuple(exc.problems))
    return ("ok", repr(data), smap.lines)


def _both(text: str, name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    fast = _outcome(text, name)
    with monkeypatch.context() as m:
        m.setattr(yamlsrc, "_FAST_LOADER", None)
        slow = _outcome(text, name)
    return fast, slow


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_libyaml_is_used_when_present() -> None:
    assert yamlsrc._FAST_LOADER is yaml.CSafeLoader


def test_every_shipped_yaml_file_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(FILES) > 20
    for path in FILES:
        text = path.read_text()
        fast, slow = _both(text, str(path), monkeypatch)
        assert fast == slow, path


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_tricky_text_reads_or_fails_the_same(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = _both(TRICKY[name], f"{name}.yaml", monkeypatch)
    assert fast == slow
