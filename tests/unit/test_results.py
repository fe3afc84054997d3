"""One typed result for verify and bench (issue 18): `stages/verify.json` and
`stages/bench.json` are written through `gpuctl.results` and the report reads them only
through it. Writing a result through its model changes nothing of its on-disk shape (old
records and fresh ones alike), an older record without the cluster snapshot gets it from its
inventory file, and a record whose result has a field of the wrong kind is an input error
naming the file and the field (exit 2), not a row the report shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuctl.checks.model import CheckResult, CheckStatus, HostResult, VerifyResult
from gpuctl.cli.main import main
from gpuctl.errors import InputError
from gpuctl.report.gather import build_report
from gpuctl.results import BenchStage, VerifyStage, bench_stage, verify_stage
from gpuctl.runrecord import sha256_file

ROOT = Path(__file__).resolve().parents[2]
RECORDS = sorted((ROOT / "tests" / "data" / "report").glob("bench-*.json"))
NOW = "2025-01-01T12:00:00+00:00"


def _json(data: Any) -> Any:
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_stored_bench_records_read_and_write_back_unchanged(path: Path) -> None:
    """bench-lab-stand-in.json predates issue 18 (no per-node thresholds, no tests, no
    `emulated`); bench-training-cpu-real.json is a real two-launcher run with training."""
    data = json.loads(path.read_text())
    stage = bench_stage(data, path)
    assert isinstance(stage, BenchStage) and stage.dump() == data
    assert stage.hosts and all(r.check for h in stage.hosts.values() for r in h.results)


def test_an_old_record_is_read_with_the_first_nodes_thresholds() -> None:
    old = bench_stage(json.loads((ROOT / "tests/data/report/bench-lab-stand-in.json").read_text()))
    assert all(h.thresholds is None for h in old.hosts.values())
    assert old.thresholds_of("gpu-02") == old.thresholds
    assert old.training.started is False and old.localisation.ran is False


def _verify_result() -> dict[str, Any]:
    ok = CheckResult("n1", "nvidia_driver.gpu_count", "nvidia_driver", CheckStatus.PASS, duration_s=0.25)
    bad = CheckResult("n1", "network.vlan_up[eth1.100]", "network", CheckStatus.FAIL, expected="up", found="down",
                      remediation="reconfigure", message="eth1.100 is down")
    hosts = {"n1": HostResult("n1", [ok, bad]), "n2": HostResult("n2", [], unreachable_reason="ssh: timed out")}
    result = VerifyResult(hosts, duration_s=3.5, run_id="20250101T093000-verify", remote_commands={"n1": 13})
    return {**result.as_dict(), "ssh_config": "Host n1\n", "pytest_args": ["-q", "-p", "no:cacheprovider"]}


def test_a_fresh_verify_result_writes_through_its_model_unchanged() -> None:
    data = _json(_verify_result())
    stage = verify_stage(data)
    assert isinstance(stage, VerifyStage) and stage.dump() == data
    assert stage.status == "fail" and stage.hosts["n2"].status == "unreachable"
    assert [c.check for c in stage.hosts["n1"].failed] == ["network.vlan_up[eth1.100]"]


def _run(root: Path, run_id: str, inventory: dict[str, str], stages: dict[str, Any]) -> None:
    path = root / run_id
    (path / "stages").mkdir(parents=True)
    meta = {"id": run_id, "command": "verify", "started": NOW, "finished": NOW, "status": "fail",
            "inventory": inventory}
    (path / "run.json").write_text(json.dumps(meta))
    for name, data in stages.items():
        (path / "stages" / f"{name}.json").write_text(json.dumps(data))


def test_a_record_without_the_snapshot_gets_it_from_its_inventory_while_unchanged(tmp_path: Path) -> None:
    inv = ROOT / "tests" / "data" / "inventories" / "lab-placeholder.yaml"
    _run(tmp_path / "runs", "20250101T093000-verify", {"path": str(inv), "sha256": sha256_file(inv)},
         {"verify": _verify_result()})
    data = build_report("latest", tmp_path / "runs", NOW)
    assert data["cluster"]["name"] == "lab" and data["cluster"]["sku"] and data["matrix"]["components"]
    # the file changed since (another sha256): nothing is made up
    _run(tmp_path / "other", "20250101T093000-verify", {"path": str(inv), "sha256": "0" * 64},
         {"verify": _verify_result()})
    data = build_report("latest", tmp_path / "other", NOW)
    assert data["cluster"]["name"] == "unknown cluster" and data["matrix"]["components"] == []


@pytest.mark.parametrize("stage, edit, field", [
    ("bench", lambda d: d["hosts"]["gpu-01"]["results"][0].update(status="bogus"), "hosts.gpu-01.results[0].status"),
    ("bench", lambda d: d["cluster"].update(status=7), "cluster.status"),
    ("bench", lambda d: d["hosts"]["gpu-02"]["results"][1].update(value=[1, 2]), "hosts.gpu-02.results[1].value"),
    ("verify", lambda d: d["hosts"]["n1"]["checks"][0].update(status="passed"), "hosts.n1.checks[0].status"),
    ("verify", lambda d: d["hosts"]["n1"].update(counts={"pass": "one"}), "hosts.n1.counts.pass"),
])
def test_a_result_of_the_wrong_kind_is_an_input_error_naming_the_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str, edit: Any, field: str) -> None:
    data = (json.loads((ROOT / "tests/data/report/bench-lab-stand-in.json").read_text()) if stage == "bench"
            else _json(_verify_result()))
    edit(data)
    _run(tmp_path / "runs", f"20250101T100000-{stage}", {"path": "x.yaml", "sha256": "0" * 64}, {stage: data})
    with pytest.raises(InputError) as exc:
        build_report("latest", tmp_path / "runs", NOW)
    assert f"stages/{stage}.json: not a run record gpuctl can read" in str(exc.value)
    assert f"  {field}: " in str(exc.value)
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path / "runs"))
    r = CliRunner().invoke(main, ["report", "latest", "--format", "json"])
    assert r.exit_code == 2 and field in r.output and "Traceback" not in r.output


def _stored(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The bench returns the stored lab record (its run is not what these tests are about)."""
    import gpuctl.bench.run

    data = json.loads((ROOT / "tests/data/report/bench-lab-stand-in.json").read_text())
    monkeypatch.setattr(gpuctl.bench.run, "run_bench", lambda *a, **k: bench_stage(data))  # the typed result
    return data


def test_turnkey_and_rebuild_read_the_bench_result_through_its_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.inventory import load_inventory
    from gpuctl.lock.rebuilding import _bench
    from gpuctl.runrecord import RunRecord
    from gpuctl.spec import resolve
    from gpuctl.turnkey import TurnkeyContext
    from gpuctl.turnkey_stages import bench_stage as turnkey_bench

    data = _stored(monkeypatch)
    loaded = load_inventory(ROOT / "tests" / "data" / "inventories" / "lab-placeholder.yaml")
    specs = resolve(loaded)
    record = RunRecord.create("bench", root=tmp_path / "runs")
    outcome = turnkey_bench(TurnkeyContext(loaded, specs, record, {"suite": "quick"}))
    first = next(r for h in data["hosts"].values() for r in h["results"] if r["status"] in ("fail", "error"))
    assert outcome.status == "fail" and outcome.detail.startswith(f"benchmarks fail: {first['host']}: "
                                                                   f"{first['message']}")
    got = _bench(loaded, specs[0], specs[1:], "quick", record, [])
    assert got is not None and got["status"] == "fail" and got["hosts"] == {"gpu-01": "fail", "gpu-02": "fail"}
    busbw = got["values"]["all_reduce_busbw_gb_s gpu-01"]
    assert busbw == {"gpu-01": data["hosts"]["gpu-01"]["results"][1]["value"]}
