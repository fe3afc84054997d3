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


# --- public outputs from `gpuctl analyze nccl` hardening (SOURCES.md) --------------------


def _sku(name: str, **floors: float):
    """A catalog SKU, optionally with its bus-bandwidth floors replaced (test floors)."""
    from gpuctl.catalog import Threshold, load_sku

    sku = load_sku(name)
    if not floors:
        return sku
    t = dict(sku.thresholds)
    t.update({k: Threshold(min=v, source="test floor") for k, v in floors.items()})
    return sku.model_copy(update={"thresholds": t})


def _busbw(verdicts):
    return [v for v in verdicts if v.check.endswith("busbw_gb_s")]


CX8_HOSTS = ("R6KD-CX8aaS-GPU-14", "R6KD-CX8aaS-GPU-15")


def test_nccl_tests_2_18_3_header_after_mpirun_warnings() -> None:
    r = parse_nccl_tests(fixture("nccl-allreduce-2.18.3-2node-16gpu-cx8-mpirun-warnings.txt"))
    assert (r.test, r.collective, r.nccl_tests_version, r.nccl_version) == (
        "all_reduce_perf", "all_reduce", "2.18.3", "2.30.3+cuda13.0")
    assert (r.gpus, r.nodes, r.hosts) == (16, 2, CX8_HOSTS)
    assert r.avg_busbw_gb_s == pytest.approx(21.0721)
    assert (r.max_busbw_gb_s, r.max_algbw_gb_s) == (pytest.approx(49.85), pytest.approx(26.58))
    assert r.large_msg_busbw_gb_s == pytest.approx((49.83 + 49.85) / 2)
    assert (len(r.rows), r.largest_size_bytes, r.wrong, r.validated) == (24, 8589934592, 0, True)
    assert (r.run, r.runs) == (None, ())


def test_several_runs_in_one_log_are_parsed_apart() -> None:
    # 3 consecutive 16-rank runs: gpus was 48 (Rank lines of all runs), rows were run 1's
    # and the average run 3's
    r = parse_nccl_tests(fixture("nccl-allreduce-2.18.3-2node-16gpu-cx8-3runs-one-log.txt"))
    # the headline figures are all one run's: run 3, the lowest large-message busbw
    assert (r.gpus, r.nodes, r.avg_busbw_gb_s, r.max_busbw_gb_s) == (16, 2, 19.1424, 49.86)
    assert r.run == 3 and r.rows == r.runs[2].rows
    assert [x.run for x in r.runs] == [1, 2, 3]
    assert [x.avg_busbw_gb_s for x in r.runs] == pytest.approx([21.0721, 17.8737, 19.1424])
    assert [x.large_msg_busbw_gb_s for x in r.runs] == pytest.approx([49.84, 49.84, (49.67 + 49.86) / 2])
    for x in r.runs:
        assert (x.gpus, x.nodes, x.hosts, len(x.rows), x.collective) == (16, 2, CX8_HOSTS, 24, "all_reduce")
        assert (x.nccl_version, x.nccl_tests_version) == ("2.30.3+cuda13.0", "2.18.3")
    # run 1 reads exactly as the same run logged alone
    alone = parse_nccl_tests(fixture("nccl-allreduce-2.18.3-2node-16gpu-cx8-mpirun-warnings.txt"))
    assert r.runs[0].rows == alone.rows and r.runs[0].ranks == alone.ranks
    assert "3 nccl-tests runs" in r.notes[0] and "run 3's" in r.notes[0]
    assert all(f"avg busbw {a} GB/s" in r.notes[0] for a in ("21.0721", "17.8737", "19.1424"))


def test_several_runs_are_judged_each_naming_the_run() -> None:
    from gpuctl.verdicts import Status, judge_nccl

    r = parse_nccl_tests(fixture("nccl-allreduce-2.18.3-2node-16gpu-cx8-3runs-one-log.txt"))
    # floor between run 3 (49.765) and runs 1-2 (49.84): only run 3 fails, and says so
    vs = _busbw(judge_nccl(r, _sku("hgx-h100-80gb", multi_node_busbw_gb_s=49.8)))
    assert [v.check for v in vs] == ["multi_node_busbw_gb_s"] * 3
    assert [v.status for v in vs] == [Status.PASS, Status.PASS, Status.FAIL]
    assert [v.value for v in vs] == pytest.approx([49.84, 49.84, 49.765])
    assert "run 3 of 3 (all_reduce_perf, avg busbw 19.1424 GB/s)" in vs[2].message
    assert vs[2].message.startswith("node: run 3 of 3")
    wrong = [v for v in judge_nccl(r) if v.check == "nccl_wrong"]
    assert len(wrong) == 3 and all(v.status is Status.PASS for v in wrong)


def test_several_runs_through_analyze_figures_are_one_runs() -> None:
    from gpuctl.analyze import analyze_text

    a = analyze_text("nccl", fixture("nccl-allreduce-2.18.3-2node-16gpu-cx8-3runs-one-log.txt"),
                     _sku("hgx-h100-80gb"))
    fig = {f.name: f.value for f in a.figures}
    assert (fig["gpus"], fig["hosts"], fig["avg_busbw"], fig["test"]) == (16, 2, 19.1424, "all_reduce_perf")
    assert a.failed  # 49.8 GB/s is far below the H100 multi-node floor, in every run


def test_a_truncated_or_failed_run_among_several_refuses_the_log() -> None:
    one = fixture("nccl-allreduce-2.18.3-2node-16gpu-cx8-mpirun-warnings.txt")
    cut = "\n".join(one.splitlines()[:40]) + "\n"  # run stopped after a few rows
    with pytest.raises(ParseError, match=r"run 2 of 2 in this output: .*Avg bus bandwidth.*truncated"):
        parse_nccl_tests(one + cut)
    with pytest.raises(ParseError, match=r"run 1 of 2 in this output: .*Avg bus bandwidth.*truncated"):
        parse_nccl_tests(cut + one)  # a new run header after an unfinished table starts a new run
    failed = fixture("nccl-allreduce-h100-8gpu-cuda-failure-nccl-tests264.txt")
    with pytest.raises(ParseError, match=r"run 2 of 2 in this output: .*Test CUDA failure common.cu:941"):
        parse_nccl_tests(one + failed)


def test_cuda_failure_output_is_refused() -> None:
    with pytest.raises(ParseError, match=r"the run failed: .*Test CUDA failure common.cu:941 'system not yet"):
        parse_nccl_tests(fixture("nccl-allreduce-h100-8gpu-cuda-failure-nccl-tests264.txt"))


GCP_ALLGATHER = "nccl-allgather-h200-2node-16gpu-gcp-a3ultra-version-line.txt"


def test_allgather_without_starting_line_is_not_taken_for_all_reduce() -> None:
    from gpuctl.verdicts import Status, judge_nccl

    r = parse_nccl_tests(fixture(GCP_ALLGATHER))
    vs = judge_nccl(r, _sku("hgx-h200-141gb"))
    # was: fail multi_node_busbw_gb_s = 328.8 GB/s, below the minimum 340 (an all_reduce floor)
    assert not [v for v in vs if v.check in ("all_reduce_busbw_gb_s", "multi_node_busbw_gb_s")]
    (bw,) = _busbw(vs)
    assert (bw.check, bw.status, bw.value, bw.unit) == (
        "nccl_busbw_gb_s", Status.NO_THRESHOLD, pytest.approx(328.84), "GB/s")
    assert "no threshold for all_gather or alltoall" in bw.message
    assert (r.gpus, r.nodes, r.hosts) == (16, 2, ("nccl-test-host-1", "nccl-test-host-2"))
    assert r.avg_busbw_gb_s == pytest.approx(121.902)
    assert (r.max_busbw_gb_s, r.max_algbw_gb_s) == (pytest.approx(332.16), pytest.approx(354.31))
    assert r.large_msg_busbw_gb_s == pytest.approx(328.84)
    assert (len(r.rows), r.nccl_version, r.wrong, r.validated) == (24, "2.26.6+cuda12.8", 0, True)
    # redop none, root -1, 16 ranks' worth of count per size: all_gather (or alltoall)
    assert (r.test, r.collective) == (None, None)
    assert "redop none" in r.collective_evidence and "all_gather, alltoall" in r.collective_evidence
    assert r.collective_candidates == ("all_gather", "alltoall")


def test_allgather_named_by_starting_line_or_command_line() -> None:
    from gpuctl.verdicts import Status, judge_nccl

    body = fixture(GCP_ALLGATHER)
    started = "# Collective test starting: all_gather_perf\n" + body
    command = ("+ mpirun -np 16 --hostfile /tmp/hostfile -x NCCL_DEBUG=WARN "
               "/third_party/nccl-tests/build/all_gather_perf -b 1K -e 8G -f 2 -g 1\n" + body)
    for text, evidence in ((started, "Collective test starting"), (command, "binary name all_gather_perf")):
        r = parse_nccl_tests(text)
        assert (r.test, r.collective) == ("all_gather_perf", "all_gather")
        assert evidence in r.collective_evidence
        (bw,) = _busbw(judge_nccl(r, _sku("hgx-h200-141gb")))
        assert (bw.check, bw.status) == ("all_gather_busbw_gb_s", Status.NO_THRESHOLD)
        assert "no threshold for all_gather" in bw.message


def test_command_line_contradicted_by_the_table_is_not_trusted() -> None:
    from gpuctl.verdicts import Status, judge_nccl

    r = parse_nccl_tests("mpirun -np 16 ./all_reduce_perf -b 1K -e 8G\n" + fixture(GCP_ALLGATHER))
    assert r.collective is None and "names all_reduce_perf but" in r.collective_evidence
    assert r.collective_candidates == ()
    (bw,) = _busbw(judge_nccl(r, _sku("hgx-h200-141gb")))
    assert bw.status is Status.NO_THRESHOLD
    assert "no threshold for a collective the output does not identify" in bw.message


def _table(row: str) -> str:
    return HEADER + row + AVG


@pytest.mark.parametrize(
    ("row", "collective"),
    [
        # 2 ranks, float (4 B): size = count x 4 → whole buffer; count x 4 x 2 → per rank
        ("  1073741824     268435456     float     sum      -1   4000.0  268.44  268.44       0"
         "   4001.0  268.37  268.37       0\n", "all_reduce"),
        ("  1073741824     134217728     float     sum      -1   4000.0  268.44  134.22       0"
         "   4001.0  268.37  134.19       0\n", "reduce_scatter"),
        ("  1073741824     268435456     float     sum       0   4000.0  268.44  268.44       0"
         "   4001.0  268.37  268.37       0\n", "reduce"),
        ("  1073741824     268435456     float    none       0   4000.0  268.44  268.44       0"
         "   4001.0  268.37  268.37       0\n", "broadcast"),
        ("  1073741824     268435456  bfloat16     sum      -1   4000.0  268.44  268.44       0"
         "   4001.0  268.37  268.37       0\n", "reduce_scatter"),  # 2 B words: count per rank
        ("  1073741824     134217728     float    none      -1   4000.0  268.44  134.22       0"
         "   4001.0  268.37  134.19       0\n", None),  # all_gather or alltoall
    ],
)
def test_collective_from_the_table(row: str, collective: str | None) -> None:
    assert parse_nccl_tests(_table(row)).collective == collective


def test_unidentified_reduction_is_never_judged_as_all_reduce() -> None:
    from gpuctl.verdicts import Status, judge_nccl

    zero = ("           0             0     float     sum      -1     6.36    0.00    0.00       0"
            "     6.40    0.00    0.00       0\n")  # count 0: whole or per rank cannot be told
    r = parse_nccl_tests(_table(zero))
    assert r.collective is None and "all_reduce, reduce_scatter" in r.collective_evidence
    (bw,) = _busbw(judge_nccl(r, _sku("hgx-h100-80gb")))
    assert bw.status is Status.NO_THRESHOLD


SKYPILOT = "nccl-allgather-h200-2node-16gpu-skypilot-prefixed.txt"


def test_skypilot_prefix_before_mpi_tag_is_stripped() -> None:
    r = parse_nccl_tests(fixture(SKYPILOT))  # was: "no results table"
    assert (r.gpus, r.nodes, r.hosts) == (16, 2, ("nc-d87e1263-head", "nc-d87e1263-worker1"))
    assert r.avg_busbw_gb_s == pytest.approx(122.073)
    assert (r.max_busbw_gb_s, r.max_algbw_gb_s) == (pytest.approx(332.58), pytest.approx(354.75))
    assert r.large_msg_busbw_gb_s == pytest.approx((325.72 + 332.58) / 2)
    assert (len(r.rows), r.rows[0].redop, r.wrong, r.validated) == (24, "none", 0, True)
    assert r.collective is None and "all_gather" in r.collective_evidence
    assert r.nccl_version is None  # the published output has no NCCL version line


@pytest.mark.parametrize(
    "prefix",
    [
        "(head, rank=0, pid=3808) ",
        "(worker1, rank=1, pid=2769, ip=10.100.10.12) [1,1]<stdout>:",
        "(RayTrainWorker pid=4242, ip=10.0.0.5) ",
        "(pid=4242) ",
        " 0: ",  # srun -l
        "12: [1,0]<stdout>:",
        "[1,0]<stdout>: ",  # a tag followed by a blank
    ],
)
def test_launcher_prefixes_are_stripped(prefix: str) -> None:
    text = "".join(f"{prefix}{line}\n" for line in (HEADER + ROW_OK + AVG).splitlines())
    r = parse_nccl_tests(text)
    assert (r.avg_busbw_gb_s, len(r.rows), r.gpus, r.collective) == (268.405, 1, 2, "all_reduce")


def test_unknown_prefix_names_the_hidden_header() -> None:
    text = "".join(f"<node7> {line}\n" for line in (HEADER + ROW_OK + AVG).splitlines())
    with pytest.raises(ParseError, match=r"no results table.*header was found behind a line prefix.*<node7>"):
        parse_nccl_tests(text)


def test_tag_output_with_interleaved_nccl_info_t4_efa() -> None:
    r = parse_nccl_tests(fixture("nccl-allreduce-t4-2node-efa-tagoutput-ncclinfo-interleaved-eksblueprints.txt"))
    assert (r.gpus, r.nranks, r.nodes) == (2, 2, 2)
    assert r.hosts == ("test-nccl-efa-worker-0", "test-nccl-efa-worker-1")
    assert r.nccl_version == "2.12.7+cuda11.4"
    assert r.avg_busbw_gb_s == pytest.approx(1.15327)
    assert (r.max_busbw_gb_s, r.max_algbw_gb_s) == (pytest.approx(3.15), pytest.approx(3.15))
    assert (len(r.rows), r.largest_size_bytes) == (31, 1073741824)  # 0 B twice, 4 B .. 1 GiB
    assert r.large_msg_busbw_gb_s == pytest.approx((3.11 + 3.12) / 2)
    assert (r.test, r.collective) == (None, "all_reduce")


def test_tag_output_published_table_only_p5_h100() -> None:
    from gpuctl.verdicts import Status, judge_nccl

    r = parse_nccl_tests(fixture("nccl-allreduce-h100-p5-1node-8gpu-tagoutput-nvls-awsbatch.txt"))
    assert (r.gpus, r.nodes) == (0, 0)  # the published block starts at the table header
    assert r.avg_busbw_gb_s == pytest.approx(156.742)
    assert (r.max_busbw_gb_s, r.max_algbw_gb_s) == (pytest.approx(483.35), pytest.approx(276.20))
    assert (len(r.rows), r.largest_size_bytes) == (32, 17179869184)
    assert r.large_msg_busbw_gb_s == pytest.approx((483.05 + 483.35) / 2)
    assert (r.test, r.collective) == (None, "all_reduce")  # redop sum, root -1, count = size / 4
    (bw,) = _busbw(judge_nccl(r, _sku("hgx-h100-80gb")))
    assert (bw.check, bw.status, bw.value) == ("all_reduce_busbw_gb_s", Status.PASS, pytest.approx(483.2))
