"""gdsio, kernel-log Xid and training-run parsers (fixtures: gdsio/, xid/, training/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.parsers.gdsio import parse_gdsio
from gpuctl.parsers.training import parse_training_log
from gpuctl.parsers.xid import parse_xid_log

FIX = Path(__file__).parents[1] / "data" / "fixtures"


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_gdsio_summaries() -> None:
    r = parse_gdsio(text("gdsio/gdsio-read-write-public.txt"))
    read, write = r.runs
    assert (read.io_type, read.xfer_type, read.threads, read.io_size_kib) == ("READ", "GPUD", 8, 1024)
    assert (read.throughput_gib_s, read.avg_latency_us, read.ops) == (6.524658, 1197.370995, 799606)
    assert read.total_time_s == 119.679102
    assert read.throughput_gb_s == pytest.approx(6.524658 * 2**30 / 1e9)
    assert (write.io_type, write.throughput_gib_s, write.data_kib) == ("WRITE", 5.655563, 54675456)


def test_gdsio_summary_wrapped_over_two_lines() -> None:
    out = ("IoType: READ XferType: GPUD Threads: 8 DataSetSize: 8388608(KiB) IOSize: 1024(KiB)\n"
           "Throughput: 12.914 GiB/sec, Avg_Latency: 619.42 usecs ops: 8192 total_time 0.619 secs\n")
    with pytest.raises(ParseError):  # "8388608(KiB)" without "/total" is not gdsio's real layout
        parse_gdsio(out)
    (run,) = parse_gdsio(out.replace("8388608(KiB)", "8388608/8388608(KiB)")).runs
    assert run.throughput_gib_s == 12.914


@pytest.mark.parametrize(
    ("out", "match"),
    [("", "empty"), ("Error: IO failed stopping traffic, fd :27 ret:-5 errno:1\n", "failed"),
     ("gdsio -f /mnt/x -d 0\n", "nothing but a command line")],
)
def test_gdsio_unusable(out: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_gdsio(out)


def test_xid_events() -> None:
    r = parse_xid_log(text("xid/dmesg-xid79-xid13-synthetic.txt"))
    assert [(e.bus_id, e.xid) for e in r.events] == [("0000:18:00", 79), ("0000:3b:00", 13)]
    e = r.events[0]
    assert (e.pid, e.process, e.message) == ("1234", "python3", "GPU has fallen off the bus.")
    assert r.codes == (13, 79)
    (s,) = r.sxid_events
    assert (s.switch, s.bus_id, s.sxid, s.fatal) == ("nvidia-nvswitch0", "0000:05:00.0", 11001, True)
    assert r.lines_read == 6


def test_xid_formats() -> None:
    r = parse_xid_log("2024-01-15T03:00:00,000000+00:00 host kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', "
                      "name=<unknown>, An uncorrectable double bit error\nNVRM: Xid (PCI:0000:01:00): 31, pid=1 CE0\n")
    assert [(e.xid, e.pid, e.process) for e in r.events] == [(48, "<unknown>", "<unknown>"), (31, "1", None)]


def test_clean_log_is_healthy_not_an_error() -> None:
    r = parse_xid_log(text("xid/dmesg-clean-synthetic.txt"))
    assert (r.events, r.sxid_events, r.lines_read) == ((), (), 3)


def test_empty_log_raises() -> None:
    with pytest.raises(ParseError, match="empty"):
        parse_xid_log("  \n")


def test_training_pass() -> None:
    r = parse_training_log(text("training/ddp-2rank-pass-synthetic.jsonl"))
    assert len(r.steps) == 6 and r.skipped is None
    assert r.loss_start() == pytest.approx((9.18 + 8.02 + 6.40) / 3)
    assert r.loss_end() == pytest.approx((3.10 + 0.90 + 0.20) / 3)
    assert r.final is not None
    assert (r.final.world_size, r.final.dtype, r.final.ranks_agree) == (2, "bf16", True)
    assert r.final.achieved_tflops == pytest.approx(811e6 * 784000 / 1e12)


def test_training_disagreeing_ranks_and_skip() -> None:
    r = parse_training_log(text("training/ddp-2rank-ranks-disagree-synthetic.jsonl"))
    assert r.final is not None and not r.final.ranks_agree
    s = parse_training_log(text("training/skipped-no-torch-synthetic.jsonl"))
    assert (s.skipped, s.final) == ("no PyTorch", None)


@pytest.mark.parametrize(
    ("out", "match"),
    [
        ("", "empty"),
        ("loading model...\n", "no step records"),
        ('{"step": 0, "loss": 9.1}\n{"step": 1, "loss": 8.0}\n', "no final record after step 1"),
        ('{"step": 0, "loss": 9.1}\n{"step": 1, "lo', "not a JSON object"),
        ('{"step": 0, "loss": "high"}\n', "'loss' must be a number"),
        ('{"step": 0, "loss": 1.0}\n{"final": true, "param_checksum_per_rank": [], "world_size": 1}\n', "non-empty"),
        ('{"step": 0, "loss": 1.0}\n{"final": true, "param_checksum_per_rank": ["a"], "world_size": 0}\n',
         "world_size"),
        ('{"hello": 1}\n', "neither a step"),
    ],
)
def test_training_unusable(out: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_training_log(out)
