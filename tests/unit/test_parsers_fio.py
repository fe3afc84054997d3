"""fio parser, JSON and text (tests/data/fixtures/fio/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.analyze import analyze_text
from gpuctl.catalog import load_sku
from gpuctl.cli.main import main
from gpuctl.errors import ParseError
from gpuctl.parsers.fio import parse_fio, parse_fio_json, parse_fio_text
from gpuctl.verdicts import Status

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


# ---------------------------------------------------------------- public samples (issue: analyze on real outputs)

NO_JOBDEF = "fio-3.x-randread-randwrite-2groups-no-jobdef-lines-rawstor.txt"
FALLOC = "fio-3.33-json-falloc-write-note-line-linux-fsdevel.txt"


def _analyze(body: str, sku: str | None = "hgx-h100-80gb"):
    return analyze_text("fio", body, load_sku(sku) if sku else None)


def _cli(body: str, *args: str) -> int:
    return CliRunner().invoke(main, ["analyze", "fio", "-", *args], input=body).exit_code


def test_text_without_job_definition_lines_takes_the_workload_from_the_job_names() -> None:
    r = parse_fio(text(NO_JOBDEF))
    assert r.fio_version is None
    assert [(j.name, j.rw, j.rw_source, j.block_size) for j in r.jobs] == [
        ("randread", "randread", "job name", None), ("randwrite", "randwrite", "job name", None)]
    assert r.rw_modes == ("randread", "randwrite")
    assert (r.read_iops, r.write_iops) == (515000.0, 401000.0)
    assert (r.read_bw_bytes_s, r.write_bw_bytes_s) == (2013 * 2**20, 1565 * 2**20)
    read = r.jobs[0].read
    assert read is not None and (read.lat_mean_us, read.p99_us) == (pytest.approx(1.76217), pytest.approx(1.992))
    assert r.jobs[0].write is None and r.jobs[1].read is None


def test_text_without_job_definition_lines_is_judged_against_the_sku() -> None:
    a = _analyze(text(NO_JOBDEF))
    v = next(v for v in a.verdicts if v.check == "fio_randread_iops")
    assert (v.status, v.value, v.threshold) == (Status.FAIL, 515000.0, 1000000)
    assert "job name" in v.message  # says where the workload came from
    assert _cli(text(NO_JOBDEF), "--sku", "hgx-h100-80gb") == 1
    figures = {f.name: f.value for f in a.figures}
    assert figures["rw"] == "randread,randwrite"


def test_rw_anywhere_in_the_text_names_the_workload() -> None:
    body = "$ fio --name=job1 --rw=randread --bs=4k --direct=1\n" + text(NO_JOBDEF).replace(
        "randread: (groupid=0", "job1: (groupid=0").split("randwrite: (groupid=1")[0]
    (job,) = parse_fio(body).jobs
    assert (job.name, job.rw, job.rw_source) == ("job1", "randread", "rw= in the output")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("randread: (groupid=0", "jobA: (groupid=0"),  # a name that says nothing
        ("randread: (groupid=0", "randwrite: (groupid=0"),  # a name that contradicts the read: section
    ],
)
def test_workload_that_cannot_be_told_is_not_judged_and_exits_1(old: str, new: str) -> None:
    body = text(NO_JOBDEF).replace(old, new)
    r = parse_fio(body)
    assert r.jobs[0].rw is None and r.jobs[0].rw_source is None
    a = _analyze(body)
    v = next(v for v in a.verdicts if v.check == "fio_workload")
    assert v.status is Status.ERROR and "could not be judged" in v.message and "rw=" in v.message
    assert a.failed
    assert _cli(body, "--sku", "hgx-h100-80gb") == 1
    assert _cli(body) == 1  # the workload is unknown with or without a SKU


def test_json_falloc_engine_after_note_line() -> None:
    r = parse_fio(text(FALLOC))
    assert r.fio_version == "fio-3.33"
    (job,) = r.jobs
    assert (job.name, job.rw, job.rw_source, job.block_size) == ("task_0", "write", "job options", "4k")
    assert (job.ioengine, job.direct, job.read) == ("falloc", False, None)
    assert job.write is not None and job.write.iops == pytest.approx(476118.226321)
    assert r.write_bw_bytes_s == 1950180255 and job.write.io_bytes == 137438953472
    assert job.write.lat_mean_us == pytest.approx(1.929203544) and job.write.p99_us == pytest.approx(2.256)


def test_json_falloc_engine_is_not_a_disk_measurement() -> None:
    a = _analyze(text(FALLOC))
    (v,) = [v for v in a.verdicts if v.check == "fio_seqwrite_gb_s"]
    assert (v.status, v.value, v.threshold) == (Status.ERROR, pytest.approx(1.950180255), 5.0)
    assert "ioengine=falloc" in v.message and "not judged" in v.message
    assert _cli(text(FALLOC), "--sku", "hgx-h100-80gb") == 1


def _seqwrite_json(**opts: str) -> str:
    doc = json.loads(text(FALLOC)[text(FALLOC).index("{"):])
    glob = {k: v for k, v in doc["global options"].items() if k not in ("ioengine", "direct")}
    doc["global options"] = {**glob, "ioengine": "libaio", **opts}
    doc["jobs"][0]["write"]["bw_bytes"] = 7_000_000_000  # above the 6.5 GB/s warn line
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("opts", "status", "needle"),
    [
        ({"direct": "1"}, Status.PASS, ">= 5 GB/s"),
        ({"buffered": "0"}, Status.PASS, ">= 5 GB/s"),
        ({"direct": "0"}, Status.ERROR, "buffered"),
        ({}, Status.ERROR, "buffered"),  # fio's default is direct=0
        ({"direct": "1", "ioengine": "null"}, Status.ERROR, "ioengine=null"),
    ],
)
def test_buffered_or_dataless_runs_do_not_pass_a_disk_threshold(opts: dict[str, str], status: Status,
                                                                  needle: str) -> None:
    (v,) = [v for v in _analyze(_seqwrite_json(**opts)).verdicts if v.check == "fio_seqwrite_gb_s"]
    assert (v.status, v.value) == (status, 7.0)
    assert needle in v.message


def test_buffered_run_without_a_sku_is_not_judged_but_says_why() -> None:
    (v,) = _analyze(_seqwrite_json(direct="0"), None).verdicts
    assert v.status is Status.NO_THRESHOLD and "buffered" in v.message


def test_json_without_rw_is_fio_default_read() -> None:
    doc = json.loads(text(JSON_FILE))
    del doc["jobs"][0]["job options"]["rw"]
    (job,) = parse_fio_json(json.dumps(doc)).jobs
    assert (job.rw, job.rw_source) == ("read", "fio default")
    assert (job.ioengine, job.direct) == ("libaio", True)
