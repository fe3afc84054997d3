"""The training environment's CPU build (issue 16, item 7; roles/train_env `train_env_build:
cpu`): the matrix's `train_env.cpu` (torch 2.13.0+cpu from PyTorch's CPU index, its own lock),
selected by a typed knob; the CUDA rules are not applicable to it (n/a, never pass); its checks
pass on the real probe output of a CPU torch 2.13.0 venv and say why NCCL/GPU checks do not apply."""

from __future__ import annotations

import pytest

from gpuctl.catalog import load_sku
from gpuctl.checks.model import CheckFailure
from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory_text
from gpuctl.matrix import Matrix, load_matrix
from gpuctl.paths import inventories_dir
from gpuctl.rules import CUDA_BUILD_RULES, check_matrix, failures
from gpuctl.spec import resolve
from gpuctl.wheelhouse import _lock_and_python
from tests.unit.checks_support import failure, fixture, probe, role

LAB = (inventories_dir() / "lab.yaml").read_text()
TE = role("train_env")
RECORDED = fixture("train_env/cpu-torch-2.13.0.json")  # a real CPU torch 2.13.0 venv's probe output


def lab(build: str | None = "cpu", matrix: str = "r580-cuda13.0"):  # type: ignore[no-untyped-def]
    text = LAB.replace("train_env_enabled: false", "train_env_enabled: true" + (
        f"\n  train_env_build: {build}" if build is not None else ""))
    text = text.replace("matrix: r580-cuda13.0", f"matrix: {matrix}")
    return load_inventory_text(text, "lab.yaml", inventories_dir())


def test_matrix_pins_a_cpu_build_of_the_same_torch_release_with_its_own_lock() -> None:
    te = load_matrix("r580-cuda13.0").matrix.train_env
    assert te is not None and te.cpu is not None
    assert te.cpu.torch.version == "2.13.0+cpu" and te.cpu.index_url == "https://download.pytorch.org/whl/cpu"
    torch = te.cpu.lock.get("torch")
    assert torch is not None and torch.sha256 == ("6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b",)
    assert "computed here from the wheel file" in te.cpu.lock.source
    assert not any(p.name.startswith("nvidia-") for p in te.cpu.lock.packages)  # no CUDA, no NCCL wheels


def test_the_knob_selects_the_cpu_build_per_inventory() -> None:
    cuda = resolve(lab(None))[0].train_env
    cpu = resolve(lab("cpu"))[0].train_env
    assert cuda is not None and cuda.build == "cuda" and cuda.torch_cuda == "13.0"
    assert cpu is not None and cpu.build == "cpu"
    assert (cpu.torch_version, cpu.torch_runtime_version, cpu.torch_cuda, cpu.nccl) == \
        ("2.13.0+cpu", "2.13.0+cpu", None, None)
    assert "torch==2.13.0+cpu --hash=sha256:6746dbcb" in cpu.lock_text
    assert "nvidia" not in cpu.lock_text and cpu.packages["torch"] == "2.13.0+cpu"
    assert cpu.index_url == "https://download.pytorch.org/whl/cpu"


def test_the_knob_is_typed() -> None:
    bad = LAB.replace("train_env_enabled: false", "train_env_build: gpu")
    with pytest.raises(InputError) as exc:
        load_inventory_text(bad, "lab.yaml", inventories_dir())
    text = str(exc.value)
    assert "train_env_build" in text and "'gpu' is not a known training environment build" in text


def test_a_cpu_build_asked_of_a_matrix_without_one_is_refused_before_any_host() -> None:
    loaded = lab("cpu", matrix="r570-cuda12.8")
    with pytest.raises(InputError) as exc:
        resolve(loaded)
    assert "nothing was touched" in str(exc.value)
    assert any("train_env_build is cpu; the matrix pins no train_env.cpu" in d for d in exc.value.problems)


def test_cuda_rules_are_not_applicable_to_the_cpu_build_never_a_pass() -> None:
    m = load_matrix("r580-cuda13.0").matrix
    sku = load_sku("hgx-h100-80gb")
    cpu = check_matrix(m, sku, ("debian12",), build="cpu")
    for name in CUDA_BUILD_RULES:
        got = [r for r in cpu if r.rule == name]
        assert [r.status for r in got] == ["n/a"], (name, got)
        assert "CPU build" in got[0].reason
    assert not failures(cpu)
    assert [r.status for r in cpu if r.rule == "train-env-lock"] == ["pass"]
    # the matrix alone: the CUDA build judged, the CPU build's line beside it n/a
    both = [r for r in check_matrix(m, sku, ("debian12",)) if r.rule == "torch-driver"]
    assert [r.status for r in both] == ["pass", "n/a"]


def test_cpu_lock_without_a_wheel_for_the_os_python_fails_for_that_inventory() -> None:
    m = load_matrix("r580-cuda13.0").matrix
    got = [r for r in check_matrix(m, None, ("ubuntu2204",), build="cpu") if r.rule == "torch-python-os"]
    assert [r.status for r in got] == ["fail"] and "not 3.10" in got[0].reason
    warn = [r for r in check_matrix(m, None, ("ubuntu2204",)) if r.rule == "torch-python-os"]
    assert [r.status for r in warn] == ["pass", "warn"]


def test_cpu_lock_missing_its_torch_fails() -> None:
    data = load_matrix("r580-cuda13.0").matrix.model_dump(mode="json")
    data["train_env"]["cpu"]["lock"]["packages"] = [p for p in data["train_env"]["cpu"]["lock"]["packages"]
                                                    if p["name"] != "torch"]
    got = [r for r in check_matrix(Matrix.model_validate(data), None, ("debian12",), build="cpu")
           if r.rule == "train-env-lock"]
    assert [(r.status, r.reason) for r in got] == [("fail", "torch==2.13.0+cpu is pinned but not in "
                                                            "train_env.cpu.lock")]


def test_checks_pass_on_a_real_cpu_torch_venv_and_skip_what_does_not_apply() -> None:
    spec = resolve(lab("cpu"))[0]
    pr = probe(spec, {"train-env-probe.py": RECORDED})
    for name in ("test_torch_imports", "test_torch_version", "test_torch_cuda", "test_installed_matches_lock"):
        getattr(TE, name)(None, spec, pr)
    for name, why in (("test_torch_nccl", "bundles no NCCL"), ("test_gpu_count", "uses no GPU")):
        with pytest.raises(pytest.skip.Exception, match=f"not applicable: the CPU build .*{why}"):
            getattr(TE, name)(None, spec, pr)
    assert TE.test_gpu_matmul._gpuctl_items(spec) == []


def test_cpu_checks_fail_on_a_cuda_torch_or_another_version() -> None:
    spec = resolve(lab("cpu"))[0]
    cuda = RECORDED.replace('"cuda": null', '"cuda": "13.0"')
    f = failure(TE.test_torch_cuda, spec, probe(spec, {"train-env-probe.py": cuda}))
    assert "torch.version.cuda None" in str(f.expected)
    other = RECORDED.replace('"torch": "2.13.0+cpu"', '"torch": "2.12.0+cpu"')
    assert "torch is 2.12.0+cpu, the matrix pins 2.13.0+cpu" in str(
        failure(TE.test_torch_version, spec, probe(spec, {"train-env-probe.py": other})))
    with pytest.raises(CheckFailure, match=r"torch 2.12.0\+cpu \(lock 2.13.0\+cpu\)"):
        TE.test_installed_matches_lock(None, spec, probe(spec, {"train-env-probe.py": other}))


def test_the_wheelhouse_of_a_cpu_inventory_is_the_cpu_lock_from_the_cpu_index() -> None:
    lock, python, index = _lock_and_python(lab("cpu"))
    assert python == "3.11" and index == "https://download.pytorch.org/whl/cpu"
    assert {p.name: p.version for p in lock}["torch"] == "2.13.0+cpu"

