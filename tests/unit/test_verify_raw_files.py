"""verify's raw outputs go straight into the run record, redacted and private, as each
command returns (issue 18: no second redaction and copy of every output at the end)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from gpuctl.checks.probe import Probe
from gpuctl.redact import MARK
from tests.unit.checks_support import FakeHost, inventory_spec


def test_outputs_land_in_the_record_with_verify_prefix(tmp_path: Path) -> None:
    spec = inventory_spec("lab", 0)
    host = FakeHost({"echo": (3, "db_password=hunter2\nok\n", "warn: api_key=abc123\n")}, spec.node)
    raw = tmp_path / "raw"
    probe = Probe(host, spec, raw, raw_prefix="verify-")
    out = probe.output("demo", "echo hi", ok_rc=(3,))
    assert out.rc == 3 and "hunter2" in out.stdout  # the checks judge the real output
    d = raw / spec.node
    assert sorted(p.name for p in d.iterdir()) == ["verify-commands.jsonl", "verify-demo.stderr.txt",
                                                   "verify-demo.txt"]
    text = (d / "verify-demo.txt").read_text()
    assert "hunter2" not in text and MARK in text and "ok" in text
    assert "abc123" not in (d / "verify-demo.stderr.txt").read_text()
    line = json.loads((d / "verify-commands.jsonl").read_text())
    assert line["key"] == "demo" and line["rc"] == 3 and "echo hi" in line["command"]
    for p in [d, *d.iterdir()]:
        assert stat.S_IMODE(p.stat().st_mode) == (0o700 if p.is_dir() else 0o600), p


def test_no_prefix_keeps_the_health_layout(tmp_path: Path) -> None:
    spec = inventory_spec("lab", 0)
    probe = Probe(FakeHost({"echo": "x\n"}, spec.node), spec, tmp_path)
    probe.output("k", "echo x")
    assert sorted(p.name for p in (tmp_path / spec.node).iterdir()) == ["commands.jsonl", "k.txt"]


def test_without_a_raw_dir_nothing_is_written(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    spec = inventory_spec("lab", 0)
    Probe(FakeHost({"echo": "x\n"}, spec.node), spec, None).output("k", "echo x")
    assert list(tmp_path.iterdir()) == []
