"""perftest ib_write_bw / ib_write_lat parsers (tests/data/fixtures/perftest/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.parsers.perftest import parse_ib_write_bw, parse_ib_write_lat

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "perftest"
MBS_TO_GBITS = 1048576 * 8 / 1e9  # perftest MB = 2^20 bytes


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_loopback_server_and_client_concatenated() -> None:
    r = parse_ib_write_bw(text("ib_write_bw-ib-loopback-8M-superbench.txt"))
    assert r.reported_unit == "MB/sec"
    assert len(r.rows) == 1  # the server's and the client's identical rows count once
    assert r.msg_size_bytes == 8388608
    assert r.bw_avg_gbit_s == pytest.approx(24056.72 * MBS_TO_GBITS)
    assert r.bw_avg_gbit_s == pytest.approx(201.802, abs=1e-3)
    assert r.bw_peak_gbit_s == pytest.approx(24056.74 * MBS_TO_GBITS)
    assert (r.device, r.link_type) == ("ib0", "IB")


def test_interleaved_sweep() -> None:
    r = parse_ib_write_bw(text("ib_write_bw-ib-loopback-allsizes-interleaved-superbench.txt"))
    assert len(r.rows) == 23  # 2 B .. 8 MiB; the repeated last row dropped
    assert r.rows[0].size_bytes == 2 and r.rows[0].iterations == 2000
    assert r.msg_size_bytes == 8388608
    assert r.bw_avg_gbit_s == pytest.approx(23240.68 * MBS_TO_GBITS)
    assert r.bw_peak_gbit_s == pytest.approx(23330.56 * MBS_TO_GBITS)  # the 64 KiB row peaks highest


def test_report_gbits() -> None:
    r = parse_ib_write_bw(text("ib_write_bw-ndr-gbits-client-synthetic.txt"))
    assert r.reported_unit == "Gb/sec"
    assert (r.bw_avg_gbit_s, r.bw_peak_gbit_s, r.device) == (392.31, 392.45, "mlx5_0")


def test_mib_header_of_newer_perftest() -> None:
    out = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n" \
          " 65536      5000             2709.52            2709.48            0.043352\n"
    r = parse_ib_write_bw(out)
    assert r.bw_avg_gbit_s == pytest.approx(2709.48 * MBS_TO_GBITS)  # ~22.7 Gb/s on 25 GbE


def test_latency_sweep_with_percentiles() -> None:
    r = parse_ib_write_lat(text("ib_write_lat-softroce-loopback-sweep-linux-rdma.txt"))
    assert len(r.rows) == 12
    h = r.headline
    assert (h.size_bytes, h.iterations, h.t_min_us, h.t_max_us, h.t_typical_us) == (2, 1000, 1.57, 9.65, 1.84)
    assert (h.t_avg_us, h.t_stdev_us, h.t_p99_us, h.t_p999_us) == (2.04, 0.69, 5.02, 9.65)
    assert r.rows[-1].size_bytes == 4096 and r.rows[-1].t_typical_us == 2.58


def test_latency_without_percentiles() -> None:
    h = parse_ib_write_lat(text("ib_write_lat-roce25g-2col-public.txt")).headline
    assert (h.t_min_us, h.t_typical_us, h.t_avg_us, h.t_p99_us) == (1.27, 1.33, 1.34, None)


@pytest.mark.parametrize(
    ("out", "match"),
    [
        ("", "empty"),
        (text("ib_write_bw-connect-failed-synthetic.txt"), "Couldn't connect"),
        (" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n", "no rows"),
        ("                    RDMA_Write BW Test\n Dual-port       : OFF\n", "no '#bytes"),
        (" #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]\n"
         " #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n", "mixed units"),
    ],
)
def test_unusable_bw_output_raises(out: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_ib_write_bw(out)


@pytest.mark.parametrize(
    ("out", "match"),
    [
        ("", "empty"),
        (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]\n", "no rows"),
        (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]\n 2  1000  1.2  3.4\n", "2 values for 3"),
        (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]\n 2  1000  1.2  3.4  1.3  9.9\n",
         "4 values for 3"),
        ("Couldn't connect to 10.0.0.2:18515\n", "did not run"),
    ],
)
def test_unusable_lat_output_raises(out: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_ib_write_lat(out)


def test_read_then_write_session_reports_the_write_section() -> None:
    write = text("ib_write_bw-ib-loopback-8M-superbench.txt")
    read = (write.replace("RDMA_Write BW Test", "RDMA_Read BW Test")
            .replace("24056.74            24056.72", "11000.00            10999.50"))
    r = parse_ib_write_bw(read + write)
    assert r.test == "ib_write_bw"
    assert r.bw_avg_gbit_s == pytest.approx(24056.72 * (1 << 20) * 8 / 1e9)
    assert r.bw_peak_gbit_s == pytest.approx(24056.74 * (1 << 20) * 8 / 1e9)
    (other,) = r.others
    assert other.test == "ib_read_bw"
    assert other.bw_avg_gbit_s == pytest.approx(10999.50 * (1 << 20) * 8 / 1e9)
    assert parse_ib_write_bw(read).test == "ib_read_bw"  # a session of one test is that test
