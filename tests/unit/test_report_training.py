"""The report's training section (issue 16 item 6): the training run across nodes of a bench
record — loss curve (an inline SVG chart, every series visible), ranks agree (each rank with
its node and checksum, differing ones marked), tokens/s, scaling efficiency (floor and source,
or reported, not judged on CPU/gloo), MFU, and the torch / CUDA / NCCL versions that ran (per
node when they differ), in HTML, Markdown and JSON.

The record is real: `stages/bench.json` of the bench's own two-launcher gloo run on this
machine (tests/data/report/SOURCES.md). Variants are made from real or recorded training
output through the bench's own functions (`training_summary`, `judge_training_multi_node`,
`result_dict`), never by writing verdicts by hand.
"""

from __future__ import annotations

import copy
import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gpuctl.bench.judge import result_dict
from gpuctl.bench.run import training_summary
from gpuctl.catalog import load_sku
from gpuctl.parsers.training import TrainingFinal, parse_training_log
from gpuctl.report.chart import loss_chart
from gpuctl.report.gather import build_report
from gpuctl.report.render import render
from gpuctl.verdicts import Subject, judge_training_multi_node
from tests.unit.test_report_build import DATA, NOW, SHA, _run

RECORD = DATA / "bench-training-cpu-real.json"
FIX = Path(__file__).parents[1] / "data" / "fixtures" / "training"
SVG = "{http://www.w3.org/2000/svg}"


def _real() -> dict[str, Any]:
    return json.loads(RECORD.read_text())


def _report(tmp_path: Path, bench: dict[str, Any]) -> dict[str, Any]:
    root = tmp_path / "runs"
    _run(root, "20250101T100000-bench", "bench", SHA, {"bench": bench}, bench["status"])
    return build_report("latest", root, NOW)


def _rerun(bench: dict[str, Any], text: str, single: dict[str, TrainingFinal], sku_name: str | None = None,
           ) -> dict[str, Any]:
    """The record with its run across nodes replaced by `text` (rank 0's output), judged and
    summarised by the bench's own functions; thresholds as the bench records them."""
    out = copy.deepcopy(bench)
    result = parse_training_log(text)
    sku = load_sku(sku_name) if sku_name else None
    if sku is not None:
        out["thresholds"] = {k: t.model_dump(exclude_none=True, exclude_defaults=True) | {"source": t.source}
                             for k, t in sorted(sku.thresholds.items())}
    verdicts = judge_training_multi_node(result, sku, Subject(node="2 nodes"), single)
    keep = [r for r in out["cluster"]["results"] if r["test"] != "training_multi_node"]
    out["cluster"]["results"] = keep + [result_dict(v, "training_multi_node", None, None) for v in verdicts]
    out["training"] = {k: out["training"][k] for k in ("nodes", "endpoint", "head", "versions", "argv")}
    out["training"].update(training_summary(result, "gpu-01", single))
    return out


# ---------------------------------------------------------------- the real CPU run


def test_training_section_of_the_real_cpu_run(tmp_path: Path) -> None:
    bench = _real()
    t = _report(tmp_path, bench)["training"]
    rec = bench["training"]
    assert t["available"] and t["status"] == "pass" and t["subject"] == "2 nodes"
    assert t["nodes"] == ["gpu-01", "gpu-02"] and t["backend"] == "gloo" and t["world_size"] == 2
    # the loss curve: the run across nodes, then each node's own run, every point kept
    assert [s["label"] for s in t["series"]] == ["2 nodes (torchrun)", "gpu-01 alone", "gpu-02 alone"]
    assert t["series"][0]["points"] == rec["loss"] and len(rec["loss"]) == 16
    assert t["series"][1]["points"] == rec["single_node_loss"]["gpu-01"]
    assert t["series"][0]["text"] == "3.61 → 2.724 over 16 steps"
    assert t["loss"]["status"] == "pass" and t["loss"]["threshold"] == "3.235"
    # ranks agree: each rank with its node and checksum, none differs
    assert t["ranks_agree"]["status"] == "pass"
    assert [(k["rank"], k["node"], k["checksum"], k["differs"]) for k in t["ranks"]] == [
        (0, "gpu-01", "638538044dc3b622", False), (1, "gpu-02", "638538044dc3b622", False)]
    # tokens/s: in all, per rank (CPU: no GPU), each node alone
    assert t["tokens_per_s"] == "18,638 tokens/s" and t["tokens_per_s_per_gpu"] == "9,319 tokens/s per rank"
    assert t["single_node"] == [{"node": "gpu-01", "tokens_per_s": "7,975 tokens/s"},
                                {"node": "gpu-02", "tokens_per_s": "4,903 tokens/s"}]
    # gloo on CPU: the scaling efficiency is reported, not judged; MFU not judged either (tiny model)
    s = t["scaling"]
    assert s["status"] == "not-applicable" and not s["judged"] and s["value"] == "2.895 of linear"
    assert s["note"].startswith("reported, not judged: gloo on CPU")
    assert t["mfu"]["status"] == "not-applicable" and "not judged" in t["mfu"]["note"]
    # the versions that ran, the same on both nodes
    assert t["ran"] == {"torch": "2.13.0+cpu", "cuda": "none", "nccl": "none"} and not t["versions_differ"]
    assert [v["node"] for v in t["versions"]] == ["gpu-01", "gpu-02"]


def test_html_markdown_and_json_carry_the_section(tmp_path: Path) -> None:
    data = _report(tmp_path, _real())
    html, md, js = (render(data, f) for f in ("html", "md", "json"))
    # HTML: the section, its figures, the chart inline, the ranks in collapsed details
    section = html[html.index('<section id="training">'):html.index('<section id="metadata">')]
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="loss-chart"' in section
    for text in ("18,638 tokens/s in all", "9,319 tokens/s per rank", "2.895 of linear", "reported, not judged",
                 "torch 2.13.0+cpu, CUDA none, NCCL none", "(the same on every node)", "638538044dc3b622"):
        assert text in section, text
    assert '<details class="training-details" id="training-ranks">' in section  # closed: all agree
    assert 'data-differs="yes"' not in section
    assert html.index('id="summary"') < html.index('id="training-line"') < html.index('id="failures"')
    # Markdown
    md_section = md[md.index("## Training"):md.index("## Failures")]
    assert "| Scaling efficiency | not-applicable | 2.895 of linear; reported, not judged: gloo on CPU" in md_section
    assert "| Ranks agree | pass | 2 ranks, every parameter checksum equal |" in md_section
    assert "| 1 | gpu-02 | vm | 638538044dc3b622 | yes |" in md_section
    assert "- loss, 2 nodes (torchrun): 3.6101, 3.6239," in md_section
    assert "Training across 2 nodes: **pass**, loss 3.61 → 2.724 over 16 steps, ranks agree" in md
    # JSON: the data, no SVG
    doc = json.loads(js)
    assert doc["training"]["ranks"][1]["node"] == "gpu-02" and "training_chart_svg" not in doc
    assert "<svg" not in js


def test_loss_chart_draws_every_series_and_keeps_coinciding_ones_visible(tmp_path: Path) -> None:
    data = _report(tmp_path, _real())
    root = ET.fromstring(data["training_chart_svg"])
    groups = root.findall(f"{SVG}g")
    assert [g.get("data-series") for g in groups] == ["2 nodes (torchrun)", "gpu-01 alone", "gpu-02 alone"]
    # the three runs trained the same seeded model on the same data: their points coincide,
    # and each stays visible by its own dash pattern, shape and larger markers underneath
    lines = [g.find(f"{SVG}polyline") for g in groups]
    assert lines[0].get("points") == lines[1].get("points") == lines[2].get("points")
    assert len({g.get("data-dash") for g in groups}) == 3 and len({g.get("data-shape") for g in groups}) == 3
    assert len({ln.get("stroke") for ln in lines}) == 3
    assert all(len(list(g)) == 1 + 16 for g in groups)  # the line and one marker per step


def test_loss_chart_escapes_labels_and_skips_non_finite_points() -> None:
    svg = loss_chart([{"label": "<script>x</script>", "points": [[0, 3.0], [1, math.nan], [2, 1.0]]},
                      {"label": "empty", "points": []}])
    root = ET.fromstring(svg)  # well-formed: the label is text
    [g] = root.findall(f"{SVG}g")
    assert g.get("data-series") == "<script>x</script>" and "<script>" not in svg
    assert len(g.find(f"{SVG}polyline").get("points").split()) == 2
    assert "no training steps" in loss_chart([])


# ---------------------------------------------------------------- variants through the bench's own functions


def _cpu_output(corrupt_rank: int | None = None) -> str:
    """The real rank-0 output of a two-launcher gloo run (fixtures/training), optionally with one
    rank's parameter checksum changed (what the lab's ranks-disagree fault produces)."""
    lines = (FIX / "torchrun-gloo-2node-pass-cpu-real.stdout").read_text().splitlines()
    final = json.loads(lines[-1])
    for r in final["ranks"]:
        r["node"] = {"node0": "gpu-01", "node1": "gpu-02"}[r["node"]]
    if corrupt_rank is not None:
        final["param_checksum_per_rank"][corrupt_rank] = "ffffffffffffffff"
        final["ranks"][corrupt_rank]["checksum"] = "ffffffffffffffff"
    return "\n".join([*lines[:-1], json.dumps(final)]) + "\n"


def test_the_differing_rank_is_the_same_on_every_run() -> None:
    """Two ranks, two checksums: a tie, so rank 0's is taken as the reference and rank 1 is
    the one marked (the rule was `max` over a set: which rank was marked depended on the
    string hash seed of the process)."""
    final = parse_training_log(_cpu_output(corrupt_rank=1)).final
    assert final is not None and final.majority_checksum == "06fbda26578aca3a"
    final0 = parse_training_log(_cpu_output(corrupt_rank=0)).final
    assert final0 is not None and final0.majority_checksum == "ffffffffffffffff"
    many = TrainingFinal(("b", "a", "a"), 1.0, 1.0, 3, "fp32")
    assert many.majority_checksum == "a"


def test_a_rank_that_differs_is_marked_with_its_node(tmp_path: Path) -> None:
    single = {"gpu-01": parse_training_log(_cpu_output()).final}
    assert single["gpu-01"] is not None
    bench = _rerun(_real(), _cpu_output(corrupt_rank=1), single)  # type: ignore[arg-type]
    data = _report(tmp_path, bench)
    t = data["training"]
    assert t["status"] == "fail" and t["ranks_agree"]["status"] == "fail"
    by_rank = {k["rank"]: k for k in t["ranks"]}
    assert by_rank[1]["differs"] and by_rank[1]["node"] == "gpu-01" and not by_rank[0]["differs"]
    html, md = render(data, "html"), render(data, "md")
    assert '<tr class="rank-row" data-rank="1" data-node="gpu-01" data-differs="yes">' in html
    assert '<details class="training-details" id="training-ranks" open>' in html  # opened: a rank differs
    assert "2 ranks, 1 with another parameter checksum (rank 1 on gpu-01)" in " ".join(html.split())
    assert "| 1 | gpu-01 | vm | ffffffffffffffff | **differs** |" in md
    # the failure is listed with the others, from the bench's verdict
    assert any(f["check"] == "train_ranks_agree" and f["status"] == "fail" for f in data["failures"])


def _gpu_final(tokens_per_s: float) -> TrainingFinal:
    text = (FIX / "ddp-2rank-pass-synthetic.jsonl").read_text().replace('"tokens_per_s": 784000.0',
                                                                      f'"tokens_per_s": {tokens_per_s}')
    final = parse_training_log(text).final
    assert final is not None and not final.on_cpu
    return final


@pytest.mark.parametrize(("alone", "status"), [(800000.0, "pass"), (1100000.0, "fail")])
def test_gpu_scaling_is_judged_against_the_sku_floor_with_its_source(tmp_path: Path, alone: float,
                                                                     status: str) -> None:
    text = (FIX / "ddp-2rank-pass-synthetic.jsonl").read_text()
    bench = _rerun(_real(), text, {"gpu-01": _gpu_final(alone), "gpu-02": _gpu_final(alone)}, "hgx-h100-80gb")
    data = _report(tmp_path, bench)
    s = data["training"]["scaling"]
    assert s["status"] == status and s["judged"]
    assert s["threshold"] == "≥ 0.8 of linear (warn below 0.9)" and "Horovod" in s["source"]
    html, md = render(data, "html"), render(data, "md")
    cell = html[html.index('id="training-scaling"'):]
    cell = cell[:cell.index("</td>")]
    assert "floor ≥ 0.8 of linear (warn below 0.9)" in cell and "Horovod" in cell and "not judged" not in cell
    assert f"| Scaling efficiency | {status} | {s['value']}; floor ≥ 0.8 of linear (warn below 0.9) (source: " in md
    assert data["training"]["tokens_per_s_per_gpu"] == "392,000 tokens/s per GPU"
    mfu = data["training"]["mfu"]
    assert mfu["judged"] and mfu["threshold"].startswith("≥ ") and mfu["value"].endswith("of peak")


def test_versions_per_node_when_they_differ(tmp_path: Path) -> None:
    bench = _real()
    bench["training"]["versions"]["gpu-02"]["torch"] = "2.12.1+cpu"
    data = _report(tmp_path, bench)
    assert data["training"]["versions_differ"]
    html, md = render(data, "html"), render(data, "md")
    assert "<strong>the nodes' PyTorch differ</strong>" in html
    assert '<details class="training-details" id="training-node-versions" open>' in html
    assert '<tr class="version-row" data-node="gpu-02"><td>gpu-02</td><td><code>/tmp/i16tr-torch/bin/python</code>' \
           '</td><td>2.12.1+cpu</td>' in html
    assert "**the nodes' PyTorch differ** (per node below)" in md
    assert "| gpu-02 | /tmp/i16tr-torch/bin/python | 2.12.1+cpu | none | none | 0 |" in md


def test_a_run_that_did_not_start_says_why(tmp_path: Path) -> None:
    """The probe found no PyTorch: no figures, the bench's reason shown (never a pass)."""
    bench = _real()
    bench["training"] = {"nodes": ["gpu-01", "gpu-02"], "endpoint": "127.0.0.1:1", "head": "gpu-01"}
    bench["cluster"]["results"] = [
        {**r, "check": "training", "status": "not-applicable", "value": None, "unit": "",
         "message": "2 nodes: skipped: gpu-02: no PyTorch"}
        for r in bench["cluster"]["results"] if r["check"] == "train_loss_falls"]
    data = _report(tmp_path, bench)
    t = data["training"]
    assert t["status"] == "not-applicable" and not t["series"] and t["scaling"] is None
    assert t["problems"] == [{"status": "not-applicable", "message": "2 nodes: skipped: gpu-02: no PyTorch"}]
    html, md = render(data, "html"), render(data, "md")
    assert "skipped: gpu-02: no PyTorch" in html and "no training steps" not in html
    assert "- not-applicable: 2 nodes: skipped: gpu-02: no PyTorch" in md


def test_outside_text_is_escaped(tmp_path: Path) -> None:
    bad = "<img src=x onerror=alert(1)>|[l](javascript:x)"
    bench = _real()
    t = bench["training"]
    t["ranks"][0]["host"] = bad
    t["versions"]["gpu-01"]["python"] = bad
    t["versions"]["gpu-01"]["torch"] = bad
    t["ran"]["torch"] = bad
    t["single_node_loss"][bad] = t["single_node_loss"].pop("gpu-02")
    t["endpoint"] = bad
    data = _report(tmp_path, bench)
    html, md = render(data, "html"), render(data, "md")
    for text in (html, md):
        assert "<img src=x" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    ET.fromstring(data["training_chart_svg"])  # the label reached the SVG as text
    assert "](javascript:x)" not in md.replace("\\[l](javascript:x)", "")
    row = next(ln for ln in md.splitlines() if ln.startswith("| 0 | gpu-01 |"))
    assert row.count(" | ") == 4  # five cells: the pipe in the host name does not add one
