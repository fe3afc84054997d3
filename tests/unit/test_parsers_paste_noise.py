"""Issue 19, class 1 and the CSV half of class 7: pastes with a prompt, a command line, an
elision or a launcher trace around intact output are read, not refused; a --query-gpu CSV
with columns gpuctl does not judge is read for the columns it does
(tests/data/fixtures/issue19/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.analyze import analyze_text
from gpuctl.catalog import load_sku
from gpuctl.errors import ParseError
from gpuctl.parsers._common import drop_noise, noise_kind
from gpuctl.parsers.ibstat import parse_ibstat
from gpuctl.parsers.nvidia_smi.query_gpu import parse_query_gpu_csv
from gpuctl.parsers.nvlink import parse_nvlink_status
from gpuctl.verdicts import Status

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "issue19"


def fixture(name: str) -> str:
    return (FIX / name).read_text()


@pytest.mark.parametrize(("line", "kind"), [
    ("$ ibstat", "command line"),
    ("nvidia-smi nvlink -s", "command line"),
    ("### nvidia-smi --query-gpu=index,name --format=csv", "command line"),
    ("ubuntu@ip-172-31-35-99:~$ nvidia-smi nvlink -s", "command line"),
    ("[root@5900X ~]# nvidia-smi nvlink -s", "command line"),
    ("user@GENOA-01:~/nccl-tests$ sudo ./build/./alltoall_perf", "command line"),
    ("# nvidia-smi topo -m", "command line"),
    ("....", "elision"),
    ("\t ...", "elision"),
    ("[...]", "elision"),
    ("…", "elision"),
    ("+ mpirun --allow-run-as-root -c 2 ./local_run_inc.sh", "trace"),
    ("srun: job 1234 queued and waiting for resources", "trace"),
    ("```", "markup"), ("```console", "markup"), ("## server", "markup"),
])
def test_noise_lines_are_recognised(line: str, kind: str) -> None:
    assert noise_kind(line) == kind


@pytest.mark.parametrize("line", [
    "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728",  # nccl-tests' own '#' lines
    "#  Rank  0 Group  0 Pid   8756 on     Meowth device  0 [0x01] NVIDIA GeForce GTX 1050 Ti",
    "+---------------------------+------------------------------------------------+",  # dcgmi border
    "CA 'mlx5_0'", "\tCA type: MT4123", "GPU 0: NVIDIA RTX A6000 (UUID: GPU-f3aa01f8-...)",
    "\t Link 0: 14.062 GB/s", "==============NVSMI LOG==============", "fio-3.33",
    # the tool's own failure must reach the parser
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    "nvidia-smi has failed because it couldn't communicate with the NVIDIA driver.",
    "ibstat: couldn't find any CA",
])
def test_output_lines_are_not_noise(line: str) -> None:
    assert noise_kind(line) is None


def test_noise_dropped_keeps_line_numbers() -> None:
    assert drop_noise("$ ibstat\nCA 'mlx5_0'\n....\n") == "\nCA 'mlx5_0'\n\n"


def test_nothing_but_noise_is_refused() -> None:
    with pytest.raises(ParseError, match="nothing but a command line"):
        parse_ibstat("$ ibstat\n....\n")


def test_ibstat_after_a_prompt() -> None:
    r = parse_ibstat(fixture("ibstat-mt4123-2ca-prompt-sriov.txt"))
    assert [ca.name for ca in r.cas] == ["mlx5_0", "mlx5_1"]
    assert [p.rate_gbps for ca in r.cas for p in ca.ports] == [100.0, 100.0]


def test_nvlink_after_a_user_prompt() -> None:
    r = parse_nvlink_status(fixture("nvlink-s-a100-p4de-gpu0-prompt.txt"))
    (gpu,) = r.gpus
    assert (gpu.index, gpu.active_links) == (0, 12)


def test_nvlink_after_a_hash_command_line_and_elision() -> None:
    r = parse_nvlink_status(fixture("nvlink-s-a6000-2gpu-hash-command-elided.txt"))
    assert [g.index for g in r.gpus] == [0, 1]
    assert r.gpus[0].active_links == 4


def test_query_gpu_csv_with_prompt_and_columns_not_judged() -> None:
    r = parse_query_gpu_csv(fixture("query-gpu-4gpu-prompt-uuid-memory-used-vllm.csv"))
    assert [g.index for g in r.gpus] == [0, 1, 2, 3]
    assert [g.memory_total_mib for g in r.gpus] == [23034] * 4
    assert r.gpus[2].uuid == "GPU-e3386481-63c3-aa75-3b61-363533329fa5"
    assert r.notes == ("columns not judged by gpuctl, skipped: memory.used",)


def test_query_gpu_csv_with_only_unknown_columns_is_refused() -> None:
    with pytest.raises(ParseError, match="none of the fields gpuctl reads"):
        parse_query_gpu_csv("pstate, memory.used [MiB]\nP0, 10 MiB\n")


def test_query_gpu_csv_after_a_bare_command_line_is_judged_against_the_sku() -> None:
    # the command line without a prompt above the header; judged for what it reads: the
    # memory of an L40S is below an H100's
    a = analyze_text("nvidia-smi-csv", fixture("query-gpu-l40s-8gpu-bare-command-line.csv"),
                     load_sku("hgx-h100-80gb"))
    mem = [v for v in a.verdicts if v.check == "memory_total_mib"]
    assert len(mem) == 8 and all(v.status is Status.FAIL for v in mem)


def test_analysis_names_the_lines_it_skipped() -> None:
    a = analyze_text("nvlink", fixture("nvlink-s-a6000-2gpu-hash-command-elided.txt"))
    fig = {f.name: f.value for f in a.figures}
    assert fig["paste_noise_skipped"] == ["line 1: command line '### nvidia-smi nvlink -s'", "line 9: elision '...'"]
