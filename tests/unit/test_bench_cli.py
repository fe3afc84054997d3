"""`gpuctl bench` through click's CliRunner (no nodes here: the honest could-not-run path)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.cli.main import main
from gpuctl.results import bench_stage

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"

ROOT = Path(__file__).parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on exit: nothing listens there


@pytest.fixture()
def dead_inventory(tmp_path: Path) -> Path:
    text = (LAB_INVENTORY).read_text()
    import yaml

    data = yaml.safe_load(text)
    data["ssh"] = {"user": "root", "known_hosts": str(tmp_path / "known_hosts"), "connect_timeout_s": 3}
    for node in data["nodes"]:
        node["ssh_port"] = _closed_port()
    data.pop("lab", None)
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_unreachable_nodes_exit_3_with_json(dead_inventory: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path / "runs"))
    r = CliRunner().invoke(main, ["bench", str(dead_inventory), "--json"])
    assert r.exit_code == 3, r.output
    out = json.loads(r.output)
    assert set(out["hosts"]) == {"gpu-01", "gpu-02"} and out["status"] == "error"
    for host in out["hosts"].values():
        assert host["status"] == "error"
        assert host["results"][0]["check"] == "connect" and "could not run" in host["results"][0]["message"]
    run = tmp_path / "runs" / out["run_id"]
    assert json.loads((run / "run.json").read_text())["status"] == "error"
    assert (run / "stages" / "bench.json").is_file()


def test_limit_selecting_nothing_is_input_error(dead_inventory: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path / "runs"))
    r = CliRunner().invoke(main, ["bench", str(dead_inventory), "--limit", "nope-*"])
    assert r.exit_code == 2 and "no node" in r.output


def test_unknown_suite_is_usage_error(dead_inventory: Path) -> None:
    r = CliRunner().invoke(main, ["bench", str(dead_inventory), "--suite", "huge"])
    assert r.exit_code == 2


def test_bench_rows_judge_each_nodes_figures_against_its_own_thresholds() -> None:
    """Issue 18: the printed thresholds came from the first node only (as in the report)."""
    from gpuctl.cli.bench import rows

    data = json.loads((Path(__file__).parents[1] / "data" / "report" / "bench-lab-stand-in.json").read_text())
    own = {**data["thresholds"]["all_reduce_busbw_gb_s"], "min": 300.0, "warn_below": 320.0}
    data["hosts"]["gpu-02"]["thresholds"] = {**data["thresholds"], "all_reduce_busbw_gb_s": own}
    got = {r.subject: r.threshold for r in rows(data) if r.check == "all_reduce_busbw_gb_s"}
    assert got["gpu-01"].startswith("≥ 460 GB/s") and got["gpu-02"] == "≥ 300 GB/s (warn below 320)"


def test_json_carries_the_fault_finding_when_it_ran(dead_inventory: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`gpuctl bench --json` is what a scheduler or CI reads: the fault finding's named node,
    HCA and rounds must be there, not only in the run record (the 3-node lab test read
    `localisation` from --json and found no such key, 2026-12-06)."""
    from gpuctl.cli import bench as bench_cli

    found = {"nodes": ["gpu-01", "gpu-02"], "trigger": "always", "rounds": 4, "bound": 4,
             "findings": [{"kind": "node", "nodes": ["gpu-02"], "message": "gpu-02 is slow", "evidence": [0],
                           "hcas": ["rxe0"], "interfaces": ["eth1"]}],
             "steps": [{"round": 1, "stage": "loopback"}]}

    def fake_run_bench(loaded, specs, suite, record, progress=None, localisation=found):
        out = {"run_id": record.id, "suite": suite.name, "status": "fail", "hosts": {},
               "cluster": {"status": "fail", "results": []}}
        if localisation:
            out["localisation"] = localisation
        return bench_stage(out)  # run_bench returns the typed result

    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(bench_cli, "run_bench", fake_run_bench)
    r = CliRunner().invoke(main, ["bench", str(dead_inventory), "--suite", "localise", "--json"])
    assert r.exit_code == 1, r.output
    loc = json.loads(r.output)["localisation"]
    assert loc["rounds"] == 4 and loc["findings"][0]["nodes"] == ["gpu-02"]
    assert loc["findings"][0]["hcas"] == ["rxe0"] and loc["findings"][0]["interfaces"] == ["eth1"]

    monkeypatch.setattr(bench_cli, "run_bench",
                        lambda *a, **k: fake_run_bench(*a, **{**k, "localisation": {}}))
    r = CliRunner().invoke(main, ["bench", str(dead_inventory), "--json"])
    assert "localisation" not in json.loads(r.output)  # it did not run: no empty section
