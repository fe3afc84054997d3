"""nvidia-smi topo -m parser (tests/data/fixtures/topo/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.parsers.topo import parse_topo_matrix

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "topo"


def topo(name: str):
    return parse_topo_matrix((FIX / name).read_text())


def test_h100_full_mesh_spaces() -> None:
    r = topo("topo-h100-8gpu-nonic-awesomemlsys.txt")
    assert r.gpus == tuple(f"GPU{i}" for i in range(8))
    assert r.nics == ()
    assert len(r.gpu_pairs()) == 28
    assert {p.code for p in r.gpu_pairs()} == {"NV18"}
    assert r.nvlink_full_mesh() and r.nvlink_full_mesh("NV18")
    assert not r.nvlink_full_mesh("NV12")
    assert r.unconnected_pairs("NV18") == ()
    assert r.asymmetric_pairs() == ()


def test_v100_nv3_pairs_with_nics_tabs() -> None:
    r = topo("topo-pcie-or-partial-4gpu-v100-ac922-nv3-pairs.txt")
    assert r.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert r.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert r.link("GPU0", "GPU1") == "NV3"
    assert r.link("GPU2", "GPU3") == "NV3"
    assert r.link("GPU0", "mlx5_0") == "NODE"
    assert r.link("mlx5_0", "mlx5_1") == "PIX"
    assert [(p.a, p.b) for p in r.unconnected_pairs()] == [
        ("GPU0", "GPU2"), ("GPU0", "GPU3"), ("GPU1", "GPU2"), ("GPU1", "GPU3")]
    assert len(r.unconnected_pairs("NV3")) == 4
    assert not r.nvlink_full_mesh()


def test_pcie_only_8gpu_tabs() -> None:
    r = topo("topo-pcie-or-partial-8gpu-sys-only-tabs.txt")
    assert len(r.gpus) == 8
    assert len(r.unconnected_pairs()) == 28
    assert {p.code for p in r.gpu_pairs()} == {"SYS"}


def test_della_2gpu() -> None:
    r = topo("topo-pcie-or-partial-2gpu-a100-della-sys.txt")
    assert r.gpus == ("GPU0", "GPU1") and r.nics == ("mlx5_0", "mlx5_1")
    assert r.link("GPU1", "mlx5_1") == "NODE"


def test_h200_single_gpu_with_ansi_codes() -> None:
    r = topo("topo-h200-1gpu-ansi.txt")
    assert r.gpus == ("GPU0",)
    assert r.links == ()
    assert not r.nvlink_full_mesh()  # one GPU is no mesh


def test_nic_legend() -> None:
    text = ("\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV18\tPIX\t0-47\t0\nGPU1\tNV18\t X \tSYS\t0-47\t0\nNIC0\tPIX\tSYS\t X \n\n"
            "NIC Legend:\n\n  NIC0: mlx5_0\n")
    r = parse_topo_matrix(text)
    assert r.nics == ("NIC0",)
    assert r.nic_names == (("NIC0", "mlx5_0"),)


def test_asymmetric_matrix_is_reported() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0\nGPU1\tSYS\t X \t0\n"
    assert parse_topo_matrix(text).asymmetric_pairs() == (("GPU0", "GPU1", "NV18", "SYS"),)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("Legend:\n  X    = Self\n", "no matrix header"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0\n", "no row for GPU1"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \nGPU1\tNV18\t X \t0\n", "cells"),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV99x\t0\nGPU1\tNV18\t X \t0\n", "unknown link code"),
        ("Failed to initialize NVML: Driver/library version mismatch\n", "no matrix header"),
    ],
)
def test_unusable_output_raises(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_topo_matrix(text)


def _topo_2gpu_12nic(merge_header: bool, merge_cells: bool) -> str:
    """A 2-GPU, 12-NIC `topo -m` (NIC0..NIC11 + NIC Legend, as 535+ drivers print) whose
    NIC10/NIC11 header (and cells) ran together, as pasted from a narrow terminal."""
    nics = [f"NIC{i}" for i in range(12)]
    head = "\t".join(["GPU0", "GPU1", *nics[:10]]) + ("\tNIC10NIC11" if merge_header else "\tNIC10\tNIC11")
    lines = ["\t" + head + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]

    def row(name: str, cells: list[str], tail: str) -> str:
        last = cells[-2] + cells[-1] if merge_cells else cells[-2] + "\t" + cells[-1]
        return name + "\t" + "\t".join(cells[:-2]) + "\t" + last + tail

    devs = ["GPU0", "GPU1", *nics]
    for i, d in enumerate(devs):
        cells = [" X " if j == i else ("NV18" if {d, e} == {"GPU0", "GPU1"} else ("PIX" if {i, j} in ({0, 2}, {1, 3})
                 else "SYS")) for j, e in enumerate(devs)]
        lines.append(row(d, cells, "\t0-47\t0\t\tN/A" if d.startswith("GPU") else ""))
    lines += ["", "Legend:", "", "  X    = Self", "", "NIC Legend:", ""]
    lines += [f"  NIC{i}: mlx5_{i}" for i in range(12)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("merge_header", "merge_cells"), [(True, False), (True, True), (False, True)])
def test_run_together_nic_columns_keep_the_gpu_block(merge_header: bool, merge_cells: bool) -> None:
    r = parse_topo_matrix(_topo_2gpu_12nic(merge_header, merge_cells))
    assert r.gpus == ("GPU0", "GPU1")
    assert r.link("GPU0", "GPU1") == "NV18" and r.link("GPU1", "GPU0") == "NV18"
    assert not r.asymmetric_pairs()
    if r.nics:  # split back into NIC10, NIC11
        assert r.nics == tuple(f"NIC{i}" for i in range(12)) and r.link("GPU0", "NIC11") == "SYS"
    else:
        assert r.notes and "NIC" in r.notes[0]


def test_unreadable_nic_part_is_noted_not_refused() -> None:
    text = _topo_2gpu_12nic(False, False).replace("\tNIC10\tNIC11", "\tNIC10NIC1")  # cut header
    r = parse_topo_matrix(text)
    assert r.gpus == ("GPU0", "GPU1") and r.link("GPU0", "GPU1") == "NV18"
    assert r.nics == () and any("NIC" in n for n in r.notes)


def test_h800_paste_with_nic_columns_cut_off_keeps_gpus_and_notes_nics() -> None:
    # real paste (llm-action docs): NIC0-3 rows printed, their header columns cut by the terminal
    r = topo("topo-h800-8gpu-nic-rows-cut-llmaction.txt")
    assert len(r.gpus) == 8 and r.nvlink_full_mesh("NV8")
    assert r.nics == () and r.notes and "NIC0, NIC1, NIC2, NIC3" in r.notes[0]
    assert dict(r.nic_names)["NIC3"] == "mlx5_3"
