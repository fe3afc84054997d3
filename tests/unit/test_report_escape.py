"""Issue 17 item 9: outside text reaches the Markdown report as text (the report's own
fixtures: tests/unit/test_report_build.py)."""

from __future__ import annotations

from pathlib import Path

from gpuctl.report.gather import build_report
from gpuctl.report.render import _md, render
from tests.unit.test_report_build import NOW, runs  # noqa: F401  (runs: the report fixture)


def test_md_filter_escapes_html_links_and_table_breaks() -> None:
    assert _md("<script>x</script>") == "&lt;script>x&lt;/script>"
    assert _md(">= 460") == ">= 460"
    assert _md("a & b") == "a &amp; b"
    assert _md("[t](javascript:x) ![i](u) `c`") == "\\[t](javascript:x) !\\[i](u) \\`c\\`"
    assert _md("a|b\nc\\d") == "a\\|b c\\\\d"


def test_markdown_escapes_tool_text(runs: Path) -> None:  # noqa: F811
    """Issue 17 item 9: outside text (tool output, inventory names) reaches the Markdown
    report as text, never as raw HTML, a link, an image or a broken table."""
    data = build_report("20250101T100000-bench", runs, NOW)
    data["failures"][0]["message"] = "<script>alert(1)</script> [click](javascript:x) ![i](http://t/x.png) a|b `c`"
    data["failures"][0]["found"] = "<img src=x onerror=alert(1)>"
    data["title"] = "Acceptance report — <b>x</b>"
    md = render(data, "md")
    assert "<script" not in md and "<img" not in md and "<b>" not in md
    assert "&lt;script>alert(1)&lt;/script>" in md
    assert " [click](" not in md and "![i](" not in md and " \\[click](javascript:x)" in md
    row = next(ln for ln in md.splitlines() if "alert(1)&lt;/script" in ln)
    assert row.count(" | ") == 7  # eight cells: a|b does not add one
