"""The acceptance report: which runs it gathers, the chart, and golden Markdown/JSON per case.

Golden files live in tests/data/report/golden/; regenerate them after an intended change
with `GPUCTL_UPDATE_GOLDEN=1 pytest tests/unit/test_report_build.py` and review the diff.
Times are fixed in the fixture runs and the report's own time is passed in; the gpuctl
version is normalised to <version>.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuctl import __version__
from gpuctl.checks.model import CheckResult, CheckStatus, HostResult, VerifyResult
from gpuctl.cli.main import main
from gpuctl.errors import InputError
from gpuctl.report.chart import nccl_chart, size_label
from gpuctl.report.gather import build_report, find_stages
from gpuctl.report.render import render
from gpuctl.runrecord import RunRecord

DATA = Path(__file__).parents[1] / "data" / "report"
GOLDEN = DATA / "golden"
SHA = "0" * 64
NOW = "2025-01-01T12:00:00+00:00"


def _run(root: Path, run_id: str, command: str, sha: str, stages: dict[str, Any], status: str = "pass") -> Path:
    path = root / run_id
    (path / "stages").mkdir(parents=True)
    stamp = f"2025-01-01T{run_id[9:11]}:{run_id[11:13]}:00+00:00"
    meta = {"id": run_id, "command": command, "argv": ["gpuctl", command], "gpuctl_version": "0.0.test",
            "started": stamp, "finished": stamp.replace(":00+", ":30+"), "status": status,
            "inventory": {"path": "inventories/lab.yaml", "sha256": sha}}
    (path / "run.json").write_text(json.dumps(meta))
    for name, data in stages.items():
        (path / "stages" / f"{name}.json").write_text(json.dumps(data))
    return path


def _verify(fail_pcie_on: str | None) -> dict[str, Any]:
    hosts = {}
    for host in ("gpu-01", "gpu-02"):
        checks = [
            CheckResult(host, "nvidia_driver.packages_pinned[nvidia-open]", "nvidia_driver", CheckStatus.PASS),
            CheckResult(host, "nvidia_driver.gpu_count", "nvidia_driver", CheckStatus.PASS),
            CheckResult(host, "network.vlan_up[eth1.100]", "network", CheckStatus.PASS),
            CheckResult(host, "fabricmanager.active", "fabricmanager", CheckStatus.PASS),
            CheckResult(host, "nvme_raid.clean", "nvme_raid", CheckStatus.PASS),
        ]
        if host == fail_pcie_on:
            checks.append(CheckResult(host, "nvidia_driver.gpu_pcie_width[gpu3]", "nvidia_driver", CheckStatus.FAIL,
                                      expected="x16", found="x8 (0000:3b:00.0)", remediation="reseat_or_replace",
                                      message="GPU 3 (0000:3b:00.0) PCIe link trained at x8, expected x16"))
        hosts[host] = HostResult(host, checks)
    return VerifyResult(hosts, duration_s=12.0, run_id="20250101T093000-verify").as_dict()


def _bench() -> dict[str, Any]:
    return json.loads((DATA / "bench-lab-stand-in.json").read_text())


@pytest.fixture()
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    _run(root, "20250101T090000-provision", "provision", SHA, {"provision": {"status": "pass", "hosts": {}}})
    _run(root, "20250101T093000-verify", "verify", SHA, {"verify": _verify("gpu-02")}, "fail")
    # another inventory's newer verify run: must not leak into this cluster's report
    _run(root, "20250101T095000-verify", "verify", "f" * 64, {"verify": _verify(None)})
    _run(root, "20250101T100000-bench", "bench", SHA, {"bench": _bench()}, "fail")
    return root


def _normalise(text: str) -> str:
    return text.replace(__version__, "<version>")


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    text = _normalise(text)
    if os.environ.get("GPUCTL_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with GPUCTL_UPDATE_GOLDEN=1"
    assert text == path.read_text()


# ---------------------------------------------------------------- gathering


def test_stages_come_from_runs_of_the_same_inventory(runs: Path) -> None:
    bench = RunRecord.open("20250101T100000-bench", runs)
    chosen = find_stages(bench, runs)
    assert {k: v.id for k, v in chosen.items()} == {
        "provision": "20250101T090000-provision", "verify": "20250101T093000-verify",
        "bench": "20250101T100000-bench"}


def test_latest_is_the_newest_run(runs: Path) -> None:
    data = build_report("latest", runs, NOW)
    assert data["meta"]["report_run"] == "20250101T100000-bench"
    assert data["verify"]["run_id"] == "20250101T093000-verify"


def test_report_content(runs: Path) -> None:
    data = build_report("20250101T100000-bench", runs, NOW)
    assert data["cluster"]["nodes"] == ["gpu-01", "gpu-02"] and data["cluster"]["sku"] == "hgx-h100-80gb"
    assert data["status"] == "fail"
    comps = {c["component"]: c for c in data["matrix"]["components"]}
    assert comps["driver"]["packages"] and all("=" in p["pin"] for p in comps["driver"]["packages"])
    rows = {r["node"]: r for r in data["verify"]["rows"]}
    assert rows["gpu-02"]["failed"] == 1 and rows["gpu-01"]["failed"] == 0
    pcie = [f for f in data["failures"] if "pcie" in f["check"]]
    assert pcie == [{"source": "verify", "node": "gpu-02", "check": "nvidia_driver.gpu_pcie_width[gpu3]",
                     "status": "fail", "message": "GPU 3 (0000:3b:00.0) PCIe link trained at x8, expected x16",
                     "expected": "x16", "found": "x8 (0000:3b:00.0)", "remediation": "reseat_or_replace"}]
    busbw = [b for b in data["bench"]["results"] if b["check"] == "all_reduce_busbw_gb_s"]
    assert busbw[0]["threshold"] == "≥ 460 GB/s (warn below 480)" and busbw[0]["status"] == "fail"
    train = [b for b in data["bench"]["results"] if b["test"] == "training"]
    assert train[0]["status"] == "skipped"
    assert data["remediation_counts"]["reseat_or_replace"] >= 1


def test_no_results_is_an_input_error(tmp_path: Path) -> None:
    _run(tmp_path, "20250101T090000-provision", "provision", SHA, {})
    with pytest.raises(InputError, match="no verify or bench results"):
        build_report("latest", tmp_path, NOW)


# ---------------------------------------------------------------- chart


def test_chart_one_polyline_per_series_and_valid_svg() -> None:
    series = [{"label": "gpu-01", "test": "all_reduce", "points": [[8, 0.1], [1024, 5.0], [1 << 30, 230.0]]},
              {"label": "gpu-02", "test": "all_reduce", "points": [[8, 0.1], [1024, 4.0], [1 << 30, 120.0]]},
              {"label": "2 nodes <&>", "test": "all_reduce_multi_node", "points": [[8, 0.05], [1 << 30, 90.0]]}]
    svg = nccl_chart(series)
    root = ET.fromstring(svg)  # well-formed XML, labels escaped
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert [p.get("data-series") for p in lines] == ["gpu-01 — all_reduce", "gpu-02 — all_reduce",
                                                       "2 nodes <&> — all_reduce_multi_node"]
    assert len(lines[0].get("points").split()) == 3
    # higher bandwidth is higher on the page (smaller y)
    y_last = [float(p.get("points").split()[-1].split(",")[1]) for p in lines]
    assert y_last[0] < y_last[1] < y_last[2]
    assert "1 GiB" in svg and "8 B" in svg


def test_chart_without_results_says_so() -> None:
    svg = nccl_chart([])
    assert "no NCCL results" in svg and "<polyline" not in svg


@pytest.mark.parametrize("n, label", [(8, "8 B"), (1024, "1 KiB"), (1 << 20, "1 MiB"), (8 << 30, "8 GiB")])
def test_size_label(n: int, label: str) -> None:
    assert size_label(n) == label


# ---------------------------------------------------------------- rendering


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_golden_lab_stand_in(runs: Path, fmt: str) -> None:
    _golden(f"lab-stand-in.{fmt}", render(build_report("20250101T100000-bench", runs, NOW), fmt))


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_golden_verify_only(tmp_path: Path, fmt: str) -> None:
    _run(tmp_path, "20250101T093000-verify", "verify", SHA, {"verify": _verify(None)})
    _golden(f"verify-only.{fmt}", render(build_report("latest", tmp_path, NOW), fmt))


def test_html_is_self_contained_with_chart_and_every_node(runs: Path) -> None:
    html = render(build_report("20250101T100000-bench", runs, NOW), "html")
    assert html.startswith("<!DOCTYPE html>")
    assert "<script" not in html and not re.search(r"(src|href)=\"https?://", html)
    assert html.count('<polyline class="series"') == 3  # two nodes + the multi-node run
    for node in ("gpu-01", "gpu-02"):
        assert f'<tr class="node-row" data-node="{node}">' in html
    assert "PCIe link trained at x8" in html and "skipped: no PyTorch" in html


def test_html_escapes_tool_text(runs: Path) -> None:
    data = build_report("20250101T100000-bench", runs, NOW)
    data["failures"][0]["message"] = "<img src=x onerror=alert(1)>"
    html = render(data, "html")
    assert "<img src=x" not in html and "&lt;img src=x" in html


def test_cli_report_formats(runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(runs))
    r = CliRunner().invoke(main, ["report", "latest", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["cluster"]["name"] == "lab"
    out = tmp_path / "report.html"
    r = CliRunner().invoke(main, ["report", "20250101T100000-bench", "-o", str(out)])
    assert r.exit_code == 0 and out.read_text().startswith("<!DOCTYPE html>")
    r = CliRunner().invoke(main, ["report", "no-such-run"])
    assert r.exit_code == 2 and "not a run folder" in r.output
