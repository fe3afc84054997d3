"""The NCCL bus-bandwidth-versus-message-size chart, as an inline SVG string.

No JavaScript and no external assets: the report embeds the returned `<svg>` as is. The
x axis is the message size on a log₂ scale, the y axis the bus bandwidth in GB/s; one
`<polyline>` per series (a node's single-node run, or the multi-node run), and a dashed
line for the single-node threshold when one is given.

Series whose figures coincide (two healthy nodes of one SKU) must all stay visible: each
series has its own colour, dash pattern and marker shape, and markers shrink with the
series index, so a later series drawn over an earlier one leaves the earlier one's larger
hollow markers and dashes showing around it. An emulated series says so in its legend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22")
DASHES = ("", "7 4", "2 3", "10 3 2 3", "4 4", "1 2")
SHAPES = ("circle", "square", "triangle", "diamond", "cross")
WIDTH, HEIGHT = 760, 380
LEFT, RIGHT, TOP, BOTTOM = 64, 190, 28, 52


@dataclass(frozen=True)
class ThresholdLine:
    value: float
    label: str


def size_label(n: float) -> str:
    """8 → '8 B', 1024 → '1 KiB', 8 GiB → '8 GiB'."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            v = n / factor
            return f"{v:g} {unit}"
    return f"{n:g} B"


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _f(x: float) -> str:
    return f"{x:.1f}"


def _marker(shape: str, x: float, y: float, r: float, color: str) -> str:
    """A hollow marker of `shape` centred on (x, y), radius about `r`."""
    style = f'class="marker" fill="#ffffff" fill-opacity="0.6" stroke="{color}" stroke-width="1.5"'
    if shape == "square":
        return f'<rect {style} x="{_f(x - r)}" y="{_f(y - r)}" width="{_f(2 * r)}" height="{_f(2 * r)}"/>'
    if shape == "triangle":
        pts = f"{_f(x)},{_f(y - r)} {_f(x + r)},{_f(y + r)} {_f(x - r)},{_f(y + r)}"
        return f'<polygon {style} points="{pts}"/>'
    if shape == "diamond":
        pts = f"{_f(x)},{_f(y - r)} {_f(x + r)},{_f(y)} {_f(x)},{_f(y + r)} {_f(x - r)},{_f(y)}"
        return f'<polygon {style} points="{pts}"/>'
    if shape == "cross":
        return (f'<path {style} d="M{_f(x - r)},{_f(y - r)} L{_f(x + r)},{_f(y + r)} '
                f'M{_f(x - r)},{_f(y + r)} L{_f(x + r)},{_f(y - r)}"/>')
    return f'<circle {style} cx="{_f(x)}" cy="{_f(y)}" r="{_f(r)}"/>'


def _draw_series(parts: list[str], i: int, label: str, legend: str, emulated: bool,
                 xy: Sequence[tuple[float, float]], legend_x: float) -> None:
    """Series `i`: its line through `xy` (pixels), hollow markers, and its legend entry right of
    the plot. Colour, dash pattern and marker shape differ by index and markers shrink with it,
    so coinciding series all stay visible."""
    color = PALETTE[i % len(PALETTE)]
    pattern = DASHES[i % len(DASHES)]
    dash = f' stroke-dasharray="{pattern}"' if pattern else ""
    shape = SHAPES[i % len(SHAPES)]
    size = max(2.5, 6.0 - 1.2 * i)
    mark = " (emulated)" if emulated else ""
    pts = " ".join(f"{_f(x)},{_f(y)}" for x, y in xy)
    parts.append(f'<g class="series-group" data-series="{escape(label)}" data-shape="{shape}" '
                 f'data-dash="{pattern or "solid"}" data-emulated="{"yes" if emulated else "no"}">')
    parts.append(f'<polyline class="series" data-series="{escape(label)}" fill="none" stroke="{color}" '
                 f'stroke-width="2"{dash} points="{pts}"><title>{escape(label + mark)}</title></polyline>')
    # markers, so a run with a single point still shows and coinciding series stay visible
    parts.extend(_marker(shape, x, y, size, color) for x, y in xy)
    parts.append("</g>")
    legend = legend[:26 - len(mark)] + mark
    ly = TOP + 10 + i * 18
    parts.append(f'<line x1="{legend_x + 6}" y1="{ly}" x2="{legend_x + 34}" y2="{ly}" stroke="{color}" '
                 f'stroke-width="2"{dash}/>')
    parts.append(_marker(shape, legend_x + 20, ly, size, color))
    parts.append(f'<text x="{legend_x + 40}" y="{ly + 4}">{escape(legend)}</text>')


def _svg_open(css_class: str, title: str) -> list[str]:
    """The opening of a chart's SVG (root element, title, white background), as parts."""
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" role="img" '
            f'aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
            f'font-family="sans-serif" font-size="12">')
    return [head, f"<title>{escape(title)}</title>",
            f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>']


def _svg_empty(parts: list[str], message: str) -> str:
    """A chart with nothing to draw: `message` in the middle, the SVG closed."""
    parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" fill="#555">'
                 f"{escape(message)}</text></svg>")
    return "".join(parts)


def nccl_chart(series: Sequence[dict[str, Any]], threshold: ThresholdLine | None = None,
               title: str = "NCCL bus bandwidth vs message size") -> str:
    """SVG for `series` = [{label, test, points: [[size_bytes, busbw_gb_s], …]}, …]."""
    drawn = [s for s in series if any(p[0] > 0 for p in s.get("points", []))]
    parts = _svg_open("nccl-chart", title)
    if not drawn:
        return _svg_empty(parts, "no NCCL results in this run")
    sizes = [p[0] for s in drawn for p in s["points"] if p[0] > 0]
    values = [p[1] for s in drawn for p in s["points"]]
    x_lo, x_hi = math.log2(min(sizes)), math.log2(max(sizes))
    if x_hi - x_lo < 1:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_top = max([*values, threshold.value if threshold else 0.0, 1e-9]) * 1.1
    step = _nice_step(y_top)
    y_top = math.ceil(y_top / step) * step
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(size: float) -> float:
        return LEFT + (math.log2(size) - x_lo) / (x_hi - x_lo) * pw

    def py(v: float) -> float:
        return TOP + ph - (v / y_top) * ph

    parts.append(f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>')
    # y grid and labels
    v = 0.0
    while v <= y_top + 1e-9:
        y = py(v)
        parts.append(f'<line x1="{LEFT}" y1="{_f(y)}" x2="{LEFT + pw}" y2="{_f(y)}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{_f(y + 4)}" text-anchor="end">{v:g}</text>')
        v += step
    # x ticks: the powers of two whose exponent is a multiple of 3 (8 B, 64 B, 512 B, 4 KiB, …)
    for e in range(math.ceil(x_lo), math.floor(x_hi) + 1):
        if e % 3 != 0:
            continue
        x = px(2.0**e)
        parts.append(f'<line x1="{_f(x)}" y1="{TOP + ph}" x2="{_f(x)}" y2="{TOP + ph + 5}" stroke="#333"/>')
        parts.append(f'<text x="{_f(x)}" y="{TOP + ph + 18}" text-anchor="middle">{escape(size_label(2.0**e))}'
                     "</text>")
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    parts.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 12}" text-anchor="middle">message size (log scale)'
                 "</text>")
    parts.append(f'<text transform="translate(16 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">'
                 "bus bandwidth (GB/s)</text>")
    if threshold is not None:
        y = py(threshold.value)
        parts.append(f'<line class="threshold" x1="{LEFT}" y1="{_f(y)}" x2="{LEFT + pw}" y2="{_f(y)}" '
                     'stroke="#d62728" stroke-dasharray="6 4" stroke-width="1.5"/>')
        parts.append(f'<text x="{LEFT + pw - 4}" y="{_f(y - 5)}" text-anchor="end" fill="#d62728">'
                     f"{escape(threshold.label)}</text>")
    for i, s in enumerate(drawn):
        test = str(s.get("test", ""))
        legend = str(s["label"]) if test.startswith("all_reduce") else f"{s['label']} · {test}"
        _draw_series(parts, i, f"{s['label']} — {test}".rstrip(" —"), legend, bool(s.get("emulated")),
                     [(px(p[0]), py(p[1])) for p in sorted(s["points"]) if p[0] > 0], LEFT + pw)
    parts.append("</svg>")
    return "".join(parts)


def loss_chart(series: Sequence[dict[str, Any]], title: str = "Training loss per step") -> str:
    """SVG for `series` = [{label, points: [[step, loss], …], emulated?}, …]: linear step and
    loss axes (the loss from 0), one line per run (the run across nodes, each node alone), drawn
    like the NCCL chart's series so that coinciding runs all stay visible. Non-finite losses
    are left out of the line (the verdict fails them)."""
    drawn = [{**s, "points": [p for p in s.get("points", []) if math.isfinite(p[1])]} for s in series]
    drawn = [s for s in drawn if s["points"]]
    parts = _svg_open("loss-chart", title)
    if not drawn:
        return _svg_empty(parts, "no training steps in this run")
    steps = [p[0] for s in drawn for p in s["points"]]
    x_lo, x_hi = min(steps), max(steps)
    if x_hi - x_lo < 1:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_top = max(max(p[1] for s in drawn for p in s["points"]) * 1.1, 1e-9)
    step = _nice_step(y_top)
    y_top = math.ceil(y_top / step) * step
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x_lo) / (x_hi - x_lo) * pw

    def py(v: float) -> float:
        return TOP + ph - (max(v, 0.0) / y_top) * ph

    parts.append(f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>')
    v = 0.0
    while v <= y_top + 1e-9:
        y = py(v)
        parts.append(f'<line x1="{LEFT}" y1="{_f(y)}" x2="{LEFT + pw}" y2="{_f(y)}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{_f(y + 4)}" text-anchor="end">{v:g}</text>')
        v += step
    x_step = max(1, int(_nice_step(x_hi - x_lo)))
    tick = math.ceil(x_lo / x_step) * x_step
    while tick <= x_hi:
        x = px(tick)
        parts.append(f'<line x1="{_f(x)}" y1="{TOP + ph}" x2="{_f(x)}" y2="{TOP + ph + 5}" stroke="#333"/>')
        parts.append(f'<text x="{_f(x)}" y="{TOP + ph + 18}" text-anchor="middle">{tick:g}</text>')
        tick += x_step
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    parts.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 12}" text-anchor="middle">step</text>')
    parts.append(f'<text transform="translate(16 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">loss</text>')
    for i, s in enumerate(drawn):
        _draw_series(parts, i, str(s["label"]), str(s["label"]), bool(s.get("emulated")),
                     [(px(p[0]), py(p[1])) for p in sorted(s["points"])], LEFT + pw)
    parts.append("</svg>")
    return "".join(parts)
