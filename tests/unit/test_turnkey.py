"""Turnkey orchestration: order, stop at the first failure, resume, and the hash guard."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuctl.errors import InputError
from gpuctl.paths import inventories_dir
from gpuctl.turnkey import STAGES, StageOutcome, TurnkeyContext, run_turnkey


@pytest.fixture
def inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path / "runs"))
    inv = tmp_path / "h100.yaml"
    shutil.copy(inventories_dir() / "h100-8x4.yaml", inv)
    return inv


class Recorder:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail or set()

    def stages(self):  # type: ignore[no-untyped-def]
        def make(name: str):  # type: ignore[no-untyped-def]
            def fn(ctx: TurnkeyContext) -> StageOutcome:
                self.calls.append(name)
                assert ctx.record.path.is_dir() and len(ctx.specs) == 4
                if name in self.fail:
                    return StageOutcome("fail", f"{name} found a problem")
                return StageOutcome("pass", f"{name} ok")
            return fn
        return {name: make(name) for name in STAGES}


def test_all_stages_run_in_order(inventory: Path) -> None:
    rec = Recorder()
    result = run_turnkey(inventory, rec.stages())
    assert result.ok and rec.calls == list(STAGES)
    assert result.record.meta()["status"] == "pass"
    assert set(result.record.read_stage("turnkey")["stages"]) == set(STAGES)


def test_failure_stops_and_resume_skips_passed_stages(inventory: Path) -> None:
    first = Recorder(fail={"verify"})
    result = run_turnkey(inventory, first.stages())
    assert not result.ok and result.failed_stage == "verify"
    assert first.calls == ["preflight", "provision", "verify"]
    assert "--resume " + result.record.id in result.resume_hint(inventory)
    assert result.record.meta()["status"] == "failed at verify"

    second = Recorder()
    resumed = run_turnkey(inventory, second.stages(), resume=str(result.record.path))
    assert resumed.ok and resumed.record.path == result.record.path
    assert second.calls == ["verify", "bench", "handover"]
    assert resumed.stages["preflight"]["status"] == "skipped"
    assert "passed in an earlier attempt" in resumed.stages["provision"]["detail"]


def test_changed_inventory_voids_the_passed_stages(inventory: Path) -> None:
    result = run_turnkey(inventory, Recorder(fail={"bench"}).stages())
    inventory.write_text(inventory.read_text().replace("cpu_memory_gib: 2048", "cpu_memory_gib: 4096", 1))
    again = Recorder()
    resumed = run_turnkey(inventory, again.stages(), resume=result.record.id)
    assert again.calls == list(STAGES)
    history = resumed.record.read_stage("turnkey")["history"]
    assert any("inventory changed" in h.get("note", "") for h in history)


def test_a_crashing_stage_is_a_recorded_failure(inventory: Path) -> None:
    stages = Recorder().stages()

    def boom(ctx: TurnkeyContext) -> StageOutcome:
        raise RuntimeError("ssh went away")

    stages["provision"] = boom
    result = run_turnkey(inventory, stages)
    assert result.failed_stage == "provision"
    assert "RuntimeError: ssh went away" in result.stages["provision"]["detail"]


def test_resume_of_a_non_turnkey_run_is_refused(inventory: Path, tmp_path: Path) -> None:
    from gpuctl.runrecord import RunRecord

    other = RunRecord.create("verify", inventory)
    with pytest.raises(InputError, match="not a turnkey run"):
        run_turnkey(inventory, Recorder().stages(), resume=str(other.path))
