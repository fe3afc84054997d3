"""The HTML report rendered by headless Chromium (Debian package `chromium`).

Renders a report built from fixture runs, dumps the DOM Chromium produced and takes a
screenshot (kept under test-artifacts/, git-ignored). Skipped with a reason when no
chromium binary is installed.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gpuctl.report.gather import build_report
from gpuctl.report.render import render


def _unit_helpers() -> ModuleType:
    """The fixture-run builders of tests/unit/test_report_build.py (loaded by path)."""
    path = Path(__file__).parents[1] / "unit" / "test_report_build.py"
    spec = importlib.util.spec_from_file_location("gpuctl_report_unit_helpers", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


H = _unit_helpers()

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install chromium)"),
]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    root = tmp / "runs"
    H._run(root, "20250101T093000-verify", "verify", H.SHA, {"verify": H._verify("gpu-02")}, "fail")
    H._run(root, "20250101T100000-bench", "bench", H.SHA, {"bench": H._bench()}, "fail")
    html = tmp / "report.html"
    html.write_text(render(build_report("latest", root, H.NOW), "html"))
    return html


def test_dom_has_chart_and_every_node(report_html: Path, tmp_path: Path) -> None:
    proc = _chromium(tmp_path, "--dump-dom", report_html.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "<svg" in dom and 'class="nccl-chart"' in dom
    series = re.findall(r'<polyline class="series" data-series="([^"]+)"', dom)
    assert series == ["gpu-01 — all_reduce", "gpu-02 — all_reduce", "2 nodes — all_reduce_multi_node"]
    for node in ("gpu-01", "gpu-02"):
        assert f'<tr class="node-row" data-node="{node}">' in dom
        assert f'<tr class="bench-node" data-node="{node}">' in dom
    assert re.search(r'id="overall-status"[^>]*>FAIL<', dom)
    assert "PCIe link trained at x8" in dom


def test_screenshot(report_html: Path, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    proc = _chromium(tmp_path, "--window-size=1280,2400", f"--screenshot={shot}", report_html.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


# ---------------------------------------------------------------- layout (issue 20 item 3)

# Injected into a copy of the report (the report itself has no scripts): opens every
# <details>, then measures what Chromium laid out and writes it into <pre id="layout">.
PROBE = """
<script>
window.addEventListener("load", () => {
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const vw = document.documentElement.clientWidth;
  const wide = [];
  document.querySelectorAll("table, figure, svg, section, pre, div").forEach(el => {
    const r = el.getBoundingClientRect();
    if (r.right > vw + 0.5 || el.scrollWidth > el.clientWidth + 1) {
      wide.push((el.id || el.className || el.tagName) + " " + Math.round(r.right));
    }
  });
  const series = [...document.querySelectorAll("g.series-group")].map(g => {
    const line = g.querySelector("polyline");
    const box = line.getBBox();
    const markers = [...g.querySelectorAll(".marker")].map(m => {
      const b = m.getBBox();
      return [b.x + b.width / 2, b.y + b.height / 2, b.width];
    });
    return {series: g.dataset.series, shape: g.dataset.shape, dash: g.dataset.dash, length: line.getTotalLength(),
            width: box.width, height: box.height, stroke: getComputedStyle(line).stroke, markers: markers};
  });
  const out = document.createElement("pre");
  out.id = "layout";
  out.textContent = JSON.stringify({viewport: vw, scrollWidth: document.documentElement.scrollWidth,
                                    wide: wide, series: series});
  document.body.appendChild(out);
});
</script>
"""


def _probe(report: Path, tmp_path: Path) -> dict:
    probed = tmp_path / "probed.html"
    probed.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    proc = _chromium(tmp_path, "--window-size=1280,2000", "--virtual-time-budget=5000", "--dump-dom",
                     probed.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="layout">(.*?)</pre>', proc.stdout, re.S)
    assert m, "the layout probe did not run"
    import html as htmlmod
    return json.loads(htmlmod.unescape(m.group(1)))


@pytest.fixture(scope="module")
def lab_report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of a bench run against the lab's stand-in tools (8 GPUs: 56 P2P rows) and a
    verify run of the same inventory over all 15 roles with a long failure message."""
    from click.testing import CliRunner

    from gpuctl.checks.model import CheckResult, CheckStatus, HostResult, VerifyResult
    from gpuctl.cli.main import main
    from gpuctl.runrecord import sha256_file
    from tests.unit.lab_local import standin_node

    tmp = tmp_path_factory.mktemp("lab-report")
    inventory, env = standin_node(tmp)
    CliRunner(env=env).invoke(main, ["bench", str(inventory)])
    # a verify run of the same inventory over every role (the node-checks table is as wide as
    # the real one: one column per role), with one long failure message
    roles = ("base", "nvidia_repo", "nvidia_driver", "fabricmanager", "cuda", "cudnn", "nccl", "dcgm", "ofed",
             "peermem", "gds", "network", "nvme_raid", "lustre_client", "bench_tools")
    checks = [CheckResult("gpu-01", f"{role}.installed", role, CheckStatus.PASS) for role in roles]
    checks.append(CheckResult("gpu-01", "nvidia_driver.gpu_pcie_width[gpu3]", "nvidia_driver", CheckStatus.FAIL,
                              expected="x16", found="x8 (0000:3b:00.0)", remediation="reseat_or_replace",
                              message="GPU 3 (0000:3b:00.0) PCIe link trained at x8, expected x16; "
                                      "see /sys/bus/pci/devices/0000:3b:00.0/current_link_width" * 2))
    verify = VerifyResult({"gpu-01": HostResult("gpu-01", checks)}, 1.0, "20250101T093000-verify").as_dict()
    H._run(tmp / "runs", "20250101T093000-verify", "verify", sha256_file(inventory), {"verify": verify}, "fail")
    html = tmp / "lab-report.html"
    html.write_text(render(build_report("latest", tmp / "runs", H.NOW), "html"))
    return html


@pytest.fixture(scope="module")
def training_report_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of the real bench record of the two-launcher training run (gloo on this
    machine's CPU: tests/data/report/SOURCES.md), one rank's host name made long, and a verify
    run of the same inventory."""
    tmp = tmp_path_factory.mktemp("training-report")
    bench = json.loads((H.DATA / "bench-training-cpu-real.json").read_text())
    bench["training"]["ranks"][1]["host"] = "a-very-long-host-name-" * 6
    H._run(tmp / "runs", "20250101T093000-verify", "verify", H.SHA, {"verify": H._verify("gpu-02")}, "fail")
    H._run(tmp / "runs", "20250101T100000-bench", "bench", H.SHA, {"bench": bench})
    html = tmp / "training-report.html"
    html.write_text(render(build_report("latest", tmp / "runs", H.NOW), "html"))
    return html


def test_training_chart_drawn_with_every_series_visible(training_report_html: Path, tmp_path: Path) -> None:
    """Issue 16 item 6: the loss chart is laid out by Chromium: one drawn line per run (the run
    across both nodes, each node alone); the three runs' losses coincide (same seed, same data)
    and all three stay visible."""
    layout = _probe(training_report_html, tmp_path)
    series = layout["series"]
    assert [s["series"] for s in series] == ["2 nodes (torchrun)", "gpu-01 alone", "gpu-02 alone"]
    for s in series:
        assert len(s["markers"]) == 16 and all(m[2] > 3 for m in s["markers"]), s["series"]
        assert s["length"] > 300 and s["width"] > 300 and s["height"] > 20, s["series"]
    for key in ("dash", "stroke", "shape"):
        assert len({s[key] for s in series}) == 3, key
    for a, b in itertools.pairwise(series):  # coinciding points, the earlier markers larger
        assert [[round(c, 1) for c in m[:2]] for m in a["markers"]] == [[round(c, 1) for c in m[:2]]
                                                                        for m in b["markers"]]
        assert min(m[2] for m in a["markers"]) > max(m[2] for m in b["markers"])
    proc = _chromium(tmp_path, "--dump-dom", training_report_html.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert dom.index('id="training-line"') < dom.index('id="failures"') < dom.index('<section id="training">')
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="loss-chart"' in dom
    assert re.findall(r'<tr class="rank-row" data-rank="(\d)" data-node="([^"]+)" data-differs="(\w+)"', dom) == [
        ("0", "gpu-01", "no"), ("1", "gpu-02", "no")]


def test_screenshot_of_the_training_report(training_report_html: Path, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "training-report-1280.png"
    shot.unlink(missing_ok=True)
    proc = _chromium(tmp_path, "--window-size=1280,3000", f"--screenshot={shot}", training_report_html.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_no_horizontal_overflow_at_1280(report_html: Path, lab_report_html: Path, training_report_html: Path,
                                        tmp_path: Path) -> None:
    for report in (report_html, lab_report_html, training_report_html):
        layout = _probe(report, tmp_path)
        assert layout["viewport"] == 1280
        assert layout["scrollWidth"] <= layout["viewport"], layout["wide"]
        assert layout["wide"] == [], report.name


def test_every_series_drawn_and_visible_when_figures_coincide(report_html: Path, tmp_path: Path) -> None:
    layout = _probe(report_html, tmp_path)
    series = layout["series"]
    assert [s["series"] for s in series] == ["gpu-01 — all_reduce", "gpu-02 — all_reduce",
                                            "2 nodes — all_reduce_multi_node"]
    for s in series:  # a line through its points, or (one message size) its one marker
        assert s["markers"] and all(m[2] > 3 for m in s["markers"]), s["series"]
        assert len(s["markers"]) == 1 or (s["length"] > 100 and s["width"] > 100), s["series"]
    a, b = series[0], series[1]
    # the two nodes printed the same output: their lines coincide point for point ...
    assert [[round(c, 1) for c in m[:2]] for m in a["markers"]] == [[round(c, 1) for c in m[:2]] for m in b["markers"]]
    # ... and both stay visible: different dash pattern, colour and marker shape, and the
    # earlier series' markers are larger than the later ones drawn over them
    assert a["dash"] != b["dash"] and a["stroke"] != b["stroke"] and a["shape"] != b["shape"]
    assert min(m[2] for m in a["markers"]) > max(m[2] for m in b["markers"])


_ORDER = ("fail", "error", "warn", "pass")


def _expected_status(statuses: list[str]) -> str:
    judged = [s for s in _ORDER if s in statuses]
    if judged:
        return judged[0]
    return next(s for s in ("no-threshold", "skipped", "not-applicable") if s in statuses)


def test_summary_matches_the_details(report_html: Path, lab_report_html: Path, tmp_path: Path) -> None:
    for report in (report_html, lab_report_html):
        proc = _chromium(tmp_path, "--dump-dom", report.as_uri())
        assert proc.returncode == 0, proc.stderr[-2000:]
        dom = proc.stdout
        summary = re.findall(r'<tr class="summary-row" data-test="([^"]*)" data-check="([^"]*)" '
                             r'data-status="([^"]*)"\s+data-min="([^"]*)" data-max="([^"]*)"\s+'
                             r'data-subjects="(\d+)"', dom)
        details = re.findall(r'<tr class="detail-row" data-test="([^"]*)" data-check="([^"]*)" '
                             r'data-status="([^"]*)"\s+data-value="([^"]*)"', dom)
        assert summary and details
        by: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for test, check, status, value in details:
            by.setdefault((test, check), []).append((status, value))
        assert {(t, c) for t, c, *_ in summary} == set(by)
        for test, check, status, lo, hi, n in summary:
            rows = by[(test, check)]
            assert int(n) == len(rows), (test, check)
            assert status == _expected_status([s for s, _ in rows]), (test, check)
            values = [float(v) for _, v in rows if v]
            if values:
                assert float(lo) == min(values) and float(hi) == max(values), (test, check)
            else:
                assert lo == hi == "", (test, check)
        # the summary comes first: before any per-subject row
        assert dom.index('id="check-summary"') < dom.index('class="detail-row"')
        # the per-GPU and per-pair rows are in collapsed <details>
        assert re.search(r'<details class="bench-details" data-node="gpu-01">', dom)


def test_screenshot_of_the_lab_report(lab_report_html: Path, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "lab-report-1280.png"
    shot.unlink(missing_ok=True)
    proc = _chromium(tmp_path, "--window-size=1280,2200", f"--screenshot={shot}", lab_report_html.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
