"""fio parser, JSON and text (tests/data/fixtures/fio/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.parsers.fio import parse_fio, parse_fio_json, parse_fio_text

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "fio"
JSON_FILE = "fio-nvme-randrw-4k-json-superbench.txt"
TEXT_FILE = "fio-nvme-raid0-randread-4k-iouring-racksetup.txt"


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_json_randrw() -> None:
    r = parse_fio(text(JSON_FILE))
    assert r.fio_version == "fio-3.16"
    assert r.rw_modes == ("randrw",)
    assert r.read_iops == pytest.approx(85138.890741)
    assert r.write_iops == pytest.approx(85066.128925)
    assert r.read_bw_bytes_s == 348743777
    assert r.read_bw_gb_s == pytest.approx(0.348743777)
    assert r.read_bw_mib_s == pytest.approx(348743777 / 2**20)
    assert r.write_bw_bytes_s == 348450387
    job = r.jobs[0]
    assert (job.name, job.block_size) == ("rand_read_write", "4096")
    assert job.read is not None and job.read.lat_mean_us == pytest.approx(1446.562147113)
    assert job.read.p99_us == pytest.approx(2244.608)


def test_text_randread() -> None:
    r = parse_fio(text(TEXT_FILE))
    assert r.fio_version == "fio-3.28"
    assert r.rw_modes == ("randread",)
    assert r.read_iops == 14000.0
    assert r.read_bw_mib_s == pytest.approx(54.6)
    assert r.write_iops == 0.0
    job = r.jobs[0]
    assert (job.name, job.block_size, job.write) == ("TEST", "4096B", None)
    assert job.read is not None
    assert (job.read.lat_mean_us, job.read.p99_us) == (71.14, 82.0)


def test_text_units_and_suffixes() -> None:
    out = ("job: (g=0): rw=write, bs=(R) 1024KiB-1024KiB, (W) 1024KiB-1024KiB, (T) 1024KiB-1024KiB\n"
           "job: (groupid=0, jobs=8): err= 0: pid=1: Mon Jan 1 00:00:00 2024\n"
           "  write: IOPS=6512, BW=6512MiB/s (6829MB/s)(382GiB/60009msec)\n"
           "     lat (msec): min=1, max=40, avg= 9.81, stdev= 2.1\n"
           "Run status group 0 (all jobs):\n")
    r = parse_fio_text(out)
    assert r.rw_modes == ("write",)
    assert r.write_bw_bytes_s == 6512 * 2**20
    assert r.write_bw_gb_s == pytest.approx(6.828, abs=1e-3)
    assert r.jobs[0].write is not None and r.jobs[0].write.lat_mean_us == pytest.approx(9810.0)
    assert parse_fio_text(out.replace("IOPS=6512", "IOPS=1.5M")).write_iops == 1.5e6


def test_json_after_warning_lines() -> None:
    r = parse_fio("fio: this platform does not support process shared mutexes\n" + text(JSON_FILE))
    assert r.read_iops == pytest.approx(85138.890741)


@pytest.mark.parametrize(
    ("out", "match"),
    [
        ("", "empty"),
        ("fio-3.28\nStarting 1 process\n", "no job results"),
        ("TEST: (groupid=0, jobs=1): err= 5: pid=2715\n", "job failed"),
        ("fio: pid=1234, err=5/file:io_u.c:1889, func=io_u error, error=Input/output error\n", "Input/output"),
        ("TEST: (groupid=0, jobs=1): err= 0: pid=2715\n  cpu          : usr=1.54%\n", "truncated"),
        ("TEST: (groupid=0, jobs=1): err= 0: pid=1\n  read: IOPS=14.0k, BW=54.6XB/s (57.2MB/s)\n", "truncated"),
        ('{\n  "fio version" : "fio-3.16",\n  "jobs" : [\n', "not valid"),
        ('{"jobs": []}', "without a 'jobs' list"),
    ],
)
def test_unusable_output_raises(out: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_fio(out)


def test_json_job_error_raises() -> None:
    doc = json.loads(text(JSON_FILE))
    doc["jobs"][0]["error"] = 5
    with pytest.raises(ParseError, match="failed with error 5"):
        parse_fio_json(json.dumps(doc))


def test_json_then_normal_text_output_format() -> None:
    # fio --output-format=json,normal: the JSON document, then the normal report
    normal = ("TEST: (groupid=0, jobs=1): err= 0: pid=2715: Mon Jan  1 00:00:00 2024\n"
              "  read: IOPS=85.1k, BW=333MiB/s (349MB/s)(19.5GiB/60001msec)\n")
    r = parse_fio(text(JSON_FILE) + "\n" + normal)
    assert r.read_iops == pytest.approx(85138.890741)
    assert parse_fio_json(text(JSON_FILE) + normal).read_iops == pytest.approx(85138.890741)
