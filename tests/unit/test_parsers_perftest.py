"""perftest ib_write_bw / ib_write_lat parsers (tests/data/fixtures/perftest/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.analyze import analyze_text
from gpuctl.catalog import load_sku
from gpuctl.cli.main import main
from gpuctl.errors import ParseError
from gpuctl.parsers.perftest import BwRow, LatRow, parse_ib_write_bw, parse_ib_write_lat
from gpuctl.remediation import Remediation
from gpuctl.verdicts import Status, Verdict

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


# ---------------------------------------------------------------- public samples (issue: analyze on real outputs)

BIDI_IONIC = "ib_write_bw-bidirectional-ionic-400g-roce-sweep-server.txt"
BIDI_ROCE100 = "ib_write_bw-bidirectional-roce100-cpufreq-warning-between-rows.txt"
DURATION_BNXT = "ib_write_bw-bnxt-roce400-duration-mode-peak0-scc24.txt"


def _analyze(body: str, sku: str | None = "hgx-h100-80gb"):
    return analyze_text("ib_write_bw", body, load_sku(sku) if sku else None)


def _bw_verdicts(body: str, sku: str | None = "hgx-h100-80gb") -> list[Verdict]:
    return [v for v in _analyze(body, sku).verdicts if v.check == "ib_write_bw_gbit_s"]


def test_bidirectional_sweep_is_recognised_as_the_sum_of_both_directions() -> None:
    r = parse_ib_write_bw(text(BIDI_IONIC))
    assert (r.test, r.bidirectional, r.reported_unit) == ("ib_write_bw", True, "Gb/sec")
    assert (r.device, r.link_type) == ("ionic_1", "Ethernet")
    assert len(r.rows) == 23
    assert r.rows[0] == BwRow(2, 20000, 0.158676, 0.156611, 9.788187)
    assert r.rows[-1] == BwRow(8388608, 20000, 778.53, 777.79, 0.011590)
    assert (r.msg_size_bytes, r.bw_avg_gbit_s, r.bw_peak_gbit_s) == (8388608, 777.79, 778.85)
    assert r.direction_avgs_gbit_s is None  # no --report_both: perftest printed only the sum
    assert r.bw_avg_per_direction_gbit_s == pytest.approx(388.895)


def test_bidirectional_sum_is_not_passed_against_the_per_direction_floor() -> None:
    (v,) = _bw_verdicts(text(BIDI_IONIC))
    # 388.9 Gb/s per direction on average: not a pass, the split between directions is unknown
    assert (v.status, v.value, v.threshold, v.unit) == (Status.WARN, pytest.approx(388.895), 380, "Gb/s")
    assert "sum of both directions" in v.message and "777.8 Gb/s" in v.message
    assert "--report_both" in v.message and v.remediation is Remediation.RERUN
    figures = {f.name: f.value for f in _analyze(text(BIDI_IONIC)).figures}
    assert (figures["bidirectional"], figures["bw_average"], figures["bw_average_per_direction"]) == (
        True, 777.79, 388.895)


def test_bidirectional_195_per_direction_fails_the_400g_floor() -> None:
    # a link carrying ~195 Gb/s each way prints ~390 Gb/s in a -b run: that passed the 380 floor
    weak = text(BIDI_IONIC).replace("8388608    20000            778.53             777.79",
                                    "8388608    20000            391.02             390.11")
    (v,) = _bw_verdicts(weak)
    assert (v.status, v.value) == (Status.FAIL, pytest.approx(195.055))
    assert "390.1 Gb/s" in v.message and "at least one direction" in v.message
    res = CliRunner().invoke(main, ["analyze", "ib_write_bw", "-", "--sku", "hgx-h100-80gb"], input=weak)
    assert res.exit_code == 1, res.output


def test_bidirectional_duration_mode_with_warning_between_rows() -> None:
    r = parse_ib_write_bw(text(BIDI_ROCE100))
    assert (r.test, r.bidirectional, r.device, r.link_type) == ("ib_write_bw", True, "mlx5_0", "Ethernet")
    assert r.rows == (BwRow(65536, 560845, None, 98.02, 0.186950),)  # "BW peak won't be measured"
    assert r.bw_peak_gbit_s is None
    assert r.bw_avg_per_direction_gbit_s == pytest.approx(49.01)
    (v,) = _bw_verdicts(text(BIDI_ROCE100), "hgx-a100-80gb")
    assert (v.status, v.value) == (Status.FAIL, pytest.approx(49.01))


def test_duration_mode_peak_is_not_measured() -> None:
    r = parse_ib_write_bw(text(DURATION_BNXT))
    assert (r.test, r.bidirectional, r.device, r.link_type) == ("ib_write_bw", False, "bnxt_re0", "Ethernet")
    assert r.rows == (BwRow(65536, 4159603, None, 363.47, 0.693268),)  # printed "0.00": -D measures no peak
    assert (r.bw_avg_gbit_s, r.bw_peak_gbit_s, r.bw_avg_per_direction_gbit_s) == (363.47, None, 363.47)
    figures = {f.name: f.value for f in _analyze(text(DURATION_BNXT)).figures}
    assert (figures["bw_peak"], figures["bw_average"], figures["bidirectional"]) == (None, 363.47, False)
    (v,) = _bw_verdicts(text(DURATION_BNXT))
    assert (v.status, v.value, v.threshold) == (Status.FAIL, 363.47, 380)  # unidirectional: judged as before


def test_a_zero_average_keeps_its_zero_peak() -> None:
    out = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
           " 65536      5000             0.00               0.00               0.000000\n")
    assert parse_ib_write_bw(out).rows[0].peak_gbit_s == 0.0  # a dead link measured, not a skipped peak


def test_bidirectional_flag_on_the_command_line_without_a_banner() -> None:
    table = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
             " 65536      5000             390.20             389.90             0.743675\n")
    assert parse_ib_write_bw("$ ib_write_bw -b -d mlx5_0 --report_gbits 10.0.0.2\n" + table).bidirectional
    assert parse_ib_write_bw("$ ib_write_bw --bidirectional -d mlx5_0 10.0.0.2\n" + table).bidirectional
    assert not parse_ib_write_bw("$ ib_write_bw -d mlx5_0 --report_gbits 10.0.0.2\n" + table).bidirectional
    assert not parse_ib_write_bw(table).bidirectional


# write_bw.c with --report_both after a -b run: the summed row, then each side's own figure.
# Layout from linux-rdma/perftest src/write_bw.c (RESULT_LINE, "\n Local results: \n", the
# header, the row; the same for "Remote results"); the figures are made up.
def _report_both(local: str, remote: str) -> str:
    line = "-" * 87
    head = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
    return (f"                    RDMA_Write Bidirectional BW Test\n Dual-port       : OFF\t\tDevice         : mlx5_0\n"
            f"{line}\n{head} 65536      5000             762.10             762.00             1.453400\n"
            f"{line}\n\n Local results: \n{line}\n{head} 65536      5000             {local}\n"
            f"{line}\n\n Remote results: \n{line}\n{head} 65536      5000             {remote}\n{line}\n")


def test_report_both_judges_each_direction() -> None:
    body = _report_both("392.05             392.00             0.747681",
                        "370.05             370.00             0.705719")
    r = parse_ib_write_bw(body)
    assert r.bidirectional and r.rows == (BwRow(65536, 5000, 762.10, 762.00, 1.4534),)
    assert r.direction_avgs_gbit_s == (392.0, 370.0)
    assert r.bw_avg_per_direction_gbit_s == 370.0
    local, remote = _bw_verdicts(body)
    assert (local.status, local.value) == (Status.PASS, 392.0)
    assert (remote.status, remote.value) == (Status.FAIL, 370.0)  # a mean of 381 would have hidden it
    assert "remote" in remote.message and "bidirectional" in remote.message


def test_unidirectional_section_is_preferred_over_a_bidirectional_one() -> None:
    uni = text("ib_write_bw-ndr-gbits-client-synthetic.txt")
    r = parse_ib_write_bw(text(BIDI_IONIC) + uni)
    assert (r.test, r.bidirectional, r.bw_avg_gbit_s) == ("ib_write_bw", False, 392.31)
    (other,) = r.others
    assert (other.test, other.bidirectional, other.bw_avg_gbit_s) == ("ib_write_bw", True, 777.79)
    names = {f.name for f in _analyze(text(BIDI_IONIC) + uni).figures}
    assert "ib_write_bw_bidirectional.bw_average" in names


@pytest.mark.parametrize(
    ("banner", "test", "bidirectional"),
    [
        ("RDMA_Write BW Test", "ib_write_bw", False),
        ("RDMA_Write Bidirectional BW Test", "ib_write_bw", True),
        ("RDMA_Write Bidirectional Post List BW Test", "ib_write_bw", True),
        ("Send Bidirectional BW Test", "ib_send_bw", True),
        ("RDMA_Read BW Test", "ib_read_bw", False),
        ("Atomic FETCH_AND_ADD BW Test", "ib_atomic_bw", False),
    ],
)
def test_banners(banner: str, test: str, bidirectional: bool) -> None:
    out = (f"                    {banner}\n"
           " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
           " 8          578000           0.00               0.73               0.096329\n")
    r = parse_ib_write_bw(out)
    assert (r.test, r.bidirectional) == (test, bidirectional)


def test_latency_hdr_sweep_with_cpufreq_warnings_between_rows() -> None:
    r = parse_ib_write_lat(text("ib_write_lat-ib-hdr-allsizes-cpufreq-warnings-interleaved.txt"))
    assert len(r.rows) == 23
    assert r.headline == LatRow(2, 1000, 1.79, 5.41, 1.87, 1.88, 0.18, 2.03, 5.41)
    assert r.rows[-1] == LatRow(8388608, 1000, 345.23, 447.02, 345.55, 348.34, 15.93, 441.71, 447.02)
