"""Checks of the train_env role: torch imports in the training environment; torch's version,
CUDA and NCCL are the matrix's; on a GPU node torch sees the SKU's GPU count and a float32
matmul on every GPU matches the CPU's; the installed distributions are exactly the lock's.
For the CPU build (`train_env_build: cpu`) torch.version.cuda must be None, and the NCCL and
GPU checks are skipped as not applicable (a CPU build bundles no NCCL, trains on gloo, uses no
GPU) — reported as skipped with that reason, never as a pass.

One probe per host (templates/train_env/probe.py, written by the role, run with the
environment's own python), parsed once (gpuctl.parsers.train_env); every check reads it.
"""

from __future__ import annotations

import contextlib

import pytest

from gpuctl.checks.api import CouldNotRun, Remediation, expect, fail, for_each
from gpuctl.errors import ParseError
from gpuctl.parsers.train_env import TrainEnvProbe, parse_probe
from gpuctl.shellcmd import sh
from gpuctl.spec import train_env_knob

ROLE = "train_env"


def knob(spec, key: str):  # type: ignore[no-untyped-def]
    """The role's knob as this inventory sets it (role_vars), else its default."""
    return train_env_knob(spec, key)


#: the probe command's exit status when the environment's python is not there
MISSING = 3


def probe_command(spec) -> str:  # type: ignore[no-untyped-def]
    """Run the probe with the environment's python; exit MISSING (not 127, which the Probe
    takes for a missing tool) when that python does not exist."""
    python = sh(f"{knob(spec, 'train_env_path')}/bin/python")
    script = sh(str(knob(spec, "train_env_probe_file")))
    return f"if [ -x {python} ]; then {python} {script} 2>/dev/null; else exit {MISSING}; fi"


def _te(spec):  # type: ignore[no-untyped-def]
    if spec.train_env is None:
        raise CouldNotRun("the matrix pins no training environment for this node")
    return spec.train_env


def _probe(spec, probe) -> TrainEnvProbe:  # type: ignore[no-untyped-def]
    def build() -> TrainEnvProbe:
        out = probe.output("train-env-probe", probe_command(spec), ok_rc=range(0, 256))
        if out.rc and not out.stdout.strip():
            raise CouldNotRun(f"the training environment's python did not run the probe (exit {out.rc}); "
                              f"see {ROLE}.torch_imports")
        return parse_probe(out.stdout)
    try:
        return probe.parsed("train_env_probe", build)
    except ParseError as exc:  # parsed() turns it into CouldNotRun; kept for direct callers
        raise CouldNotRun(str(exc)) from None


def prefetch(spec, probe) -> None:  # type: ignore[no-untyped-def]
    """Run the probe during verify's parallel prefetch (see gpuctl.checks.plugin)."""
    with contextlib.suppress(CouldNotRun):
        _probe(spec, probe)


def test_torch_imports(host, spec, probe):
    te = _te(spec)
    out = probe.output("train-env-probe", probe_command(spec), ok_rc=range(0, 256))
    path = knob(spec, "train_env_path")
    if out.rc and not out.stdout.strip():
        what = "does not exist" if out.rc == MISSING else f"does not run the probe (exit {out.rc})"
        fail(f"{path}/bin/python {what}: the training environment is missing or broken",
             expected=f"{path} with torch {te.torch_runtime_version}", found=f"exit {out.rc}",
             remediation=Remediation.RECONFIGURE)
    p = _probe(spec, probe)
    expect(p.torch is not None and p.error is None, f"`import torch` fails in {path}: {p.error}",
           expected=f"torch {te.torch_runtime_version} imports", found=p.error or "no torch",
           remediation=Remediation.RECONFIGURE)


def _imported(spec, probe) -> TrainEnvProbe:  # type: ignore[no-untyped-def]
    p = _probe(spec, probe)
    if p.torch is None:
        raise CouldNotRun(f"torch does not import ({p.error}); see {ROLE}.torch_imports")
    return p


def test_torch_version(host, spec, probe):
    te, p = _te(spec), _imported(spec, probe)
    expect(p.torch == te.torch_runtime_version, f"torch is {p.torch}, the matrix pins {te.torch_runtime_version}",
           expected=f"torch.__version__ {te.torch_runtime_version} ({spec.matrix})", found=p.torch,
           remediation=Remediation.RECONFIGURE)


def _not_on_cpu_build(spec, what: str) -> None:  # type: ignore[no-untyped-def]
    te = _te(spec)
    if te.build == "cpu":
        pytest.skip(f"not applicable: the CPU build (train_env_build: cpu, torch {te.torch_runtime_version}) {what}")


def test_torch_cuda(host, spec, probe):
    te, p = _te(spec), _imported(spec, probe)
    if te.build == "cpu":
        expect(p.cuda is None, f"torch is built for CUDA {p.cuda}; the node's build is the CPU build",
               expected=f"torch.version.cuda None (CPU build {te.torch_runtime_version})", found=str(p.cuda),
               remediation=Remediation.RECONFIGURE)
        return
    expect(p.cuda == te.torch_cuda, f"torch is built for CUDA {p.cuda}, the matrix's build is CUDA {te.torch_cuda}",
           expected=f"torch.version.cuda {te.torch_cuda}", found=str(p.cuda), remediation=Remediation.RECONFIGURE)


def test_torch_nccl(host, spec, probe):
    _not_on_cpu_build(spec, "bundles no NCCL; distributed training runs on gloo")
    te, p = _te(spec), _imported(spec, probe)
    expect(p.nccl == te.nccl_version, f"torch loads NCCL {p.nccl or 'none'}, the matrix pins {te.nccl}",
           expected=f"torch.cuda.nccl.version() {te.nccl_version} ({te.nccl})", found=str(p.nccl),
           remediation=Remediation.RECONFIGURE)


def test_gpu_count(host, spec, probe):
    """torch sees every GPU of the SKU (a GPU missing to CUDA is missing to every job)."""
    _not_on_cpu_build(spec, "uses no GPU")
    p, want = _imported(spec, probe), spec.hardware.gpu_count
    expect(p.device_count == want, f"torch sees {p.device_count} GPU(s), {spec.sku} has {want}",
           expected=f"torch.cuda.device_count() == {want}",
           found=f"{p.device_count} (cuda available: {p.cuda_available})", remediation=Remediation.RESEAT_OR_REPLACE
           if p.cuda_available else Remediation.REBOOT)


def _gpus(spec) -> list[str]:  # type: ignore[no-untyped-def]
    te = spec.train_env  # the CPU build runs no matmul on a GPU (test_gpu_count says why)
    return [f"gpu{i}" for i in range(spec.hardware.gpu_count)] if te is not None and te.build != "cpu" else []


@for_each(_gpus)
def test_gpu_matmul(host, spec, probe, item):
    """A 256x256 float32 matmul on the GPU equals the CPU's within train_env_matmul_rel_tolerance."""
    p, index = _imported(spec, probe), int(item[3:])
    gpu = next((g for g in p.gpus if g.index == index), None)
    if gpu is None:
        raise CouldNotRun(f"torch does not see {item} (it sees {p.device_count}); see {ROLE}.gpu_count")
    if gpu.error is not None or gpu.max_abs_err is None or gpu.max_abs_ref is None:
        fail(f"{item}: the matmul did not run: {gpu.error}", expected="a result", found=gpu.error or "none",
             remediation=Remediation.REBOOT, subject=item)
    tol = float(knob(spec, "train_env_matmul_rel_tolerance"))
    bound = tol * gpu.max_abs_ref
    expect(gpu.max_abs_err <= bound, f"{item} ({gpu.name}): matmul differs from the CPU by {gpu.max_abs_err:.3g}",
           expected=f"max |GPU - CPU| <= {bound:.3g} ({tol:g} x {gpu.max_abs_ref:.3g}, train_env_matmul_rel_tolerance)",
           found=f"{gpu.max_abs_err:.3g}", remediation=Remediation.RESEAT_OR_REPLACE, subject=item)


def test_installed_matches_lock(host, spec, probe):
    te, p = _te(spec), _probe(spec, probe)
    diff = te.differences(p.distributions)
    expect(not diff, "the training environment is not the lock: " + "; ".join(diff),
           expected=f"the {len(te.packages)} distributions of the lock ({spec.matrix})",
           found="; ".join(diff), remediation=Remediation.RECONFIGURE)
