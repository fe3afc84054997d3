"""Issue 19: `gpuctl analyze FILE` without a KIND detects the kind and says which it chose;
it refuses (exit 2) a file whose kind it cannot tell or that holds several kinds' marks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.analyze import KINDS, detect_kind
from gpuctl.cli.main import main
from gpuctl.errors import ParseError

FIX = Path(__file__).parents[1] / "data" / "fixtures"
# every fixture folder of a kind, and the kind its real outputs must be detected as
FOLDERS = {"nccl": "nccl", "nccl_log": "nccl-log", "ibv_devinfo": "ibv_devinfo", "lspci": "lspci",
           "nvlink_errors": "nvlink-errors", "ib_counters": "ib-counters",
           "topo": "topo", "ibstat": "ibstat", "nvlink": "nvlink", "fio": "fio", "dcgm": "dcgm",
           "bandwidth": "bandwidth", "gdsio": "gdsio", "xid": "xid", "training": "training"}
NOT_A_KIND = {"nvidia-smi-L-h200-1gpu-580.159.txt", "nvidia-smi-table-h200-1gpu-580.159.txt",
              "nvlink-status-h200-1gpu-no-nvlink-real.txt",
              # torchrun's launcher logs (and a killed peer's stdout, which holds no record) are
              # read by the bench's launcher-log parser, not an analyze kind: refused, rightly
              "torch-nccl-errors-excerpt-public.stderr", "torchrun-gloo-2node-peer-killed-cpu-real.stderr",
              "torchrun-gloo-2node-peer-killed-cpu-real.stdout", "torchrun-gloo-2node-rank-sigkill-cpu-real.stderr",
              "torchrun-rdzv-store-unreachable-cpu-real.stderr", "torchrun-rdzv-timeout-missing-node-cpu-real.stderr"}


def _cases() -> list[tuple[Path, str]]:
    out = []
    for folder, kind in FOLDERS.items():
        out += [(p, kind) for p in sorted((FIX / folder).iterdir()) if p.name != "SOURCES.md"
                and p.name not in NOT_A_KIND]
    for p in sorted((FIX / "perftest").iterdir()):
        if p.name != "SOURCES.md":
            out.append((p, "ib_write_lat" if "_lat" in p.name else "ib_write_bw"))
    for p in sorted((FIX / "nvidia_smi").iterdir()):
        if p.name not in NOT_A_KIND and p.name != "SOURCES.md":
            out.append((p, "nvidia-smi-csv" if p.suffix == ".csv" else
                        "nvidia-smi-xml" if "-q-x-" in p.name else "nvidia-smi-q"))
    return out


@pytest.mark.parametrize(("path", "kind"), _cases(), ids=lambda x: getattr(x, "name", x))
def test_every_real_output_is_detected_as_its_kind(path: Path, kind: str) -> None:
    assert kind in KINDS
    assert detect_kind(path.read_text())[0] == kind


@pytest.mark.parametrize("name", sorted(p.name for p in (FIX / "issue19").iterdir() if p.name != "SOURCES.md"))
def test_issue19_pastes_with_their_noise_are_detected(name: str) -> None:
    kind, evidence = detect_kind((FIX / "issue19" / name).read_text())
    assert kind in KINDS and evidence.startswith(f"detected as {kind} from the line")


def test_cli_names_the_kind_it_chose() -> None:
    path = FIX / "issue19" / "nccl-allreduce-gh200-2node-1gpu-wrong-at-1MiB-test-failure-nccl-tests369.txt"
    res = CliRunner().invoke(main, ["analyze", str(path), "--json"])
    assert res.exit_code == 1  # the data check fails, as with the kind given
    doc = json.loads(res.output)
    assert doc["kind"] == "nccl" and doc["detected"].startswith("detected as nccl")


@pytest.mark.parametrize(("text", "match"), [
    ("mdadm: /dev/md0 has been started with 4 drives.\n", "cannot tell which tool"),
    ((FIX / "ibstat" / "ibstat-a100-hdr-active.txt").read_text()
     + (FIX / "dcgm" / "dcgmi-diag-r2-a100-8gpu-p4de-awsome.txt").read_text(), "ambiguous: marks of 2 kinds"),
])
def test_unknown_or_ambiguous_is_refused_with_exit_2(text: str, match: str, tmp_path: Path) -> None:
    with pytest.raises(ParseError, match=match):
        detect_kind(text)
    f = tmp_path / "paste.txt"
    f.write_text(text)
    res = CliRunner().invoke(main, ["analyze", str(f)])
    assert res.exit_code == 2 and "give the kind" in res.output


def test_a_kind_without_a_file_is_a_usage_error() -> None:
    assert CliRunner().invoke(main, ["analyze", "nccl"]).exit_code == 2
