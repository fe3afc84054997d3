"""Matrix rules: the shipped matrices pass; a deliberately broken matrix per rule fails it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpuctl.catalog import load_sku
from gpuctl.cli.main import main
from gpuctl.errors import InputError
from gpuctl.matrix import load_matrix, matrix_names
from gpuctl.paths import matrices_dir
from gpuctl.rules import RULES, check_matrix, failures

TODAY = dt.date(2026, 11, 30)


def broken(mutate) -> object:  # type: ignore[no-untyped-def]
    data = yaml.safe_load((matrices_dir() / "r570-cuda12.8.yaml").read_text())
    mutate(data)
    from gpuctl.matrix import Matrix

    return Matrix.model_validate(data)


def statuses(matrix, rule: str, sku: str | None = "hgx-h100-80gb") -> list[str]:  # type: ignore[no-untyped-def]
    return [r.status for r in check_matrix(matrix, load_sku(sku) if sku else None, today=TODAY) if r.rule == rule]


@pytest.mark.parametrize("name", matrix_names())
def test_shipped_matrices_pass_every_rule(name: str) -> None:
    results = check_matrix(load_matrix(name).matrix, load_sku("hgx-h100-80gb"), today=TODAY)
    assert failures(results) == []
    assert {r.rule for r in results} == set(RULES)


def _fm_patch(data: dict) -> None:
    data["fabricmanager"]["version"] = "570.133.21"
    for fam in data["packages"].values():
        for p in fam["fabricmanager"]:
            p["version"] = p["version"].replace("570.133.20", "570.133.21")


CASES = {
    "cuda-min-driver": lambda d: d["driver"].update(version="550.163.01", branch="550"),
    "driver-branch": lambda d: d["driver"].update(branch="565"),
    "fabricmanager-equals-driver": _fm_patch,
    "nccl-build-for-cuda": lambda d: d["nccl"].update(version="2.21.5", cuda="12.4"),
    "cudnn-cuda-major": lambda d: d["cudnn"].update(cuda_major=11),
    "dcgm-cuda-flavour": lambda d: d["dcgm"].update(cuda_major=13),
    "gds-requires-ofed": lambda d: d.pop("ofed"),
    "ofed-supports-os": lambda d: d["ofed"].update(series="9.9"),
    "packages-pinned": lambda d: d["packages"]["debian12"].pop("cuda"),
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_rule_fires_on_a_broken_matrix(rule: str) -> None:
    assert "fail" in statuses(broken(CASES[rule]), rule)
    assert "fail" not in statuses(load_matrix("r570-cuda12.8").matrix, rule)


def test_fabric_manager_one_patch_off_names_both_versions() -> None:
    results = check_matrix(broken(_fm_patch), today=TODAY)
    msgs = [r.reason for r in failures(results) if r.rule == "fabricmanager-equals-driver"]
    assert any("570.133.21" in m and "570.133.20" in m for m in msgs)


def test_cuda_12_8_with_a_550_driver_fails() -> None:
    results = check_matrix(broken(CASES["cuda-min-driver"]), today=TODAY)
    msg = next(r.reason for r in results if r.rule == "cuda-min-driver")
    assert "CUDA 12.8 needs driver >= 570.124.06" in msg and "550.163.01" in msg


def test_gpu_arch_and_open_modules_rules_use_the_sku() -> None:
    old_cuda = broken(lambda d: d["cuda"].update(version="12.4", full_version="12.4.1"))
    assert "fail" in statuses(old_cuda, "gpu-arch-supported", "hgx-b200")
    assert "pass" in statuses(old_cuda, "gpu-arch-supported", "hgx-h100-80gb")
    proprietary = broken(lambda d: d["driver"].update(flavour="proprietary"))
    assert "fail" in statuses(proprietary, "open-modules-blackwell", "hgx-b200")
    assert "n/a" in statuses(proprietary, "open-modules-blackwell", "hgx-h100-80gb")


def test_end_of_life_branch_is_a_warning_not_a_failure() -> None:
    assert statuses(load_matrix("r535-cuda12.2").matrix, "branch-end-of-life") == ["warn"]
    assert statuses(load_matrix("r580-cuda13.0").matrix, "branch-end-of-life") == ["pass"]


def test_wildcard_pins_are_rejected_when_loading(tmp_path: Path) -> None:
    text = (matrices_dir() / "r570-cuda12.8.yaml").read_text().replace("570.133.20-1}", "570.133.20*}", 1)
    path = tmp_path / "wild.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=r"wild.yaml:\d+: packages.*is not an exact version"):
        load_matrix(str(path))


def test_cli_matrix_check(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["matrix", "check", "--all", "--sku", "hgx-h100-80gb"])
    assert ok.exit_code == 0, ok.output
    data = yaml.safe_load((matrices_dir() / "r570-cuda12.8.yaml").read_text())
    _fm_patch(data)
    path = tmp_path / "fm.yaml"
    path.write_text(yaml.safe_dump(data))
    bad = runner.invoke(main, ["matrix", "check", str(path), "--json"])
    assert bad.exit_code == 1
    assert "570.133.21" in bad.output and "570.133.20" in bad.output
    assert runner.invoke(main, ["matrix", "check"]).exit_code == 2
    assert runner.invoke(main, ["matrix", "list"]).exit_code == 0
    shown = runner.invoke(main, ["matrix", "show", "r580-cuda13.0", "--os", "debian12"])
    assert shown.exit_code == 0 and "libnccl2" in shown.output
