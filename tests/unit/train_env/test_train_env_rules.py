"""The training environment in the matrices (issue 16, items 1-2): every shipped matrix pins
one; each rule fires on a matrix broken for it, naming what it compares."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpuctl.catalog import load_sku
from gpuctl.cli.main import main
from gpuctl.errors import InputError
from gpuctl.matrix import Matrix, load_matrix, matrix_names
from gpuctl.paths import matrices_dir
from gpuctl.rules import check_matrix, failures

TODAY = dt.date(2026, 11, 30)
TRAIN_RULES = ("torch-cuda-major", "torch-driver", "torch-gpu-arch", "torch-python-os", "torch-nccl-vs-system",
               "train-env-lock")


def _data(name: str = "r570-cuda12.8") -> dict:
    return yaml.safe_load((matrices_dir() / f"{name}.yaml").read_text())


def broken(mutate, name: str = "r570-cuda12.8") -> Matrix:  # type: ignore[no-untyped-def]
    data = _data(name)
    mutate(data)
    return Matrix.model_validate(data)


def results(matrix: Matrix, rule: str) -> list:  # type: ignore[type-arg]
    return [r for r in check_matrix(matrix, load_sku("hgx-h100-80gb"), today=TODAY) if r.rule == rule]


@pytest.mark.parametrize("name", matrix_names())
def test_every_shipped_matrix_pins_a_training_environment(name: str) -> None:
    te = load_matrix(name).matrix.train_env
    assert te is not None
    assert te.torch.cuda.split(".")[0] == load_matrix(name).matrix.cuda.version.split(".")[0]
    locked = {p.name: p.version for p in te.lock.packages}
    assert locked["torch"] == te.torch.version and locked[te.nccl.name] == te.nccl.version
    assert all(p.sha256 for p in te.lock.packages)
    for rule in TRAIN_RULES:
        assert all(r.status != "fail" for r in results(load_matrix(name).matrix, rule)), rule


def test_figures_from_the_wheel_metadata() -> None:
    """torch 2.8.0 (PyPI, CUDA 12.8 build) pins nvidia-nccl-cu12==2.27.3 and the 12.8.90 runtime."""
    te = load_matrix("r570-cuda12.8").matrix.train_env
    assert te is not None
    assert te.torch.runtime_version == "2.8.0+cu128"
    assert te.nccl.requirement == "nvidia-nccl-cu12==2.27.3"
    assert te.cuda_runtime.requirement == "nvidia-cuda-runtime-cu12==12.8.90"
    assert "METADATA" in te.nccl.source


def test_a_matrix_without_training_environment_fails_every_train_rule() -> None:
    m = broken(lambda d: d.pop("train_env"))
    for rule in TRAIN_RULES:
        assert [r.status for r in results(m, rule)] == ["fail"], rule


def test_torch_built_for_another_cuda_major_fails() -> None:
    m = broken(lambda d: d["train_env"]["torch"].update(cuda="13.0"))
    reasons = [r.reason for r in results(m, "torch-cuda-major") if r.status == "fail"]
    assert any("CUDA 13.0" in r and "12.8" in r for r in reasons)
    assert any("nvidia-nccl-cu12==2.27.3 is a CUDA 12 wheel" in r for r in reasons)


def test_torch_needing_a_newer_driver_than_the_branch_fails_naming_both() -> None:
    m = broken(lambda d: d["train_env"]["torch"].update(cuda="12.9"))
    msg = next(r.reason for r in results(m, "torch-driver"))
    assert "needs driver >= 575.57.08" in msg and "570.133.20" in msg and "R570" in msg
    # the same table as the toolkit rule: a 550 driver under a CUDA 12.8 torch fails too
    m550 = broken(lambda d: d["train_env"]["torch"].update(cuda="12.8"), "r550-cuda12.4")
    assert "fail" in [r.status for r in results(m550, "torch-driver")]


def test_python_the_os_does_not_ship_or_torch_has_no_wheel_for() -> None:
    no_os = broken(lambda d: d["train_env"]["python"].update(ubuntu2204="3.12"))
    reasons = [r.reason for r in results(no_os, "torch-python-os") if r.status == "fail"]
    assert reasons == [next(r for r in reasons if r.startswith("ubuntu2204: the OS ships Python 3.10, not 3.12"))]
    no_wheel = broken(lambda d: d["train_env"]["python"].update(rhel9="3.9"), "r580-cuda13.0")
    assert any("rhel9: torch 2.11.0 has no wheel for Python 3.9" in r.reason
               for r in results(no_wheel, "torch-python-os"))
    missing = broken(lambda d: d["train_env"]["python"].pop("debian12"))
    assert any(r.status == "fail" and r.reason.startswith("debian12:") for r in results(missing, "torch-python-os"))


def test_system_and_torch_nccl_are_both_named_and_a_gap_warns() -> None:
    gap = results(load_matrix("r570-cuda12.8").matrix, "torch-nccl-vs-system")
    assert [r.status for r in gap] == ["warn"]
    assert "2.25.1" in gap[0].reason and "nvidia-nccl-cu12==2.27.3" in gap[0].reason
    same = results(load_matrix("r550-cuda12.4").matrix, "torch-nccl-vs-system")
    assert [r.status for r in same] == ["pass"] and "2.21.5" in same[0].reason


def test_lock_that_disagrees_with_the_pins_fails() -> None:
    def move_nccl(d: dict) -> None:
        for p in d["train_env"]["lock"]["packages"]:
            if p["name"] == "nvidia-nccl-cu12":
                p["version"] = "2.26.2"
    m = broken(move_nccl)
    assert any("nvidia-nccl-cu12==2.27.3" in r.reason and "2.26.2" in r.reason
               for r in results(m, "train-env-lock") if r.status == "fail")
    extra = broken(lambda d: d["train_env"].update(extra_packages=[{"name": "transformers", "version": "4.56.2"}]))
    assert any("transformers==4.56.2 is pinned but not in train_env.lock" in r.reason
               for r in results(extra, "train-env-lock"))


def test_bad_hash_in_the_lock_is_rejected_with_its_line(tmp_path: Path) -> None:
    text = (matrices_dir() / "r570-cuda12.8.yaml").read_text()
    te = load_matrix("r570-cuda12.8").matrix.train_env
    assert te is not None
    good = te.lock.packages[0].sha256[0]
    path = tmp_path / "badhash.yaml"
    path.write_text(text.replace(good, good[:-1] + "Z", 1))
    with pytest.raises(InputError, match=r"badhash.yaml:\d+: train_env.lock.packages.*sha256"):
        load_matrix(str(path))


def test_cli_matrix_check_fails_for_torch_needing_a_newer_driver(tmp_path: Path) -> None:
    data = _data()
    data["train_env"]["torch"]["cuda"] = "12.9"
    data["train_env"]["cuda_runtime"]["version"] = "12.9.79"
    path = tmp_path / "newer-torch.yaml"
    path.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(main, ["matrix", "check", str(path), "--sku", "hgx-h100-80gb"])
    assert res.exit_code == 1, res.output
    assert "torch-driver" in res.output and "575.57.08" in res.output and "570.133.20" in res.output
    assert not failures([r for r in check_matrix(load_matrix("r570-cuda12.8").matrix) if r.rule == "torch-driver"])


def test_torch_build_without_the_gpus_architecture_fails() -> None:
    """B200 (sm_100) needs a CUDA >= 12.8 build: a cu126 torch on an otherwise fine CUDA 12.8 matrix fails."""
    def cu126(d: dict) -> None:
        d["train_env"]["torch"]["cuda"] = "12.6"
        d["train_env"]["cuda_runtime"]["version"] = "12.6.77"
    m = broken(cu126)
    b200 = [r for r in check_matrix(m, load_sku("hgx-b200"), today=TODAY) if r.rule == "torch-gpu-arch"]
    assert [r.status for r in b200] == ["fail"] and "needs a CUDA >= 12.8 build" in b200[0].reason
    assert [r.status for r in results(m, "torch-gpu-arch")] == ["pass"]  # H100 (sm_90) is in every 12.x build
    assert [r.status for r in check_matrix(m, None, today=TODAY) if r.rule == "torch-gpu-arch"] == ["n/a"]
