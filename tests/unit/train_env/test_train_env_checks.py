"""roles/train_env/checks.py on probe outputs: the recorded CPU-torch output and GPU cases built
from its shape (tests/data/fixtures/train_env/SOURCES.md): healthy passes; wrong torch, wrong
NCCL, fewer GPUs, a matmul off on one GPU, a broken import and a drifted package each fail the
check that exists for it, naming expected and found."""

from __future__ import annotations

import json

import pytest

from gpuctl.checks.model import CouldNotRun, Remediation
from gpuctl.errors import ParseError
from gpuctl.parsers.train_env import parse_probe
from tests.unit.checks_support import failure, fixture, inventory_spec, probe, role

H100 = inventory_spec("h100-8x4")  # r570-cuda12.8: torch 2.8.0+cu128, nvidia-nccl-cu12==2.27.3, 8 GPUs
TE = role("train_env")
RECORDED = fixture("train_env/cpu-torch-2.13.0.json")


def gpu_output(**change) -> str:  # type: ignore[no-untyped-def]
    """The recorded probe JSON as an healthy H100 node of H100's spec would print it."""
    te = H100.train_env
    assert te is not None
    data = json.loads(RECORDED)
    data.update(python="3.10.12", torch=te.torch_runtime_version, cuda=te.torch_cuda, nccl=te.nccl_version,
                nccl_error=None, cuda_available=True, device_count=8,
                gpus=[{"index": i, "name": "NVIDIA H100 80GB HBM3", "max_abs_err": 1.9e-06, "max_abs_ref": 71.3,
                       "error": None} for i in range(8)],
                distributions={**dict.fromkeys(("pip",), "25.1"), **te.packages})
    data.update(change)
    return json.dumps(data) + "\n"


def p(text: str):  # type: ignore[no-untyped-def]
    return probe(H100, {"train-env-probe.py": text})


CHECKS = ("test_torch_imports", "test_torch_version", "test_torch_cuda", "test_torch_nccl", "test_gpu_count",
          "test_installed_matches_lock")


def test_healthy_node_passes_every_check():
    pr = p(gpu_output())
    for name in CHECKS:
        getattr(TE, name)(None, H100, pr)
    items = TE.test_gpu_matmul._gpuctl_items(H100)
    assert items == [f"gpu{i}" for i in range(8)]
    for item in items:
        TE.test_gpu_matmul(None, H100, pr, item)
    assert len(pr.host.ran) == 1 and TE.probe_command(H100) in pr.host.ran[0]  # one probe, read by every check
    assert TE.probe_command(H100) == ("if [ -x /opt/gpuctl/train-env/bin/python ]; then /opt/gpuctl/train-env/bin/"
                                      "python /opt/gpuctl/train-env-probe.py 2>/dev/null; else exit 3; fi")


def test_wrong_torch_version_fails_naming_both():
    f = failure(TE.test_torch_version, H100, p(gpu_output(torch="2.7.1+cu128")))
    assert "torch is 2.7.1+cu128, the matrix pins 2.8.0+cu128" in str(f)
    assert f.remediation == Remediation.RECONFIGURE


def test_wrong_nccl_fails_naming_both():
    f = failure(TE.test_torch_nccl, H100, p(gpu_output(nccl="2.26.2")))
    assert "NCCL 2.26.2" in str(f) and "nvidia-nccl-cu12==2.27.3" in str(f)


def test_wrong_cuda_build_fails():
    f = failure(TE.test_torch_cuda, H100, p(gpu_output(cuda="12.6")))
    assert "CUDA 12.6" in str(f) and "12.8" in str(f)


def test_fewer_gpus_fails_the_count_and_the_missing_gpus_matmul_cannot_run():
    out = gpu_output(device_count=7, gpus=json.loads(gpu_output())["gpus"][:7])
    f = failure(TE.test_gpu_count, H100, p(out))
    assert "torch sees 7 GPU(s), hgx-h100-80gb has 8" in str(f)
    with pytest.raises(CouldNotRun, match="does not see gpu7"):
        TE.test_gpu_matmul(None, H100, p(out), "gpu7")
    TE.test_gpu_matmul(None, H100, p(out), "gpu6")


def test_matmul_mismatch_on_one_gpu_fails_that_gpu_only():
    gpus = json.loads(gpu_output())["gpus"]
    gpus[3]["max_abs_err"] = 0.5
    pr = p(gpu_output(gpus=gpus))
    f = failure(TE.test_gpu_matmul, H100, pr, "gpu3")
    assert "gpu3" in str(f) and "0.5" in str(f) and f.subject == "gpu3"
    assert f.remediation == Remediation.RESEAT_OR_REPLACE
    TE.test_gpu_matmul(None, H100, pr, "gpu2")


def test_matmul_that_raised_fails_naming_the_error():
    gpus = json.loads(gpu_output())["gpus"]
    gpus[5].update(max_abs_err=None, error="RuntimeError: CUDA error: an illegal memory access was encountered")
    f = failure(TE.test_gpu_matmul, H100, p(gpu_output(gpus=gpus)), "gpu5")
    assert "illegal memory access" in str(f)


def test_broken_import_fails_and_the_version_checks_cannot_run():
    out = gpu_output(torch=None, cuda=None, nccl=None, device_count=0, gpus=[],
                     error="ImportError: libcudnn.so.9: cannot open shared object file")
    f = failure(TE.test_torch_imports, H100, p(out))
    assert "libcudnn.so.9" in str(f)
    with pytest.raises(CouldNotRun, match="torch does not import"):
        TE.test_torch_version(None, H100, p(out))


def test_missing_environment_fails_the_import_check():
    pr = probe(H100, {"train-env-probe.py": (3, "", "")})
    f = failure(TE.test_torch_imports, H100, pr)
    assert "/opt/gpuctl/train-env/bin/python does not exist" in str(f)


def test_installed_set_that_is_not_the_lock_fails_naming_each_difference():
    dists = dict(json.loads(gpu_output())["distributions"])
    dists["sympy"] = "1.13.3"
    dists.pop("filelock")
    dists["transformers"] = "4.56.2"
    f = failure(TE.test_installed_matches_lock, H100, p(gpu_output(distributions=dists)))
    text = str(f)
    assert "sympy 1.13.3 (lock 1.14.0)" in text and "filelock missing" in text
    assert "transformers 4.56.2 not in the lock" in text


def test_recorded_cpu_torch_is_judged_against_the_matrix():
    """The real output of a CPU torch 2.13.0 venv on an H100 spec: wrong torch, no CUDA, no NCCL,
    no GPUs, not the lock — every one of them a failure, none a pass."""
    pr = p(RECORDED)
    TE.test_torch_imports(None, H100, pr)
    for name, words in [("test_torch_version", "2.13.0+cpu"), ("test_torch_cuda", "CUDA None"),
                        ("test_torch_nccl", "NCCL none"), ("test_gpu_count", "torch sees 0 GPU(s)"),
                        ("test_installed_matches_lock", "torch 2.13.0+cpu (lock 2.8.0)")]:
        assert words in str(failure(getattr(TE, name), H100, pr)), name


@pytest.mark.parametrize("text", ["", "Traceback (most recent call last):\n", '{"probe": "other", "version": 1}',
                                  '{"probe": "gpuctl-train-env", "version": 2}',
                                  '{"probe": "gpuctl-train-env", "version": 1, "gpus": [{"name": "x"}]}'])
def test_unusable_probe_output_raises(text):
    with pytest.raises(ParseError):
        parse_probe(text)


def test_recorded_output_parses():
    r = parse_probe(RECORDED)
    assert r.torch == "2.13.0+cpu" and r.cuda is None and r.nccl is None and r.device_count == 0
    assert r.distributions["torch"] == "2.13.0+cpu" and r.distributions["typing-extensions"] == "4.16.0"
