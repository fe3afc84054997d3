"""Issue 19, class 7 (rails): two ib_write_bw runs on different rails in one output are read
as two rails, each judged, not as one run whose equal rows are merged
(tests/data/fixtures/issue19/SOURCES.md)."""

from __future__ import annotations

from itertools import zip_longest
from pathlib import Path

from gpuctl.analyze import analyze_text
from gpuctl.catalog import load_sku
from gpuctl.parsers.perftest import parse_ib_write_bw
from gpuctl.verdicts import Status

FIX = Path(__file__).parents[1] / "data" / "fixtures"
TWO = FIX / "issue19" / "ib_write_bw-2rails-same-device-gid3-gid5-server-concurrent.txt"


def test_two_rails_side_by_side_are_two_results() -> None:
    r = parse_ib_write_bw(TWO.read_text())
    assert r.rail == "mlx5_1 GID 3"
    assert [x.rail for x in r.rails] == ["mlx5_1 GID 5"]
    assert [x.bw_avg_gbit_s for x in (r, *r.rails)] == [98.03, 98.03]
    assert r.others == ()


def test_each_rail_is_judged_and_named() -> None:
    a = analyze_text("ib_write_bw", TWO.read_text(), load_sku("hgx-a100-80gb"))
    v = [x for x in a.verdicts if x.check == "ib_write_bw_gbit_s"]
    assert [x.subject.port for x in v] == ["mlx5_1 GID 3", "mlx5_1 GID 5"]
    assert all(x.status is Status.FAIL for x in v)  # 98 Gb/s RoCE against the HDR floor


def test_server_and_client_of_one_run_stay_one_rail() -> None:
    loopback = FIX / "perftest" / "ib_write_bw-ib-loopback-allsizes-interleaved-superbench.txt"
    r = parse_ib_write_bw(loopback.read_text())
    assert r.rails == () and r.mixed_with == () and len(r.rows) == 23


def test_rails_printed_into_one_stream_are_named_as_mixed() -> None:
    # the two real runs above, interleaved line by line (two processes writing to one terminal)
    first, second = TWO.read_text().split("./ib_write_bw -d mlx5_1  -x 5")
    second = "./ib_write_bw -d mlx5_1  -x 5" + second
    mixed = "\n".join(x for pair in zip_longest(first.splitlines(), second.splitlines()) for x in pair if x)
    r = parse_ib_write_bw(mixed)
    assert r.mixed_with or r.rails  # never one rail silently dropped
    a = analyze_text("ib_write_bw", mixed, load_sku("hgx-a100-80gb"))
    msgs = " ".join(v.message for v in a.verdicts)
    assert "GID 3" in msgs and "GID 5" in msgs
