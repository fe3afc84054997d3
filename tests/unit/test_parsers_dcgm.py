"""dcgmi diag parser, table and JSON (tests/data/fixtures/dcgm/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.analyze import analyze_text
from gpuctl.errors import ParseError
from gpuctl.parsers.dcgm import parse_dcgmi_diag
from gpuctl.verdicts import Status

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "dcgm"


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_p4de_r2_all_pass() -> None:
    r = parse_dcgmi_diag(text("dcgmi-diag-r2-a100-8gpu-p4de-awsome.txt"))
    assert (r.dcgm_version, r.driver_version) == ("3.3.3", "535.104.12")
    assert r.device_ids == ("20b2",) * 8
    assert len(r.tests) == 11
    assert {t.status for t in r.tests} == {"pass"}
    assert r.failed == ()
    pcie = next(t for t in r.tests if t.name == "PCIe")
    assert (pcie.category, pcie.results[0].gpus) == ("Integration", None)
    assert r.tests[0].category == "Deployment"


def test_table_with_failure_on_one_gpu() -> None:
    r = parse_dcgmi_diag(text("dcgmi-diag-r2-table-fail-synthetic.txt"))
    (mem,) = r.failed
    assert (mem.name, mem.category) == ("GPU Memory", "Hardware")
    assert [(x.status, x.gpus) for x in mem.results] == [("fail", (1,)), ("pass", (0,))]
    # the warning names GPU 1: it belongs to GPU 1's failed result, not the last row
    assert mem.results[0].warnings == ("GPU 1 Found 2 uncorrectable memory errors",)
    assert mem.results[1].warnings == ()


def test_json_form() -> None:
    r = parse_dcgmi_diag(text("dcgmi-diag-r2-fail-synthetic.json"))
    assert r.dcgm_version == "3.3.3"
    assert [t.name for t in r.tests] == ["Denylist", "Persistence Mode", "GPU Memory", "PCIe"]
    mem = r.tests[2]
    assert mem.status == "fail"
    assert mem.results[1].gpus == (1,)
    assert mem.results[1].warnings == ("Found 2 uncorrectable memory errors on GPU 1",)
    assert r.tests[3].results[1].status == "skip"
    assert r.tests[0].results[0].gpus == (0, 1)


@pytest.mark.parametrize(
    ("out", "match"),
    [
        ("", "empty"),
        ("Error: Unable to complete diagnostic for group 2. Return: (-21) Host engine connection invalid\n",
         "did not run"),
        ("Successfully ran diagnostic for group.\n+-----+-----+\n", "no test results"),
        ("| Denylist                  | Maybe                                          |\n"
         "+---------------------------+------------------------------------------------+\n", "cannot read"),
        ('{"DCGM GPU Diagnostic": {"test_categories": [], "version": "3.3.3"}}', "no test results"),
        ('{"DCGM GPU Diagnostic": {"test_categories": [', "not valid"),
        ('{"DCGM GPU Diagnostic": {"runtime_error": "GPU 0 not supported", "version": "4.2.3"}}', "did not run"),
    ],
)
def test_unusable_output_raises(out: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_dcgmi_diag(out)


def test_level3_diagnostic_test_row_is_a_test_not_the_header() -> None:
    from gpuctl.parsers.dcgm import parse_dcgmi_diag

    text = (
        "+---------------------------+------------------------------------------------+\n"
        "| Diagnostic                | Result                                         |\n"
        "+===========================+================================================+\n"
        "+-----  Stress  ------------+------------------------------------------------+\n"
        "| Diagnostic                | Fail - GPU: 2                                  |\n"
        "| Memory Bandwidth          | Pass - All                                     |\n"
        "+---------------------------+------------------------------------------------+\n"
    )
    result = parse_dcgmi_diag(text)
    assert [t.name for t in result.tests] == ["Diagnostic", "Memory Bandwidth"]
    assert [t.name for t in result.failed] == ["Diagnostic"]


_FAIL_TABLE = "dcgmi-diag-r2-table-fail-synthetic.txt"
_WARNING_ROW = "| Warning                   | GPU 1 Found 2 uncorrectable memory errors      |\n"


def test_error_row_and_its_continuations_attach_to_the_test() -> None:
    rows = ("| Error                     | GPU 1 Memory test failed: 2 uncorrectable     |\n"
            "|                           | errors at address 0x1f00                       |\n"
            "|                           | Error: GPU 1 has pending page retirements      |\n")
    r = parse_dcgmi_diag(text(_FAIL_TABLE).replace(_WARNING_ROW, rows))
    (mem,) = r.failed
    assert mem.name == "GPU Memory"
    assert mem.results[0].gpus == (1,)
    assert mem.results[0].warnings == (
        "GPU 1 Memory test failed: 2 uncorrectable errors at address 0x1f00",
        "Error: GPU 1 has pending page retirements",
    )
    assert mem.results[1].warnings == ()
    assert [t.name for t in r.tests][-1] == "GPU Memory"


def test_public_go_dcgm52_wrapped_warnings_attach_to_the_failed_gpu() -> None:
    r = parse_dcgmi_diag(text("dcgmi-diag-r2-3.3.1-gpu0-fail-wrapped-go-dcgm52.txt"))
    mem, diag = r.tests
    assert [(x.status, x.gpus) for x in mem.results] == [("pass", (1,)), ("fail", (0,))]
    assert mem.results[0].warnings == ()  # the Info row about GPU 1 is not a warning
    (warning,) = mem.results[1].warnings
    assert warning.startswith("GPU 0 Error using CUDA API cuCtxCreate") and warning.endswith("unavailable'.")
    assert diag.status == "fail" and "cuMemGetInfo" in diag.results[0].warnings[0]


def test_public_dcgm4_per_gpu_rows_are_results() -> None:
    r = parse_dcgmi_diag(text("dcgmi-diag-r1-4.2.3-4gpu-per-gpu-rows-dcgm253.txt"))
    (sw,) = r.tests
    assert r.dcgm_version == "4.2.3"
    assert [(x.status, x.gpus) for x in sw.results] == [("pass", None)] + [("pass", (i,)) for i in range(4)]


def test_dcgm4_per_gpu_fail_row_fails_the_test() -> None:
    out = text("dcgmi-diag-r1-4.2.3-4gpu-per-gpu-rows-dcgm253.txt").replace("GPU2: Pass  ", "GPU2: Fail  ")
    (sw,) = parse_dcgmi_diag(out).tests
    assert sw.status == "fail"
    assert ("fail", (2,)) in [(x.status, x.gpus) for x in sw.results]


def test_text_wrapped_mid_word_is_joined_without_a_space() -> None:
    """dcgmi wraps the Result column at a fixed width, inside words: 'disab' + 'led.' read as
    'disab led.' and 'R' + 'estart' as 'R estart'. A row that filled the column continues
    its word on the next row; one that ended short broke at a space."""
    r = parse_dcgmi_diag(text("dcgmi-diag-r4-memtest-persistence-fail-wrapped-error-rtx.txt"))
    (pm,) = [t for t in r.tests if t.name == "Persistence Mode"]
    assert pm.status == "fail"
    assert pm.results[0].warnings == (
        "Persistence mode for GPU 0 is currently disabled. The DCGM diagnostic requires peristence mode to be "
        'enabled. Enable persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.',)
    (mem,) = [t for t in parse_dcgmi_diag(text("dcgmi-diag-r2-3.3.1-gpu0-fail-wrapped-go-dcgm52.txt")).tests
              if t.name == "GPU Memory"]
    (warning,) = [w for res in mem.results for w in res.warnings]
    assert "Reset GPU. Restart DCGM. Rerun diagnostics. Unable to create CUDA context: " \
           "'CUDA-capable device(s) is/are busy or unavailable'." in warning


def test_h100_r3_cuinit_failure_on_every_gpu() -> None:
    r = parse_dcgmi_diag(text("dcgmi-diag-r3-3.3.8-h100-8gpu-cuinit-fail-nccl-tests264.txt"))
    assert (r.dcgm_version, r.driver_version) == ("3.3.8", "560.35.03")
    assert r.device_ids == ("2330",) * 8
    (mem,) = [t for t in r.tests if t.name == "GPU Memory"]
    assert mem.status == "fail" and mem.results[0].gpus is None
    warnings = mem.results[0].warnings
    assert len(warnings) == 8 and all("Error using CUDA API cuInit" in w for w in warnings)
    assert [int(w.split()[1]) for w in warnings] == list(range(8))


def test_v100_verbose_info_rows_are_not_warnings() -> None:
    r = parse_dcgmi_diag(text("dcgmi-diag-r3-v-3.3.9-v100-info-rows.txt"))
    assert r.dcgm_version == "3.3.9" and r.failed == ()
    assert all(not res.warnings for t in r.tests for res in t.results)


def test_table_cut_inside_its_closing_border_is_read_as_partial_and_not_a_pass() -> None:
    # issue 19 class 2: a cut paste is judged for what it holds, and marked partial (a warning)
    r = parse_dcgmi_diag(text("dcgmi-diag-r2-3.3.9-v100-table-cut-mid-border.txt"))
    assert r.partial is not None and "no closing border" in r.partial
    assert r.failed == ()
    a = analyze_text("dcgm", text("dcgmi-diag-r2-3.3.9-v100-table-cut-mid-border.txt"))
    assert a.status is Status.WARN
    assert [v.check for v in a.verdicts if v.status is Status.WARN] == ["partial_paste"]


def test_one_row_without_a_border_is_partial() -> None:
    r = parse_dcgmi_diag("| Denylist                  | Pass                                           |\n")
    assert [t.name for t in r.tests] == ["Denylist"] and r.partial is not None
