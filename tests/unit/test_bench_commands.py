"""Command construction (shell-quoted), MPI hostfile, ssh options and judging."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from gpuctl.bench import suites
from gpuctl.bench.judge import effective_sku, judge_output, not_applicable, result_dict
from gpuctl.bench.remote import SshTarget, run
from gpuctl.catalog import Threshold, load_sku
from gpuctl.inventory import load_inventory
from gpuctl.spec import NodeSpec, resolve
from gpuctl.verdicts import Status, Subject

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"

ROOT = Path(__file__).parents[2]
FIX = ROOT / "tests" / "data" / "fixtures"


@pytest.fixture(scope="module")
def lab_specs() -> list[NodeSpec]:
    return resolve(load_inventory(LAB_INVENTORY))


@pytest.fixture(scope="module")
def ib_specs() -> list[NodeSpec]:
    return resolve(load_inventory(ROOT / "inventories" / "h100-8x4.yaml"))


def test_nccl_argv() -> None:
    assert suites.nccl_argv("all_reduce_perf", "8G", 8) == ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2",
                                                            "-g", "8"]


def test_nccl_script_exports_nccl_conf_quoted(lab_specs: list[NodeSpec]) -> None:
    script = suites.nccl_script("all_reduce_perf", suites.SUITES["quick"], lab_specs[0])
    last = script.strip().splitlines()[-1]
    argv = shlex.split(last)
    assert argv[0] == "env" and "NCCL_IB_HCA==rxe0" in argv
    assert argv[-9:] == suites.nccl_argv("all_reduce_perf", "1G", 8)


def test_acceptance_adds_gather_and_scatter() -> None:
    assert suites.SUITES["acceptance"].nccl_tests == ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf")
    assert suites.SUITES["acceptance"].dcgm and not suites.SUITES["quick"].dcgm


def test_hostfile_uses_fabric_addresses_and_gpu_slots(lab_specs: list[NodeSpec]) -> None:
    assert suites.hostfile_text(lab_specs) == "192.168.50.11 slots=8\n192.168.50.12 slots=8\n"


def test_hostfile_falls_back_to_node_address(ib_specs: list[NodeSpec]) -> None:
    text = suites.hostfile_text(ib_specs)
    assert len(text.splitlines()) == len(ib_specs)
    for spec, line in zip(ib_specs, text.splitlines(), strict=True):
        assert line == f"{suites.mpi_host(spec)} slots=8"


def test_mpirun_ring_only_for_two_nodes(lab_specs: list[NodeSpec], ib_specs: list[NodeSpec]) -> None:
    two = suites.mpirun_argv("/h", lab_specs, "all_reduce_perf", "1G", "-o BatchMode=yes")
    assert "NCCL_ALGO=Ring" in two and two[two.index("-np") + 1] == "16"
    assert two[two.index("--map-by") + 1] == "ppr:8:node"
    assert two[-9:] == suites.nccl_argv("all_reduce_perf", "1G", 1)
    four = suites.mpirun_argv("/h", ib_specs, "all_reduce_perf", "1G", "-o BatchMode=yes")
    assert not any(a.startswith("NCCL_ALGO") for a in four) and four[four.index("-np") + 1] == "32"


def _mca(argv: list[str]) -> dict[str, str]:
    return {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "--mca"}


def test_mpirun_launches_from_the_head_only_on_the_fabric(lab_specs: list[NodeSpec], ib_specs: list[NodeSpec]) -> None:
    mca = _mca(suites.mpirun_argv("/h", lab_specs, "all_reduce_perf", "1G", "-i /k -o BatchMode=yes"))
    assert mca["plm_rsh_args"] == "-i /k -o BatchMode=yes"
    assert mca["plm_rsh_no_tree_spawn"] == "1"  # only the head holds the run's key
    # Open MPI's own TCP stays on the hostfile's network (every lab guest has 10.0.2.15 on eth0)
    assert mca["oob_tcp_if_include"] == mca["btl_tcp_if_include"] == "192.168.50.0/24"
    assert _mca(suites.mpirun_argv("/h", ib_specs, "all_reduce_perf", "1G", ""))["oob_tcp_if_include"] == \
        "192.168.0.0/16"


def test_no_interface_restriction_without_fabric_addresses(lab_specs: list[NodeSpec]) -> None:
    bare = [s.model_copy(update={"fabric": s.fabric.model_copy(update={"ports": ()})}) for s in lab_specs]
    assert suites.mpi_networks(bare) == []
    mca = _mca(suites.mpirun_argv("/h", bare, "all_reduce_perf", "1G", ""))
    assert "oob_tcp_if_include" not in mca and "btl_tcp_if_include" not in mca
    assert suites.hostfile_text(bare) == "127.0.0.1 slots=8\n127.0.0.1 slots=8\n"


def test_multi_node_script_is_valid_bash(lab_specs: list[NodeSpec]) -> None:
    rsh = "-i /tmp/gpuctl-bench/R/mpi-ssh-x/id_ed25519 -o IdentitiesOnly=yes -o BatchMode=yes"
    script = suites.multi_node_script(lab_specs, suites.SUITES["quick"], "20250101T000000-bench", rsh)
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert "192.168.50.12 slots=8" in script
    # the plm_rsh_args value with spaces stays one word
    assert shlex.quote(rsh) in script


def test_perftest_server_and_client(lab_specs: list[NodeSpec], ib_specs: list[NodeSpec]) -> None:
    server = suites.perftest_argv("ib_write_bw", lab_specs[0], 0)
    client = suites.perftest_argv("ib_write_bw", lab_specs[1], 0, suites.fabric_address(lab_specs[0], 0))
    assert server == ["ib_write_bw", "-d", "rxe0", "-i", "1", "-p", "18515", "-F", "-s", "65536", "-n", "200",
                      "--report_gbits"]
    assert client == [*server, "192.168.50.11"]
    # a real fabric: 1 MiB messages, one port per HCA
    real = suites.perftest_argv("ib_write_bw", ib_specs[0], 3)
    assert real[real.index("-d") + 1] == ib_specs[0].fabric.ports[3].hca
    assert real[real.index("-p") + 1] == "18518" and real[real.index("-s") + 1] == "1048576"
    lat = suites.perftest_argv("ib_write_lat", ib_specs[0], 0)
    assert lat[lat.index("-s") + 1] == "2" and "--report_gbits" not in lat


@pytest.mark.parametrize("job", sorted(suites.FIO_JOBS))
def test_fio_never_touches_a_device_or_existing_data(lab_specs: list[NodeSpec], job: str) -> None:
    script = suites.fio_script(job, lab_specs[0], suites.SUITES["quick"], "RUN1")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    folder = "/raid/.gpuctl-bench-RUN1-" + job
    assert "mountpoint -q /raid" in script
    assert f"gpuctl_scratch={folder}\n" in script and 'mkdir -- "$gpuctl_scratch" ||' in script
    assert """trap 'rm -rf -- "$gpuctl_scratch"' EXIT""" in script
    argv = shlex.split(script.strip().splitlines()[-1])
    assert f"--directory={folder}" in argv and "--output-format=json" in argv
    assert not any(a.startswith("--filename") for a in argv) and "/dev/" not in script
    assert "--size=256M" in argv and "--runtime=10" in argv


def test_fio_guard_refuses_a_folder_that_is_not_a_mount(tmp_path: Path) -> None:
    spec_script = suites._scratch_guard(str(tmp_path / "nomount"), str(tmp_path / "nomount" / "x"), 1)
    proc = subprocess.run(["bash", "-c", spec_script + "echo ran"], capture_output=True, text=True)
    assert proc.returncode == suites.EXIT_NOT_A_MOUNT and "not a mount point" in proc.stderr


def test_fio_guard_refuses_an_existing_folder_and_removes_only_its_own() -> None:
    # '/' is a mount point everywhere; '/proc/self' exists, so mkdir must refuse it
    proc = subprocess.run(["bash", "-c", suites._scratch_guard("/", "/proc/self", 1) + "echo ran"],
                          capture_output=True, text=True)
    assert proc.returncode == suites.EXIT_SCRATCH_EXISTS and "ran" not in proc.stdout


def test_training_script_quotes_and_sends_the_program(lab_specs: list[NodeSpec]) -> None:
    script = suites.training_script(lab_specs[0], suites.SUITES["quick"], "RUN1", 989.0)
    argv = shlex.split(script.strip().splitlines()[-1])
    assert argv == ["$gpuctl_py", f"/tmp/gpuctl-bench/RUN1/{lab_specs[0].node}/train_smoke.py", "--nproc", "8",
                    "--cpu-nproc", "2", "--steps", "40", "--model", "gpt", "--size", "small", "--step-timeout-s", "120",
                    "--peak-tflops", "989"]
    # the training environment's python when it is there, else python3 (issue 16: roles/train_env)
    assert "gpuctl_py=python3\nif [ -x /opt/gpuctl/train-env/bin/python ]; then " \
           "gpuctl_py=/opt/gpuctl/train-env/bin/python; fi\n" in script
    # nodes that share a filesystem (the @local tier) never write the same program file
    other = suites.training_script(lab_specs[1], suites.SUITES["quick"], "RUN1", 989.0)
    assert shlex.split(other.strip().splitlines()[-1])[1] != argv[1]


def test_ssh_options_from_inventory() -> None:
    t = SshTarget(name="n", address="10.0.0.1", port=2222, user="ops", key="~/.ssh/k", known_hosts="/tmp/kh")
    argv = t.argv("echo 'hi there'", 30)
    assert argv[0] == "ssh" and argv[argv.index("-p") + 1] == "2222"
    assert "BatchMode=yes" in argv and "StrictHostKeyChecking=accept-new" in argv
    assert "UserKnownHostsFile=/tmp/kh" in argv and "ops@10.0.0.1" in argv
    assert argv[-1] == "timeout -k 5 30 bash -c " + shlex.quote("echo 'hi there'")
    strict = SshTarget(name="n", address="h", strict_host_keys=True)
    assert "StrictHostKeyChecking=yes" in strict.ssh_options()


def test_local_target_runs_and_times_out() -> None:
    t = SshTarget(name="here", address="@local")
    ok = run(t, "echo \"$((6*7))\"", timeout_s=10)
    assert ok.ok and ok.stdout.strip() == "42"
    slow = run(t, "sleep 5", timeout_s=1)
    assert slow.timed_out and not slow.ok


# ---------------------------------------------------------------- judging


@pytest.fixture(scope="module")
def h100():
    return load_sku("hgx-h100-80gb")


def _nccl() -> str:
    return (FIX / "nccl" / "nccl-allreduce-a100-1node-8gpu-oci.txt").read_text()


def _with(sku, name: str, **kw):
    t = dict(sku.thresholds)
    t[name] = Threshold(**kw)
    return sku.model_copy(update={"thresholds": t})


@pytest.mark.parametrize("threshold, status", [
    ({"min": 200, "source": "test floor"}, Status.PASS),
    ({"min": 200, "warn_below": 300, "source": "test band"}, Status.WARN),
    ({"min": 460, "source": "impossible for an A100"}, Status.FAIL),
    ({"not_applicable": True, "source": "no NVLink on this SKU"}, Status.NOT_APPLICABLE),
])
def test_nccl_busbw_judged_against_threshold(h100, threshold: dict, status: Status) -> None:
    sku = _with(h100, "all_reduce_busbw_gb_s", **threshold)
    j = judge_output("nccl", _nccl(), sku, Subject(node="n1"))
    busbw = [v for v in j.verdicts if v.check == "all_reduce_busbw_gb_s"]
    assert [v.status for v in busbw] == [status]
    assert busbw[0].source.endswith(threshold["source"])


def test_inventory_override_reaches_the_verdict(h100) -> None:
    spec = resolve(load_inventory(LAB_INVENTORY))[0]
    over = spec.model_copy(update={"thresholds": {**spec.thresholds, "ib_write_bw_gbit_s": Threshold(
        min=0.1, source="inventory override: lab Soft-RoCE under TCG")}})
    sku = effective_sku(h100, over)
    text = (FIX / "perftest" / "ib_write_bw-ndr-gbits-client-synthetic.txt").read_text()
    v = judge_output("ib_write_bw", text, sku, Subject(node="a↔b", port="rxe0")).verdicts[0]
    assert v.status is Status.PASS and "Soft-RoCE" in v.source


def test_training_skipped_without_pytorch_is_never_a_pass(h100) -> None:
    j = judge_output("training", '{"skipped": "no PyTorch"}\n', h100, Subject(node="n1"))
    assert j.skipped == "no PyTorch"
    # not a pass, not a failure: the run was not made, and the verdict says why
    assert [v.status for v in j.verdicts] == [Status.NOT_APPLICABLE]
    d = result_dict(j.verdicts[0], "training", "n1", None, j.skipped)
    assert d["message"] == "n1: skipped: no PyTorch" and d["status"] == "not-applicable"


def test_training_pass_judged_with_mfu(h100) -> None:
    text = (FIX / "training" / "ddp-2rank-pass-synthetic.jsonl").read_text()
    j = judge_output("training", text, h100, Subject(node="n1"))
    checks = {v.check: v.status for v in j.verdicts}
    assert checks["train_loss_falls"] is Status.PASS and checks["train_ranks_agree"] is Status.PASS
    assert "train_mfu_fraction" in checks


@pytest.mark.parametrize("text, exit_status, stderr, expect", [
    ("", 127, "bash: line 3: all_reduce_perf: command not found", "tool not installed"),
    ("# nThread 1 nGpus 8\n", 1, "", "exit 1"),
    ("", 0, "", "empty output"),
])
def test_unusable_output_could_not_run(h100, text: str, exit_status: int, stderr: str, expect: str) -> None:
    j = judge_output("nccl", text, h100, Subject(node="n1"), exit_status, stderr)
    assert [v.status for v in j.verdicts] == [Status.ERROR]
    assert expect in j.verdicts[0].message


def test_not_applicable_carries_reason() -> None:
    v = not_applicable("gdsio", "GDS needs OFED on a fabric", Subject(node="n1"))
    assert v.status is Status.NOT_APPLICABLE and v.source == "GDS needs OFED on a fabric"
