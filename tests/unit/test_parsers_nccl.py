"""nccl-tests parser on recorded outputs (tests/data/fixtures/nccl/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.parsers.nccl import parse_nccl_tests

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "nccl"


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def test_oci_a100_single_node_allreduce() -> None:
    r = parse_nccl_tests(fixture("nccl-allreduce-a100-1node-8gpu-oci.txt"))
    assert r.avg_busbw_gb_s == pytest.approx(233.168)
    assert r.max_busbw_gb_s == pytest.approx(233.34)
    assert r.max_algbw_gb_s == pytest.approx(133.34)
    assert r.large_msg_busbw_gb_s == pytest.approx(233.17)
    assert (r.wrong, r.validated) == (0, True)
    assert r.gpus == 8
    assert r.hosts == ("inst-gpu-master",)
    assert r.test == "all_reduce_perf"
    assert r.nccl_version == "2.25.1"  # from nccl-library=22501
    assert r.nccl_tests_version == "2.17.6"
    assert len(r.rows) == 1
    row = r.rows[0]
    assert (row.size_bytes, row.count, row.dtype, row.redop, row.root) == (10737418240, 2684354560, "float", "sum", -1)
    assert (row.oop_time_us, row.oop_algbw_gb_s, row.oop_busbw_gb_s, row.oop_wrong) == (80646.8, 133.14, 233.00, 0)
    assert (row.ip_time_us, row.ip_algbw_gb_s, row.ip_busbw_gb_s, row.ip_wrong) == (80528.8, 133.34, 233.34, 0)
    assert r.out_of_bounds == 0


def test_oci_a100_two_nodes() -> None:
    r = parse_nccl_tests(fixture("nccl-allreduce-a100-2node-16gpu-oci.txt"))
    assert r.avg_busbw_gb_s == pytest.approx(220.921)
    assert r.gpus == 16
    assert r.hosts == ("inst-gpu-master", "inst-gpu-slave")
    assert r.max_busbw_gb_s == pytest.approx(222.88)
    assert r.nccl_version is None  # this output carries no version line


def test_superbench_old_format_sweep() -> None:
    r = parse_nccl_tests(fixture("nccl-allreduce-a100-1node-8gpu-sweep-superbench.txt"))
    assert len(r.rows) == 34  # 0 B (twice) .. 8 GiB; the NCCL INFO line inside the table is skipped
    assert r.avg_busbw_gb_s == pytest.approx(68.4048)
    assert r.max_busbw_gb_s == pytest.approx(235.26)
    assert r.max_algbw_gb_s == pytest.approx(134.44)
    assert r.largest_size_bytes == 8589934592
    assert r.large_msg_busbw_gb_s == pytest.approx((235.26 + 235.03) / 2)
    assert r.rows[0].root is None and r.rows[0].oop_error is None
    assert (r.wrong, r.validated) == (0, False)  # "error" column N/A: validation was off
    assert r.gpus == 8


HEADER = """# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#  Rank  0 Group  0 Pid   1 on n1 device  0 [0x19] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   2 on n1 device  1 [0x3b] NVIDIA H100 80GB HBM3
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
"""
ROW_OK = ("  1073741824     268435456     float     sum      -1   4000.0  268.44  268.44       0"
          "   4001.0  268.37  268.37       0\n")
ROW_WRONG = ("  1073741824     268435456     float     sum      -1   4000.0  268.44  268.44      12"
             "   4001.0  268.37  268.37       3\n")
AVG = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 268.405 \n"


def test_nonzero_wrong_is_carried() -> None:
    r = parse_nccl_tests(HEADER + ROW_WRONG + "# Out of bounds values : 15 FAILED\n# Avg bus bandwidth    : 268.405\n")
    assert r.wrong == 15
    assert r.validated


def test_nccl_version_from_info_line_wins() -> None:
    text = "n1:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n" + HEADER + ROW_OK + AVG
    assert parse_nccl_tests(text).nccl_version == "2.21.5+cuda12.4"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("   \n\n", "empty"),
        ("# nThread 1 nGpus 8 minBytes 8 maxBytes 8\n", "no results table"),
        (HEADER, "no rows"),
        (HEADER + ROW_OK, "Avg bus bandwidth"),
        (HEADER + "n1:5:5 [0] NCCL WARN Cuda failure 'out of memory'\n", "NCCL WARN"),
        (HEADER + "n1: Test NCCL failure common.cu:958 'unhandled system error'\n", "Test NCCL failure"),
        (HEADER + ROW_OK.replace("268.44  268.44", "268.44") + AVG, "fields"),
        (HEADER + ROW_OK.replace("4000.0", "4,000") + AVG, "expected a number"),
    ],
)
def test_unusable_output_raises(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_nccl_tests(text)


# --- issue 12: real-world output shapes ------------------------------------------------


def test_benign_nccl_warn_is_a_note_not_a_failure() -> None:
    warn = "n1:7:7 [1] NCCL WARN NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
    r = parse_nccl_tests(warn + HEADER + ROW_OK + AVG)
    assert r.avg_busbw_gb_s == pytest.approx(268.405)
    assert len(r.notes) == 1 and "libnccl-net.so" in r.notes[0]


def test_warn_then_truncated_run_names_the_warning() -> None:
    with pytest.raises(ParseError, match=r"NCCL WARN.*out of memory"):
        parse_nccl_tests(HEADER + "n1:5:5 [0] NCCL WARN Cuda failure 'out of memory'\n")


TWO_NODE_PARTIAL = """# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#  Rank  0 Group  0 Pid  1234 on   node-a device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  8 Group  0 Pid  2234 on   node-b device  0 [0x18] NVIDIA H100 80GB HBM3
node-a:1234:1300 [0] NCCL INFO comm 0x55d0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 - Init COMPLETE
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
"""


def test_nodes_come_from_hosts_not_rank_line_count() -> None:
    r = parse_nccl_tests(TWO_NODE_PARTIAL + ROW_OK + AVG)
    assert r.hosts == ("node-a", "node-b")
    assert r.nodes == 2
    assert r.nranks == 16
    assert r.gpus == 16


def test_two_nodes_judged_multi_node_even_with_few_rank_lines() -> None:
    from gpuctl.catalog import load_sku
    from gpuctl.verdicts import judge_nccl

    names = [x.check for x in judge_nccl(parse_nccl_tests(TWO_NODE_PARTIAL + ROW_OK + AVG), load_sku("hgx-h100-80gb"))]
    assert "multi_node_busbw_gb_s" in names


def test_mpirun_tag_output_prefixes_are_stripped() -> None:
    text = "".join(
        f"[1,{i % 2}]<{'stderr' if 'WARN' in line else 'stdout'}>:{line}\n"
        for i, line in enumerate((HEADER + ROW_OK + AVG).splitlines())
    )
    r = parse_nccl_tests(text)
    assert r.avg_busbw_gb_s == pytest.approx(268.405)
    assert len(r.rows) == 1 and r.gpus == 2


def test_public_nccl_tests82_benign_warns_two_hosts() -> None:
    cut = fixture("nccl-broadcast-v100-2node-warn-cut-nccl-tests82.txt")
    # as posted, the output stops after the first row: refused as truncated, naming the warning
    with pytest.raises(ParseError, match=r"Avg bus bandwidth.*truncated.*libibverbs"):
        parse_nccl_tests(cut)
    r = parse_nccl_tests(cut + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.00\n")
    assert r.hosts == ("v100-gpu-1", "v100-gpu-5") and r.nodes == 2
    assert r.notes == ("NCCL WARN Failed to open libibverbs.so[.1]",) * 2
    assert r.nccl_version == "2.9.6+cuda11.2"
    assert (r.rows[0].root, r.rows[0].redop, r.validated) == (0, None, False)
