"""bench/scale.py: bound checks, the Markdown table, reading run records, the generated
pyinfra baseline — on fabricated figures and files (no lab)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scale():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "scale.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = mod
    spec.loader.exec_module(mod)
    return mod


def _m(scale, step: str, nodes: int, wall: float, cpu: float, cmds: float | None = 10.0):
    return scale.Measurement(step=step, nodes=nodes, wall_s=wall, cpu_s=cpu, machine_cpu_s=wall * 2,
                             peak_rss_mib=80.0, max_fds=12, commands_per_node=cmds, exit_code=0, load1=1.5)


def test_bounds_hold_and_fail_on_the_right_figures(scale) -> None:
    rep = scale.ScaleReport(measurements=[
        _m(scale, "provision-noop", 1, 2.0, 1.0), _m(scale, "provision-noop", 64, 6.0, 20.0),
        _m(scale, "pyinfra-noop", 1, 1.5, 0.5), _m(scale, "pyinfra-noop", 64, 5.0, 8.0),
        _m(scale, "verify", 1, 3.0, 1.2), _m(scale, "verify", 64, 20.0, 96.0),
        _m(scale, "pyinfra-verify", 1, 1.0, 0.5), _m(scale, "pyinfra-verify", 64, 10.0, 9.0),
    ])
    bounds = {b.name: b for b in scale.check_bounds(rep)}
    cpu_noop = bounds["provision-noop: gpuctl CPU per node at 64 vs 1 node"]
    assert cpu_noop.value == pytest.approx(20.0 / 64 / 1.0, abs=1e-3) and cpu_noop.holds
    cpu_verify = bounds["verify: gpuctl CPU per node at 64 vs 1 node"]
    assert cpu_verify.value == pytest.approx(1.25, abs=1e-3) and not cpu_verify.holds  # 1.5 s/node vs 1.2
    assert bounds["provision-noop: wall vs plain pyinfra, 1 node(s)"].value == pytest.approx(1.333, abs=1e-3)
    assert bounds["provision-noop: wall vs plain pyinfra, 64 node(s)"].holds  # 6.0 / 5.0 = 1.2
    assert not bounds["verify: wall vs plain pyinfra, 1 node(s)"].holds  # 3.0 / 1.0
    assert not bounds["verify: wall vs plain pyinfra, 64 node(s)"].holds  # 2.0 exactly over 1.5
    assert len(bounds) == 6  # plan/provision-first were not measured: no bound invented for them


def test_bounds_at_the_limit_hold_and_no_one_node_run_means_no_cpu_bound(scale) -> None:
    rep = scale.ScaleReport(measurements=[_m(scale, "verify", 8, 3.0, 2.0), _m(scale, "pyinfra-verify", 8, 2.0, 1.0)])
    bounds = scale.check_bounds(rep)
    assert [b.name for b in bounds] == ["verify: wall vs plain pyinfra, 8 node(s)"]
    assert bounds[0].value == 1.5 and bounds[0].holds


def test_markdown_table_rows_and_bounds(scale) -> None:
    rep = scale.ScaleReport(measurements=[_m(scale, "verify", 8, 3.0, 2.0), _m(scale, "plan", 8, 2.5, 1.6, None),
                                          _m(scale, "pyinfra-verify", 8, 1.0, 1.0)])
    rep.bounds = scale.check_bounds(rep)
    md = scale.render_markdown(rep)
    lines = md.splitlines()
    assert lines[0].startswith("| nodes | step | wall s | gpuctl CPU s | CPU s/node | machine CPU s |")
    assert lines[1].count("|") == lines[0].count("|")
    rows = [x for x in lines if x.startswith("| 8 |")]
    assert [r.split("|")[2].strip() for r in rows] == ["plan", "verify", "pyinfra-verify"]  # step order
    assert "| 8 | plan | 2.5 | 1.6 | 0.20 | 5.0 | – |" in md  # no command count: a dash, not 0
    assert "| verify: wall vs plain pyinfra, 8 node(s) | ≤ 1.5× | 3.00× | **no** |" in md


def test_parse_commands_log_multiline_and_run_commands(scale, tmp_path: Path) -> None:
    log = ("$ [prepare] : gpuctl-fact files; echo a\n  exit=0 time=0.06s\n  stdout: a\n"
           "$ [execute] cat > /etc/x <<'EOF'\nline two\nEOF\n  exit=0 time=0.01s\n"
           "$ [execute] <upload /etc/y>\n  exit=0 time=0.00s\n")
    assert scale.parse_commands_log(log) == [": gpuctl-fact files; echo a", "cat > /etc/x <<'EOF'\nline two\nEOF",
                                             "<upload /etc/y>"]
    run = tmp_path / "run"
    (run / "raw" / "gpu-01").mkdir(parents=True)
    (run / "raw" / "gpu-01" / "commands.log").write_text(log)
    (run / "raw" / "gpu-02").mkdir(parents=True)
    (run / "raw" / "gpu-02" / "verify-commands.jsonl").write_text(
        json.dumps({"key": "files", "command": "timeout 120 sh -c 'tail'", "rc": 0, "seconds": 0.1}) + "\n")
    found = scale.run_commands(run)
    assert found == {"gpu-01": [": gpuctl-fact files; echo a", "cat > /etc/x <<'EOF'\nline two\nEOF"],
                     "gpu-02": ["timeout 120 sh -c 'tail'"]}
    assert scale.commands_per_node(run, 2) == 1.5
    assert scale.commands_per_node(None, 2) is None


def test_baseline_files_compile_and_pad_to_the_longest_host(scale, tmp_path: Path) -> None:
    nodes = [SimpleNamespace(name="gpu-01", address="10.251.1.1"), SimpleNamespace(name="gpu-02", address="10.251.1.2")]
    state = SimpleNamespace(nodes=nodes, key_path="/k", known_hosts="/kh")
    inv, deploy = scale.write_baseline(tmp_path, {"gpu-01": ["true", "echo x"], "gpu-02": ["true"]}, state)
    ns: dict = {}
    exec(compile(inv.read_text(), str(inv), "exec"), ns)
    assert [h[0] for h in ns["hosts"]] == ["gpu-01", "gpu-02"]
    assert ns["hosts"][1][1]["ssh_hostname"] == "10.251.1.2"
    assert ns["hosts"][0][1]["ssh_strict_host_key_checking"] == "yes"
    text = deploy.read_text()
    compile(text, str(deploy), "exec")
    assert "range(2)" in text and "server.shell" in text
    assert json.loads((tmp_path / "commands.json").read_text())["gpu-02"] == ["true"]


def test_machine_busy_is_monotonic(scale) -> None:
    a = scale.machine_busy_s()
    sum(i * i for i in range(200000))
    assert scale.machine_busy_s() >= a > 0


def test_median_of_keeps_the_middle_run_and_notes_all(scale) -> None:
    runs = [_m(scale, "verify", 8, w, 1.0) for w in (5.0, 3.0, 4.0)]
    chosen = scale.median_of(runs)
    assert chosen.wall_s == 4.0
    assert "median of 3 runs (wall s: 5.0, 3.0, 4.0)" in chosen.note
    assert scale.median_of([_m(scale, "plan", 1, 2.0, 1.0)]).note == ""
