"""The HTML report rendered by headless Chromium (Debian package `chromium`).

Renders a report built from fixture runs, dumps the DOM Chromium produced and takes a
screenshot (kept under test-artifacts/, git-ignored). Skipped with a reason when no
chromium binary is installed.
"""

from __future__ import annotations

import importlib.util
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
