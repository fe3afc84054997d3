"""Unit: one rule per judgement (issue 18). Where verify and `gpuctl analyze` judge the same
hardware fact, one function judges it, and both reach the same verdict on the same data."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuctl.checks.model import CheckFailure, Remediation
from gpuctl.parsers.nvidia_smi import GpuInfo, NvidiaSmiResult, parse_nvidia_smi_q
from gpuctl.verdicts import Status, judge_nvidia_smi
from tests.unit.checks_support import fixture, inventory_spec, probe, role

H100_Q = fixture("nvidia_smi/nvidia-smi-q-h100-8gpu-535.161.txt")
drv = role("nvidia_driver")


def _verify(check, spec, result: NvidiaSmiResult, item: str) -> tuple[str, Remediation | None]:
    """Run one verify check on parsed GPU data: ("pass", None) or ("fail", remediation)."""
    p = probe(spec, {})
    p._parsed["nvidia_smi"] = result  # the probe's parsed nvidia-smi, as prefetch leaves it
    try:
        check(None, spec, p, item)
    except CheckFailure as exc:
        return "fail", exc.remediation
    return "pass", None


def _analyze(result: NvidiaSmiResult, gpu: int, checks: set[str]) -> tuple[str, Remediation | None]:
    """`gpuctl analyze nvidia-smi`'s verdicts for one GPU and the given checks, as pass/fail."""
    vs = [v for v in judge_nvidia_smi(result) if v.subject.gpu == gpu and v.check in checks]
    assert vs, f"analyze judged none of {checks}"
    failed = [v for v in vs if v.status is Status.FAIL]
    return ("fail", failed[0].remediation) if failed else ("pass", None)


ECC_CHECKS = {"ecc_volatile_uncorrectable", "ecc_aggregate_uncorrectable", "ecc_dram_correctable",
              "ecc_sram_correctable"}
ECC_CASES = {
    "clean": {},
    "volatile uncorrectable": {"ecc_volatile_uncorrectable": 2},
    "aggregate, rows remapped": {"ecc_aggregate_uncorrectable": 2, "remapped_uncorrectable": 2},
    "aggregate, remap pending": {"ecc_aggregate_uncorrectable": 2, "remapped_uncorrectable": 2,
                                 "remap_pending": True},
    "aggregate, remap failed": {"ecc_aggregate_uncorrectable": 2, "remap_failure": True},
    "aggregate SRAM": {"ecc_aggregate_uncorrectable": 2, "ecc_sram_uncorrectable": 2},
    "corrected DRAM over the limit": {"ecc_dram_correctable": 30_000_000},
}


@pytest.mark.parametrize("case", ECC_CASES)
def test_verify_and_analyze_agree_on_ecc_counts(case):
    spec = inventory_spec("h100-8x4")
    parsed = parse_nvidia_smi_q(H100_Q)
    gpu: GpuInfo = replace(parsed.gpus[3], **{"remap_pending": False, "remap_failure": False, **ECC_CASES[case]})
    result = replace(parsed, gpus=(*parsed.gpus[:3], gpu, *parsed.gpus[4:]))
    assert _verify(drv.test_gpu_ecc_errors, spec, result, "gpu3") == _analyze(result, 3, ECC_CHECKS)
