"""nvbandwidth and gpuctl-bwprobe parsers (tests/data/fixtures/bandwidth/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.parsers.bandwidth import parse_bandwidth, parse_bwprobe, parse_nvbandwidth

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "bandwidth"


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_nvbandwidth_7gpu_h2d_d2h() -> None:
    r = parse_bandwidth(text("nvbandwidth-7gpu-h2d-d2h-public.txt"))
    assert (r.source, r.version, len(r.gpus)) == ("nvbandwidth", "v0.10.0", 7)
    assert [g.h2d_gb_s for g in r.gpus] == [55.59, 55.60, 55.60, 55.59, 55.58, 55.60, 55.58]
    assert r.gpus[6].d2h_gb_s == 56.92
    assert r.gpus[0].hbm_copy_gb_s is None and dict(r.gpus[0].p2p_gb_s) == {}
    assert [m.sum_gb_s for m in r.matrices] == [389.15, 399.86]


def test_nvbandwidth_local_copy_is_doubled_and_p2p_read() -> None:
    r = parse_nvbandwidth(text("nvbandwidth-2gpu-full-synthetic.txt"))
    g0, g1 = r.gpus
    assert g0.hbm_copy_gb_s == pytest.approx(2 * 1402.13)  # read + write bytes
    assert dict(g0.p2p_gb_s) == {1: 376.54}
    assert dict(g1.p2p_gb_s) == {0: 377.02}
    assert (g1.h2d_gb_s, g1.d2h_gb_s) == (55.18, 54.97)


def test_probe_json() -> None:
    r = parse_bandwidth(text("bwprobe-h200-1gpu-synthetic.json"))
    (g,) = r.gpus
    assert r.source == "gpuctl-bwprobe"
    assert (g.index, g.bus_id, g.h2d_gb_s, g.d2h_gb_s, g.hbm_copy_gb_s, dict(g.p2p_gb_s)) == (
        0, "00000000:00:06.0", 55.3, 55.2, 4200.0, {})


def test_probe_json_peers_and_nulls() -> None:
    doc = {"tool": "gpuctl-bwprobe", "version": 1, "gpus": [
        {"index": 0, "h2d_gb_s": None, "d2h_gb_s": 50, "hbm_copy_gb_s": None, "p2p_gb_s": {"1": 380.5, "2": None}}]}
    (g,) = parse_bwprobe(json.dumps(doc)).gpus
    assert (g.h2d_gb_s, g.d2h_gb_s, dict(g.p2p_gb_s)) == (None, 50.0, {1: 380.5})


def _probe(**kw: object) -> str:
    doc: dict[str, object] = {"tool": "gpuctl-bwprobe", "version": 1, "gpus": [{"index": 0, "h2d_gb_s": 1.0}]}
    doc.update(kw)
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("out", "match"),
    [
        ("", "empty"),
        ('{"tool": "gpuctl-bwprobe", "version": 1, "gpus": [', "not valid JSON"),
        ('{"tool": "other"}', "not a probe document"),
        (_probe(version=2), "unsupported version"),
        (_probe(error="no CUDA device"), "could not run"),
        (_probe(gpus=[]), "non-empty list"),
        (_probe(gpus=[{"h2d_gb_s": 1}]), "integer 'index'"),
        (_probe(gpus=[{"index": 0, "h2d_gb_s": "fast"}]), "non-negative number"),
        (_probe(gpus=[{"index": 0, "p2p_gb_s": {"x": 1}}]), "not a GPU index"),
        ("Running host_to_device_memcpy_ce.\nmemcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n"
         "           0\n 0     55.59\n", "no 'SUM"),
        ("nvbandwidth Version: v0.8\nERROR: cudaErrorNoDevice\n", "ERROR"),
        ("nvbandwidth Version: v0.8\n", "no testcase"),
    ],
)
def test_unusable_output_raises(out: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_bandwidth(out)
