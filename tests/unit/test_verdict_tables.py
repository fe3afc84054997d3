"""Verdict tables on a narrow terminal or a pipe (issue 20 item 2): at 80 columns `gpuctl
bench`, `verify` and `analyze` print a compact table and every message of what did not pass
whole, on its own line, never wrapped one word per line in a table column."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from gpuctl.checks.model import CheckResult, CheckStatus, HostResult, VerifyResult
from gpuctl.cli.main import main
from gpuctl.cli.tables import Headers, Row, print_verdicts
from tests.unit.lab_local import standin_node

FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures"


def lone_message_words(output: str, messages: list[str]) -> list[str]:
    """Lines that hold nothing but one word of a message (inside table borders or not):
    the symptom of a message column squeezed to one word per line."""
    words = {w for m in messages for w in m.split() if len(w) > 1}
    found = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").split("│")]
        text = [c for c in cells if c]
        if len(text) == 1 and len(text[0].split()) == 1 and text[0] in words:
            found.append(line)
    return found


def assert_readable(output: str, messages: list[str], width: int = 80) -> None:
    assert messages, "the case must have messages to print"
    assert not lone_message_words(output, messages)
    lines = output.splitlines()
    for m in messages:  # each message whole on one line (the terminal wraps it as prose)
        assert any(m in line for line in lines), m
    # the table itself fits the width (banners and message lines are prose, wrapped by the terminal)
    table = [line for line in lines if line[:1] in "┏┃┡│└━─ " and line.strip()]
    assert table and max(len(line) for line in table) <= width


@pytest.fixture()
def bench_80(tmp_path: Path) -> tuple[Result, dict]:
    inventory, env = standin_node(tmp_path)
    res = CliRunner(env={**env, "COLUMNS": "80"}).invoke(main, ["bench", str(inventory)])
    stage = json.loads(next((tmp_path / "runs").glob("*-bench/stages/bench.json")).read_text())
    return res, stage


def _results(stage: dict) -> list[dict]:
    return [r for h in stage["hosts"].values() for r in h["results"]] + stage["cluster"]["results"]


def test_bench_at_80_columns_compact_table_and_whole_messages(bench_80: tuple[Result, dict]) -> None:
    res, stage = bench_80
    assert res.exit_code in (0, 1, 3), res.output
    results = _results(stage)
    messages = [r["message"] for r in results if r["status"] != "pass"]
    assert_readable(res.stdout, messages)
    # the compact table still names every row: one status cell per result
    assert len(results) > 60  # 8 GPUs: h2d, d2h, HBM and 56 P2P rows, NCCL, fio, training
    assert "not passed:" in res.stdout
    # about one line per result (a GPU pair is 'gpu-01 GPU 0↔1'); 602 lines for 2 nodes before
    lines = res.stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("────")) + 1:
                  next(i for i, line in enumerate(lines) if line.endswith("not passed:"))]
    assert len(results) <= len(table) <= 1.2 * len(results)


def test_bench_on_a_wide_terminal_keeps_messages_in_the_table(tmp_path: Path) -> None:
    inventory, env = standin_node(tmp_path)
    res = CliRunner(env={**env, "COLUMNS": "260"}).invoke(main, ["bench", str(inventory)])
    warn = [line for line in res.stdout.splitlines() if "all_reduce_busbw_gb_s =" in line]
    assert len(warn) == 1 and warn[0].startswith("│") and "not passed:" not in res.stdout


def test_analyze_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    q = str(FIX / "nvidia_smi" / "nvidia-smi-q-h200-1gpu-580.159.txt")
    runner = CliRunner()
    doc = json.loads(runner.invoke(main, ["analyze", "nvidia-smi-q", q, "--sku", "hgx-h200-141gb", "--json"]).output)
    res = runner.invoke(main, ["analyze", "nvidia-smi-q", q, "--sku", "hgx-h200-141gb"])
    assert res.exit_code == 1
    messages = [f"{v['message']} → {v['remediation']}" if v["remediation"] != "none" else v["message"]
                for v in doc["verdicts"] if v["status"] != "pass"]
    assert_readable(res.stdout, messages)


def _verify_result() -> VerifyResult:
    hosts = {}
    for host in ("gpu-01", "gpu-02"):
        checks = [CheckResult(host, "nvidia_driver.gpu_count", "nvidia_driver", CheckStatus.PASS),
                  CheckResult(host, "nvidia_driver.gpu_pcie_width[gpu3]", "nvidia_driver", CheckStatus.FAIL,
                              expected="x16", found="x8 (0000:3b:00.0)", remediation="reseat_or_replace",
                              message=f"{host}: GPU 3 (0000:3b:00.0) PCIe link trained at x8, expected x16; "
                                      "reseat the GPU or replace its riser and check again"),
                  CheckResult(host, "dcgm.hostengine_active", "dcgm", CheckStatus.ERROR,
                              message="could not run: systemctl is-active nvidia-dcgm timed out after 30 s "
                                      "while the node was under load")]
        hosts[host] = HostResult(host, checks)
    return VerifyResult(hosts, duration_s=3.0, run_id="20250101T093000-verify")


def test_verify_at_80_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuctl.cli.verify as verify_cli

    inventory, env = standin_node(tmp_path)
    monkeypatch.setattr(verify_cli, "run_verify", lambda *a, **k: _verify_result())
    res = CliRunner(env={**env, "COLUMNS": "80"}).invoke(main, ["verify", str(inventory)])
    assert res.exit_code == 1, res.output
    messages = [c.message for h in _verify_result().hosts.values() for c in h.checks
                if c.status is not CheckStatus.PASS]
    assert_readable(res.stdout, messages)


def test_every_table_uses_the_same_printer_drift_headers() -> None:
    """drift and preflight rows go through print_verdicts with their own column names."""
    buf = io.StringIO()
    out = Console(file=buf, width=80, force_terminal=False, soft_wrap=True)
    note = "differs from the lock file written on 2025-01-01 and from the majority of its 7 peers"
    rows = [Row("gpu-03", "package libnccl2", "drift (lock)", "2.27.7-1+cuda13.0", "2.26.2-1+cuda12.8", note)]
    print_verdicts(out, rows, Headers(subject="node", check="what", status="against", value="found",
                                      threshold="expected", message="note"))
    assert_readable(buf.getvalue(), [note])
    assert "against" in buf.getvalue() and "expected" in buf.getvalue()


def test_outside_text_is_never_markup() -> None:
    buf = io.StringIO()
    out = Console(file=buf, width=200, force_terminal=False, soft_wrap=True)
    print_verdicts(out, [Row("[bold]gpu-01[/bold]", "x", "fail", "1", "2", "[red]boom[/red] [/]")])
    assert "[bold]gpu-01[/bold]" in buf.getvalue() and "[red]boom[/red] [/]" in buf.getvalue()


def test_analyze_marks_a_stand_in_output_captured_with_its_stderr(tmp_path: Path) -> None:
    """`all_reduce_perf … > log 2>&1` on a lab node: analyze finds the stand-in's own line and
    marks every figure; the same output without that line is judged like a real one."""
    import subprocess

    _, env = standin_node(tmp_path)
    tool = Path(env["PATH"].split(":")[0]) / "all_reduce_perf"
    proc = subprocess.run([str(tool), "-b", "8", "-e", "1G", "-f", "2", "-g", "8"], capture_output=True, text=True,
                          check=True)
    assert proc.stderr.startswith("gpuctl-lab-standin: all_reduce_perf from the lab stand-in package nccl-tests")
    both, plain = tmp_path / "both.log", tmp_path / "plain.log"
    both.write_text(proc.stderr + proc.stdout)
    plain.write_text(proc.stdout)
    runner = CliRunner(env={"COLUMNS": "80"})
    doc = json.loads(runner.invoke(main, ["analyze", "nccl", str(both), "--sku", "hgx-h100-80gb", "--json"]).output)
    assert "nccl-tests 2.17.6-1" in doc["emulated"]
    shown = runner.invoke(main, ["analyze", "nccl", str(both), "--sku", "hgx-h100-80gb"]).stdout
    assert shown.startswith("nccl") and "EMULATED" in shown and " emu" in shown
    doc = json.loads(runner.invoke(main, ["analyze", "nccl", str(plain), "--sku", "hgx-h100-80gb", "--json"]).output)
    assert doc["emulated"] is None


def test_turnkey_stage_table_without_check_and_threshold_columns() -> None:
    """turnkey's stages go through the same printer: no check or threshold column, and the
    detail of every stage (also a passed one) is shown."""
    detail = ("verify: 2 of 16 nodes failed nvidia_driver.gpu_pcie_width; fix the cause, then resume "
              "with gpuctl turnkey inventories/h100-8x4.yaml --resume 20250101T090000-turnkey")
    rows = [Row("preflight", "", "pass", "12.5", "", "16 nodes found as ordered"),
            Row("verify", "", "fail", "301.2", "", detail)]
    headers = Headers(subject="stage", check=None, value="seconds", threshold=None, message="detail")
    for width in (80, 250):
        buf = io.StringIO()
        print_verdicts(Console(file=buf, width=width, force_terminal=False, soft_wrap=True), rows, headers,
                       quiet=frozenset())
        text = buf.getvalue()
        assert "check" not in text and "threshold" not in text
        assert_readable(text, [detail, "16 nodes found as ordered"], width)
