"""Issue 19, class 4: a DCGM run that skipped every test of a category of its level (here all
of Integration, Hardware and Stress of a -r 3 run) validated nothing there and is not a
pass (tests/data/fixtures/issue19/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from gpuctl.analyze import analyze_text
from gpuctl.parsers.dcgm import parse_dcgmi_diag
from gpuctl.verdicts import Status, dcgm_unvalidated

FIX = Path(__file__).parents[1] / "data" / "fixtures"
SKIPPED = FIX / "issue19" / "dcgmi-diag-r3-3.3.9-rtxpro6000-2gpu-all-hw-skip-srun-slurm-on-aws.txt"


def test_categories_whose_every_test_skipped() -> None:
    r = parse_dcgmi_diag(SKIPPED.read_text())
    assert dcgm_unvalidated(r) == {
        "Integration": ["PCIe"], "Hardware": ["GPU Memory"],
        "Stress": ["Targeted Stress", "Targeted Power", "Memory Bandwidth", "EUD Test"],
    }


def test_run_that_skipped_its_hardware_tests_is_not_a_pass() -> None:
    a = analyze_text("dcgm", SKIPPED.read_text())
    assert a.status is Status.WARN
    (v,) = [v for v in a.verdicts if v.check == "dcgm_validated"]
    assert v.status is Status.WARN and "not validated" in v.message and "GPU Memory" in v.message


def test_a_run_whose_categories_all_ran_has_no_validation_warning() -> None:
    a = analyze_text("dcgm", (FIX / "dcgm" / "dcgmi-diag-r2-a100-8gpu-p4de-awsome.txt").read_text())
    assert not [v for v in a.verdicts if v.check == "dcgm_validated"]
    assert a.status is Status.PASS
