"""nvidia-smi nvlink --status parser (tests/data/fixtures/nvlink/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.parsers.nvlink import parse_nvlink_status

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "nvlink"


def nvlink(name: str):
    return parse_nvlink_status((FIX / name).read_text())


def test_a100_8gpu_spaces() -> None:
    r = nvlink("nvlink-status-a100-8gpu-gpud.txt")
    assert [g.index for g in r.gpus] == list(range(8))
    assert {g.active_links for g in r.gpus} == {12}
    assert {g.total_gb_s for g in r.gpus} == {300.0}
    assert r.gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"
    assert r.gpus[0].name == "NVIDIA A100-SXM4-80GB"


@pytest.mark.parametrize("name", ["nvlink-status-a100-1gpu-azure-good.txt", "nvlink-status-a100-p4de-gpu0-awsome.txt"])
def test_a100_tab_indented(name: str) -> None:
    (g,) = nvlink(name).gpus
    assert (g.active_links, g.total_gb_s, g.all_inactive) == (12, 300.0, False)


def test_all_links_inactive() -> None:
    (g,) = nvlink("nvlink-status-a100-1gpu-azure-inactive.txt").gpus
    assert (g.index, g.active_links, g.all_inactive, g.links) == (6, 0, True, ())


def test_h100_18_links() -> None:
    (g,) = nvlink("nvlink-status-h100-gpu0-awesomemlsys.txt").gpus
    assert g.active_links == 18
    assert g.links[17].speed_gb_s == pytest.approx(26.562)
    assert g.total_gb_s == pytest.approx(18 * 26.562)


def test_inactive_link_marker() -> None:
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
    (g,) = parse_nvlink_status(text).gpus
    assert g.active_links == 1 and not g.links[1].active


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("\t Link 0: 25 GB/s\n", "before any GPU"),
        ("Failed to initialize NVML: Driver/library version mismatch\n", "mismatch"),
        ("GPU 0: NVIDIA A100 (UUID: GPU-x)\n\t Link 0: fast\n", "unexpected line"),
    ],
)
def test_unusable_output_raises(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_nvlink_status(text)


def test_no_nvlink_machine_prints_nothing_and_is_judged_by_the_sku() -> None:
    """Real H200 VM: `nvidia-smi nvlink -s` exits 0 with no output at all. It was refused as
    'empty output' (exit 2) although it is the right answer for a one-GPU SKU."""
    from gpuctl.analyze import analyze_text
    from gpuctl.catalog import load_sku
    from gpuctl.verdicts import Status

    raw = (FIX / "nvlink-status-h200-1gpu-no-nvlink-real.txt").read_text()
    assert raw == "" and nvlink("nvlink-status-h200-1gpu-no-nvlink-real.txt").gpus == ()
    assert analyze_text("nvlink", raw, load_sku("single-h200")).status is Status.PASS
    hgx = analyze_text("nvlink", raw, load_sku("hgx-h200-141gb"))
    assert hgx.status is Status.FAIL and "has 18 links per GPU" in hgx.verdicts[0].message
    assert analyze_text("nvlink", raw).status is Status.WARN  # without a SKU: not known
    with pytest.raises(ParseError):
        parse_nvlink_status("NVML: something else entirely\n")
