"""The bench orchestrator end to end on this machine: every node is reached through the
`@local` connector (the hardware tier's path), and the GPU/HCA tools are stand-ins that
print recorded outputs (tests/data/fixtures), since this machine has neither. Real
python3 runs the real training program (no PyTorch here → skipped), and the real RAID
guard refuses to run fio where /raid is not a mount point."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gpuctl.bench.remote import SshTarget
from gpuctl.bench.run import exit_code, run_bench
from gpuctl.bench.suites import SUITES
from gpuctl.errors import ExitCode
from gpuctl.inventory import load_inventory
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"

ROOT = Path(__file__).parents[2]
FIX = ROOT / "tests" / "data" / "fixtures"

STUBS = {
    "all_reduce_perf": FIX / "nccl" / "nccl-allreduce-a100-1node-8gpu-sweep-superbench.txt",
    "mpirun": FIX / "nccl" / "nccl-allreduce-a100-2node-16gpu-oci.txt",
    "gpuctl-bwprobe": FIX / "bandwidth" / "bwprobe-h200-1gpu-synthetic.json",
    "ib_write_bw": FIX / "perftest" / "ib_write_bw-ndr-gbits-client-synthetic.txt",
    "ib_write_lat": FIX / "perftest" / "ib_write_lat-softroce-loopback-sweep-linux-rdma.txt",
}


def _has_torch() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


AUTHORIZED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorsOwnKeyStaysWhereItIs operator@laptop\n"


@pytest.fixture()
def stand_in_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, fixture in STUBS.items():
        tool = bindir / name
        tool.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {tmp_path}/calls.log\ncat {fixture}\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    # every `@local` node is this machine: the multi-node run's SSH trust must land in a
    # home of the test's own, never in this machine's real ~/.ssh/authorized_keys
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text(AUTHORIZED)
    monkeypatch.setenv("HOME", str(home))
    return tmp_path


@pytest.fixture()
def lab_bench(stand_in_tools: Path) -> tuple[dict, RunRecord, Path]:
    loaded = load_inventory(LAB_INVENTORY)
    specs = resolve(loaded)
    targets = {s.node: SshTarget(name=s.node, address="@local") for s in specs}
    record = RunRecord.create("bench", loaded.path, root=stand_in_tools / "runs")
    data = run_bench(loaded, specs, SUITES["quick"], record, targets=targets).dump()  # as written to the record
    return data, record, stand_in_tools


def _by(results: list[dict], test: str) -> list[dict]:
    return [r for r in results if r["test"] == test]


@pytest.mark.skipif(_has_torch(), reason="expects a python3 without PyTorch (the skipped path)")
def test_quick_suite_on_two_nodes(lab_bench: tuple[dict, RunRecord, Path]) -> None:
    data, record, tmp = lab_bench
    assert set(data["hosts"]) == {"gpu-01", "gpu-02"}
    for host in ("gpu-01", "gpu-02"):
        results = data["hosts"][host]["results"]
        # the A100 recording misses the H100 floor of 460 GB/s: a fail naming its source
        busbw = [r for r in _by(results, "all_reduce") if r["check"] == "all_reduce_busbw_gb_s"]
        assert len(busbw) == 1 and busbw[0]["status"] == "fail"
        assert busbw[0]["value"] == pytest.approx(235.1, abs=0.5)
        assert busbw[0]["threshold"] == 460 and "azurehpc" in busbw[0]["source"]
        assert busbw[0]["raw"] == f"raw/{host}/all_reduce.txt"
        assert (record.path / busbw[0]["raw"]).read_text().startswith("$ ")
        # bandwidth probe judged per GPU
        assert {r["check"] for r in _by(results, "bwprobe")} >= {"h2d_gb_s", "d2h_gb_s", "hbm_copy_fraction"}
        # /raid is not a mount point here: fio refuses and says so (could not run, not a pass)
        fio = _by(results, "fio_randread_4k")
        assert fio[0]["status"] == "error" and "not a mount point" in fio[0]["message"]
        # gdsio: GDS is in this matrix (OFED on a fabric), so it runs — behind the same guard
        gds = _by(results, "gdsio")
        assert gds[0]["status"] == "error" and "not a mount point" in gds[0]["message"]
        # no PyTorch → 'skipped: no PyTorch', never a pass
        train = _by(results, "training")
        assert len(train) == 1 and train[0]["skipped"] == "no PyTorch"
        assert train[0]["status"] == "not-applicable" and "skipped: no PyTorch" in train[0]["message"]
    cluster = data["cluster"]["results"]
    bw = _by(cluster, "ib_write_bw")
    assert len(bw) == 1 and bw[0]["subject"] == "gpu-01↔gpu-02 rxe0" and bw[0]["value"] == pytest.approx(392.31)
    assert _by(cluster, "ib_write_lat")[0]["status"] in {"pass", "warn", "fail"}
    multi = _by(cluster, "all_reduce_multi_node")
    assert any(r["check"] == "multi_node_busbw_gb_s" for r in multi)
    assert data["pairing"] == [[["gpu-01", "gpu-02"]]]
    assert data["status"] == "fail" and exit_code(data["status"]) is ExitCode.CHECKS_FAILED
    # the chart data: one series per node plus the multi-node run
    assert [s["label"] for s in data["nccl_series"]].count("gpu-01") == 1
    assert any(s["label"] == "2 nodes" and s["gpus"] == 16 for s in data["nccl_series"])
    # the stage file is what was returned
    assert json.loads((record.path / "stages" / "bench.json").read_text())["status"] == "fail"
    calls = (tmp / "calls.log").read_text()
    assert "all_reduce_perf -b 8 -e 1G -f 2 -g 8" in calls
    assert "ib_write_bw -d rxe0 -i 1 -p 18515 -F -s 65536 -n 200 --report_gbits 192.168.50.11" in calls
    assert "--hostfile /tmp/gpuctl-bench/" in calls and "NCCL_ALGO=Ring" in calls
    # mpirun used the run's own key, which is gone again with its authorized_keys line
    assert f"plm_rsh_args -i /tmp/gpuctl-bench/{record.id}/mpi-ssh-" in calls
    assert (tmp / "home" / ".ssh" / "authorized_keys").read_text() == AUTHORIZED
    assert not list(Path(f"/tmp/gpuctl-bench/{record.id}").glob("mpi-ssh-*"))


def test_exit_codes() -> None:
    assert exit_code("pass") is ExitCode.OK
    assert exit_code("warn") is ExitCode.OK
    assert exit_code("no-threshold") is ExitCode.OK
    assert exit_code("fail") is ExitCode.CHECKS_FAILED
    assert exit_code("error") is ExitCode.EXECUTION


def test_unreachable_node_could_not_run(tmp_path: Path) -> None:
    loaded = load_inventory(LAB_INVENTORY)
    specs = resolve(loaded)
    # port 9 on loopback: nothing listens, ssh fails at once
    targets = {s.node: SshTarget(name=s.node, address="127.0.0.1", port=9, key=None,
                                 known_hosts=str(tmp_path / "kh"), connect_timeout_s=3) for s in specs}
    record = RunRecord.create("bench", loaded.path, root=tmp_path / "runs")
    data = run_bench(loaded, specs, SUITES["quick"], record, targets=targets).dump()
    for host in data["hosts"].values():
        assert [r["check"] for r in host["results"]] == ["connect"]
        assert host["status"] == "error"
    assert data["status"] == "error" and exit_code(data["status"]) is ExitCode.EXECUTION
    assert (record.path / "raw" / "gpu-01" / "connect.txt").is_file()
