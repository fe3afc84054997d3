"""One registry of tool kinds (issue 18): `gpuctl analyze`, the bench's judging and the bench's
running all read `gpuctl.kinds`, and give the same verdicts on the same raw output.

The registry rule is read from the source (ast): anywhere in gpuctl/, roles/ or deploy/ other
than gpuctl/kinds.py, a dict literal keyed by three or more tool kind names, a dict literal
whose values name three or more parsers (`parse_*`), or a class with both a `parse` and a
`judge` field is a second registry.
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from gpuctl import kinds
from gpuctl.analyze import analyze_text
from gpuctl.bench.judge import judge_output
from gpuctl.catalog import load_sku
from gpuctl.errors import ParseError
from gpuctl.verdicts import Subject

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "fixtures"
REGISTRY = ROOT / "gpuctl" / "kinds.py"


def _names_a_parser(node: ast.AST) -> bool:
    """`parse_x`, `partial(parse_x, …)`, `mod.parse_x`."""
    if isinstance(node, ast.Call):
        return any(_names_a_parser(a) for a in [node.func, *node.args])
    if isinstance(node, ast.Name):
        return node.id.startswith("parse_")
    if isinstance(node, ast.Attribute):
        return node.attr.startswith("parse_")
    return False


def second_registries(text: str, rel: str) -> list[str]:
    tree = ast.parse(text, rel)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            named = [k for k in keys if k in kinds.KINDS]
            if len(named) >= 3:
                found.append(f"{rel}:{node.lineno}: a dict keyed by tool kinds ({', '.join(named[:4])}, …)")
            elif sum(_names_a_parser(v) for v in node.values) >= 3:
                found.append(f"{rel}:{node.lineno}: a dict of parsers")
        elif isinstance(node, ast.ClassDef):
            own = {t.id for s in node.body if isinstance(s, ast.AnnAssign) for t in [s.target]
                   if isinstance(t, ast.Name)}
            if {"parse", "judge"} <= own:
                found.append(f"{rel}:{node.lineno}: class {node.name} pairs a parser with a judge")
    return found


def test_one_registry_of_tool_kinds() -> None:
    bad = [hit for pkg in ("gpuctl", "roles", "deploy") for path in sorted((ROOT / pkg).rglob("*.py"))
           if path != REGISTRY for hit in second_registries(path.read_text(), str(path.relative_to(ROOT)))]
    assert not bad, "a second registry of tool kinds (use gpuctl.kinds):\n" + "\n".join(bad)


def test_the_registry_rule_finds_a_registry() -> None:
    got = second_registries("X = {'nccl': 1, 'fio': 2, 'dcgm': 3}\n"
                            "Y = {'a': parse_a, 'b': partial(parse_b), 'c': m.parse_c}\n"
                            "Z = {'nccl': 1, 'other': 2}\n"
                            "class K:\n    parse: int\n    judge: int\n", "probe.py")
    assert len(got) == 3, got


def test_every_kind_is_whole() -> None:
    """Each entry names its kind, has a parser, a judge, figures, a help line, detection hints
    and the check a could-not-run verdict carries; which kinds the bench runs."""
    for name, k in kinds.KINDS.items():
        assert k.name == name
        assert k.help and k.check and k.signs, name
        for f in fields(k):
            assert getattr(k, f.name) is not None or f.name in {"bench_test", "text_verdicts", "also_reads"}, \
                (name, f.name)
        if k.also_reads is not None:
            assert k.also_reads in kinds.KINDS and k.text_verdicts is not None
    assert {k.name for k in kinds.KINDS.values() if k.bench} == {
        "nccl", "bandwidth", "ib_write_bw", "ib_write_lat", "fio", "gdsio", "dcgm", "training"}
    assert kinds.counter_kinds() == ("nvlink-errors", "ib-counters")


def _fixtures_of(kind: str) -> list[Path]:
    """Every stored raw output a bench kind reads (an nccl-tests run that died on an NET/IB
    fault, the NCCL debug logs, is one the nccl kind must read too)."""
    where = {"nccl": ["nccl/*.txt", "nccl_log/*.txt"], "bandwidth": ["bandwidth/*.json", "bandwidth/*.txt"],
             "ib_write_bw": ["perftest/ib_write_bw-*.txt"], "ib_write_lat": ["perftest/ib_write_lat-*.txt"],
             "fio": ["fio/*.txt"], "gdsio": ["gdsio/*.txt"], "dcgm": ["dcgm/*.txt", "dcgm/*.json"],
             "training": ["training/*.jsonl", "training/*.stdout"]}[kind]
    return sorted(p for pattern in where for p in FIXTURES.glob(pattern))


BENCH_KINDS = sorted(k.name for k in kinds.KINDS.values() if k.bench)


@pytest.mark.parametrize("kind", BENCH_KINDS)
@pytest.mark.parametrize("sku_name", [None, "hgx-h100-80gb"])
def test_analyze_and_bench_give_the_same_verdicts(kind: str, sku_name: str | None) -> None:
    """The same raw output, judged by `gpuctl analyze` and by the bench, gives the same
    verdicts; an output analyze cannot read is a could-not-run verdict in the bench."""
    sku = load_sku(sku_name) if sku_name else None
    subject = Subject(node="node1")
    paths = _fixtures_of(kind)
    assert paths, kind
    for path in paths:
        text = path.read_text()
        bench = judge_output(kind, text, sku, subject)
        try:
            analysed = analyze_text(kind, text, sku, subject=subject)
        except ParseError as exc:
            assert [(v.check, v.status.value) for v in bench.verdicts] == [(kinds.KINDS[kind].check, "error")], \
                (path.name, str(exc))
            continue
        assert [v.as_dict() for v in bench.verdicts] == [v.as_dict() for v in analysed.verdicts], path.name
        assert bench.emulated == analysed.emulated, path.name
