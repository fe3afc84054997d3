"""Issue 19, class 3: an nccl-tests run whose data check failed (#wrong > 0, 'Out of bounds
values : N FAILED', then nccl-tests' own 'Test failure' exit line) is read and fails the
data-correctness check naming the message size (exit 1), not refused as "the run failed"
(exit 2). Real outputs: tests/data/fixtures/issue19/SOURCES.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.analyze import analyze_text
from gpuctl.cli.main import main
from gpuctl.errors import ParseError
from gpuctl.parsers.nccl import parse_nccl_tests
from gpuctl.verdicts import Status

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "issue19"
GH200 = FIX / "nccl-allreduce-gh200-2node-1gpu-wrong-at-1MiB-test-failure-nccl-tests369.txt"
RTX = FIX / "nccl-allreduce-rtx3090-2node-1gpu-inc-wrong-108-failed.txt"


def test_wrong_elements_then_test_failure_line_is_read() -> None:
    r = parse_nccl_tests(GH200.read_text())
    assert (r.wrong, r.out_of_bounds, len(r.rows)) == (128, 4, 25)
    row = next(x for x in r.rows if x.size_bytes == 1048576)
    assert (row.oop_wrong, row.ip_wrong) == (96, 32)
    assert any("Test failure common.cu:1189" in n for n in r.notes)


def test_wrong_elements_fail_the_data_check_naming_the_size() -> None:
    a = analyze_text("nccl", GH200.read_text())
    (v,) = [v for v in a.verdicts if v.check == "nccl_wrong"]
    assert v.status is Status.FAIL
    assert "96 out-of-place + 32 in-place at 1048576 B" in v.message
    assert "Out of bounds values : 4 FAILED" in v.message


def test_cli_exit_1_not_2() -> None:
    res = CliRunner().invoke(main, ["analyze", "nccl", str(GH200), "--json"])
    assert res.exit_code == 1, res.output
    assert "1048576 B" in res.output


def test_wrong_counts_printed_in_g_format_are_counted() -> None:
    # nccl-tests prints #wrong with %g: "1.04858e+06" from 2 MiB up
    r = parse_nccl_tests(RTX.read_text())
    row = next(x for x in r.rows if x.size_bytes == 2097152)
    assert (row.oop_wrong, row.ip_wrong) == (1048580, 1048580)
    assert r.out_of_bounds == 108
    (v,) = [v for v in analyze_text("nccl", RTX.read_text()).verdicts if v.check == "nccl_wrong"]
    assert v.status is Status.FAIL and "4 out-of-place + 4 in-place at 8 B" in v.message
    assert "more sizes" in v.message


def test_test_failure_without_any_wrong_element_is_still_a_failed_run() -> None:
    text = GH200.read_text().replace("      96   492.81", "       0   492.81").replace(
        "      32\n", "       0\n").replace("Out of bounds values : 4 FAILED", "Out of bounds values : 0 OK")
    with pytest.raises(ParseError, match="the run failed"):
        parse_nccl_tests(text)
