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
from gpuctl.kinds import emulated_source
from gpuctl.report.chart import nccl_chart, size_label
from gpuctl.report.gather import build_report, find_stages
from gpuctl.report.render import render
from gpuctl.runrecord import RunRecord
from tests.unit.lab_local import real_outputs_node, standin_node

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
                     "expected": "x16", "found": "x8 (0000:3b:00.0)", "remediation": "reseat_or_replace",
                     "emulated": ""}]
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
    lines = root.findall(f".//{ns}polyline")
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


# ---------------------------------------------------------------- emulated figures (issue 20 item 1)


def _bench_and_report(tmp_path: Path, node: Any) -> tuple[Any, dict[str, Any], dict[str, str]]:
    inventory, env = node(tmp_path)
    res = CliRunner(env=env).invoke(main, ["bench", str(inventory)])
    data = build_report("latest", tmp_path / "runs", NOW)
    return res, data, {fmt: render(data, fmt) for fmt in ("html", "md", "json")}


def test_lab_report_marks_every_emulated_figure(tmp_path: Path) -> None:
    """A bench run against the lab's real stand-in tools (labhw.py on an @local node): every
    figure they gave is marked in JSON, HTML, Markdown and on the terminal, with a banner."""
    res, data, out = _bench_and_report(tmp_path, standin_node)
    rows = data["bench"]["results"] + data["bench"]["cluster_results"]
    from_standins = [r for r in rows if r["test"] in ("all_reduce", "bwprobe") and r["value"]]
    assert len(from_standins) > 60  # the NCCL figures and 8 GPUs' h2d, d2h, HBM and 56 P2P rows
    assert all("lab stand-in package" in r["emulated"] for r in from_standins)
    # rows that no stand-in produced (fio refused: /raid is not a mount here) are not marked
    assert all(not r["emulated"] for r in rows if r["test"].startswith("fio"))
    assert data["title"].startswith("Lab report") and "acceptance" not in data["title"].split("(")[0].lower()
    doc = json.loads(out["json"])
    assert doc["emulated"]["count"] == sum(1 for r in rows if r["emulated"]) and doc["emulated"]["reasons"]
    assert all(s["emulated"] for s in doc["bench"]["series"])
    # HTML: a banner, a marker on every emulated detail row, the summary and the chart say so
    html = out["html"]
    assert 'id="emulated-banner"' in html
    detail = re.findall(r'<tr class="detail-row" data-test="(all_reduce|bwprobe)"[^>]*data-value="([^"]*)" '
                        r'data-emulated="(yes|no)"', html)
    assert detail and all(e == "yes" for _, value, e in detail if value)
    assert 'data-emulated="yes"' in nccl_chart(data["bench"]["series"]) and "(emulated)" in html
    # Markdown: the banner, and every row of those tests carries the marker
    md = out["md"]
    assert "**EMULATED:" in md
    md_rows = [line for line in md.splitlines() if line.startswith(("| gpu-01 | all_reduce |", "| gpu-01 GPU"))]
    assert len(md_rows) >= 60 and all("*(emulated)*" in line for line in md_rows)
    # the terminal: a banner and a marker per row
    assert "EMULATED" in res.stdout and " emu" in res.stdout


def test_report_from_real_outputs_carries_no_mark(tmp_path: Path) -> None:
    """The same run with real recorded outputs (an 8-GPU H100 all_reduce) in place of the
    stand-ins: no banner, no marker, titled an acceptance report."""
    res, data, out = _bench_and_report(tmp_path, real_outputs_node)
    busbw = [r for r in data["bench"]["results"] if r["check"] == "all_reduce_busbw_gb_s"]
    assert busbw and busbw[0]["value"] and not busbw[0]["emulated"]
    assert data["emulated"] is None and data["title"].startswith("Acceptance report")
    assert json.loads(out["json"])["emulated"] is None
    assert 'id="emulated-banner"' not in out["html"] and 'data-emulated="yes"' not in out["html"]
    assert "emulated" not in out["md"].lower()
    assert "EMULATED" not in res.stdout and " emu " not in res.stdout


def test_real_h200_outputs_are_not_emulated() -> None:
    h200 = Path("/work/shared/fixtures/h200-ubuntu2404")
    texts = [p.read_text() for p in sorted(h200.glob("*.txt"))] if h200.is_dir() else []
    texts += [p.read_text() for p in sorted((DATA.parents[0] / "fixtures" / "nvidia_smi").glob("*h200*"))]
    assert texts
    for kind in ("nccl", "bandwidth", "ib_write_bw", "fio"):
        assert all(emulated_source(kind, t) is None for t in texts)


@pytest.mark.parametrize("kind, stdout, stderr, expected", [
    ("ib_write_bw", " Dual-port       : OFF\t\tDevice         : rxe0\n", "", "software RDMA device rxe0"),
    ("ib_write_lat", " Dual-port       : OFF\t\tDevice         : siw1\n", "", "software RDMA device siw1"),
    ("ib_write_bw", " Dual-port       : OFF\t\tDevice         : mlx5_0\n", "", None),
    ("fio", "{}", 'gpuctl-device: NAME="md0" MODEL=""\ngpuctl-device: NAME="nvme0n1" MODEL="QEMU NVMe Ctrl"\n',
     "emulated disk nvme0n1 (QEMU NVMe Ctrl)"),
    ("fio", "{}", 'gpuctl-device: NAME="nvme0n1" MODEL="SAMSUNG MZQL23T8HCLS-00A07"\n', None),
    ("nccl", "# nThread 1\n", "gpuctl-lab-standin: all_reduce_perf from the lab stand-in package nccl-tests "
     "2.17.6-1; emulated output\n", "all_reduce_perf from the lab stand-in package nccl-tests 2.17.6-1"),
])
def test_provenance_from_the_tools_output(kind: str, stdout: str, stderr: str, expected: str | None) -> None:
    got = emulated_source(kind, stdout, stderr)
    assert (got is None) if expected is None else (got is not None and expected in got)


def test_real_perftest_fixtures_are_not_emulated() -> None:
    for path in sorted((DATA.parents[0] / "fixtures" / "perftest").glob("ib_write_bw-*.txt")):
        assert emulated_source("ib_write_bw", path.read_text()) is None, path.name


def test_each_nodes_row_shows_that_nodes_threshold(tmp_path: Path) -> None:
    """Issue 18: the report's thresholds came from the first node only. A node whose effective
    threshold differs (its own `thresholds` in the bench stage) shows its own figure."""
    bench = _bench()
    own = {**bench["thresholds"]["all_reduce_busbw_gb_s"], "min": 300.0, "warn_below": 320.0}
    bench["hosts"]["gpu-02"]["thresholds"] = {**bench["thresholds"], "all_reduce_busbw_gb_s": own}
    root = tmp_path / "runs"
    _run(root, "20250101T100000-bench", "bench", SHA, {"bench": bench})
    data = build_report("latest", root, now=NOW)
    rows = {r["node"]: r for r in data["bench"]["results"] if r["check"] == "all_reduce_busbw_gb_s"}
    assert rows["gpu-01"]["threshold"].startswith("≥ 460 GB/s")
    assert rows["gpu-02"]["threshold"] == "≥ 300 GB/s (warn below 320)"
    summary = next(s for s in data["bench"]["summary"] if s["check"] == "all_reduce_busbw_gb_s")
    assert "≥ 300 GB/s" in summary["threshold"] and "≥ 460 GB/s" in summary["threshold"]
