"""Issue 19, class 2: a fault in a fragment is reported. A cut paste is judged for what it
shows (exit 1 naming the GPU) and marked partial (a warning), not refused as truncated
(tests/data/fixtures/issue19/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from gpuctl.analyze import analyze_text
from gpuctl.catalog import load_sku
from gpuctl.cli.main import main
from gpuctl.parsers.dcgm import UNNAMED_TEST, parse_dcgmi_diag
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q
from gpuctl.verdicts import Status

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "issue19"
DCGM_R2 = FIX / "dcgmi-diag-r2-fragment-gpu0-fail-thermal-ml-engineering.txt"
DCGM_DEPLOY = FIX / "dcgmi-diag-fragment-deployment-error-gpu3-ml-engineering.txt"
SMI_1OF8 = FIX / "nvidia-smi-q-a100-1of8-elided-remap-pending-ml-engineering.txt"
NVLINK_CUT = FIX / "nvlink-s-a6000-2gpu-hash-command-elided.txt"


def _failed(kind: str, path: Path) -> list:
    return [v for v in analyze_text(kind, path.read_text()).verdicts if v.status is Status.FAIL]


def test_dcgm_fragment_fails_gpu0_and_says_partial() -> None:
    r = parse_dcgmi_diag(DCGM_R2.read_text())
    assert r.partial is not None
    (mem,) = r.tests
    assert [(x.status, x.gpus) for x in mem.results] == [("pass", (1, 2, 3, 4, 5, 6, 7)), ("fail", (0,))]
    assert "Thermal violations totaling 13.3 seconds started" in mem.results[1].warnings[0]
    (v,) = _failed("dcgm", DCGM_R2)
    assert v.subject.gpu == 0
    partial = [v for v in analyze_text("dcgm", DCGM_R2.read_text()).verdicts if v.check == "partial_paste"]
    assert len(partial) == 1 and partial[0].status is Status.WARN


def test_dcgm_fragment_that_starts_at_an_error_row_fails_the_gpu_it_names() -> None:
    r = parse_dcgmi_diag(DCGM_DEPLOY.read_text())
    (t,) = r.tests
    assert (t.category, t.name, t.status, t.results[0].gpus) == ("Deployment", UNNAMED_TEST, "fail", (3,))
    assert t.results[0].warnings == ("GPU 3 has uncorrectable memory errors and row remappings are pending",)
    (v,) = _failed("dcgm", DCGM_DEPLOY)
    assert v.subject.gpu == 3


def test_nvidia_smi_q_one_gpu_of_eight_with_pending_remap() -> None:
    r = parse_nvidia_smi_q(SMI_1OF8.read_text())
    assert r.partial is not None and "'Attached GPUs : 8' but 1" in r.partial and "elided" in r.partial
    (g,) = r.gpus
    assert (g.bus_id, g.remap_pending, g.ecc_dram_correctable) == ("00000000:10:1C.0", True, 177)
    a = analyze_text("nvidia-smi-q", SMI_1OF8.read_text(), load_sku("hgx-a100-80gb"))
    fails = [v for v in a.verdicts if v.status is Status.FAIL]
    assert [v.subject.bus_id for v in fails] == ["00000000:10:1C.0"]
    assert "pending" in fails[0].message
    # the seven GPUs it does not show are not counted as missing
    assert not [v for v in a.verdicts if v.check == "gpu_count"]


def test_cli_exit_1_for_a_fault_in_a_fragment() -> None:
    for kind, path in (("dcgm", DCGM_R2), ("nvidia-smi-q", SMI_1OF8), ("dcgm", DCGM_DEPLOY)):
        res = CliRunner().invoke(main, ["analyze", kind, str(path), "--json"])
        assert res.exit_code == 1, (path.name, res.output)
        assert "partial_paste" in res.output


def test_nvlink_gpu_whose_links_are_elided_is_not_failed_for_them() -> None:
    a = analyze_text("nvlink", NVLINK_CUT.read_text())
    assert a.status is Status.WARN
    assert not [v for v in a.verdicts if v.status is Status.FAIL]
    assert [v.check for v in a.verdicts if v.status is Status.WARN] == ["partial_paste"]
