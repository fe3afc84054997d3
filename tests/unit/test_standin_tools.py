"""The lab's emulated GPU tools, run on the host against a profile: every output parses
with gpuctl's real parsers, shows the SKU's figures, and each fault changes what it should."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpuctl.catalog import load_sku
from gpuctl.lab.standin.profile import write_profile
from gpuctl.parsers.bandwidth import parse_bandwidth
from gpuctl.parsers.dcgm import parse_dcgmi_diag
from gpuctl.parsers.gdsio import parse_gdsio
from gpuctl.parsers.nccl import parse_nccl_tests
from gpuctl.parsers.nvidia_smi.model import QUERY_GPU_FIELDS, DriverLibraryMismatch, DriverNotLoaded
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q
from gpuctl.parsers.nvidia_smi.q_xml import parse_nvidia_smi_xml
from gpuctl.parsers.nvidia_smi.query_gpu import parse_query_gpu_csv
from gpuctl.parsers.nvlink import parse_nvlink_status
from gpuctl.parsers.topo import parse_topo_matrix
from gpuctl.verdicts import judge_nccl

LABHW = Path(__file__).resolve().parents[2] / "gpuctl" / "lab" / "standin" / "tools" / "labhw.py"
DRIVER = "580.95.05"


class Node:
    """A fake node root on the host: sysroot, profile, fault file, package info."""

    def __init__(self, root: Path, sku: str = "hgx-h100-80gb") -> None:
        self.root = root
        self.profile = write_profile("gpu-01", sku, 1)
        (root / "profile.json").write_text(json.dumps(self.profile))
        (root / "faults").write_text("")
        (root / "package.json").write_text(json.dumps(
            {"package": "nvidia-smi", "version": f"{DRIVER}-1", "upstream": DRIVER, "driver_version": DRIVER,
             "cuda_version": "13.0"}))
        lib = root / "usr/lib/x86_64-linux-gnu"
        lib.mkdir(parents=True)
        (lib / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{DRIVER}")
        (lib / "libnccl.so.2").symlink_to("libnccl.so.2.27.7")
        self.load_module("nvidia", DRIVER)
        self.load_module("nvidia_fs", "2.26.6")
        run = root / "run"
        run.mkdir()
        (run / "nvhostengine.pid").write_text(f"{os.getpid()}\n")  # a live process: "hostengine running"

    def load_module(self, name: str, version: str | None) -> None:
        path = self.root / "sys/module" / name / "version"
        if version is None:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(version + "\n")

    def faults(self, *lines: str) -> None:
        (self.root / "faults").write_text("".join(line + "\n" for line in lines))

    def env(self, **extra: str) -> dict[str, str]:
        return dict(os.environ, GPUCTL_LAB_SYSROOT=str(self.root), GPUCTL_LAB_PROFILE=str(self.root / "profile.json"),
                    GPUCTL_LAB_FAULTS=str(self.root / "faults"), GPUCTL_LAB_PACKAGE=str(self.root / "package.json"),
                    **extra)

    def run(self, *args: str, ok: bool = True, env: dict[str, str] | None = None,
            argv: list[str] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*(argv or []), sys.executable, str(LABHW), *args], capture_output=True, text=True,
                              env=self.env(**(env or {})), timeout=30, check=False)
        if ok:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def out(self, *args: str, env: dict[str, str] | None = None) -> str:
        return self.run(*args, env=env).stdout


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_nvidia_smi_q_shows_the_sku(node: Node) -> None:
    sku = load_sku("hgx-h100-80gb")
    res = parse_nvidia_smi_q(node.out("nvidia-smi", "-q"))
    assert res.driver_version == DRIVER and res.cuda_version == "13.0"
    assert len(res.gpus) == sku.gpu.count == 8
    assert {g.name for g in res.gpus} == {sku.gpu.model}
    assert {g.memory_total_mib for g in res.gpus} == {sku.gpu.memory_mib}
    assert {(g.pcie_gen_current, g.pcie_width_current) for g in res.gpus} == {(5, 16)}
    assert [g.bus_id for g in res.gpus][:2] == ["00000000:18:00.0", "00000000:2A:00.0"]
    assert all(g.ecc_volatile_uncorrectable == 0 and g.remap_pending is False for g in res.gpus)
    assert len({g.uuid for g in res.gpus}) == 8


def test_xml_and_csv_agree_with_q(node: Node) -> None:
    q = parse_nvidia_smi_q(node.out("nvidia-smi", "-q"))
    x = parse_nvidia_smi_xml(node.out("nvidia-smi", "-q", "-x"))
    fields = ",".join(QUERY_GPU_FIELDS)
    csv_plain = parse_query_gpu_csv(node.out("nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"))
    csv_units = parse_query_gpu_csv(node.out("nvidia-smi", f"--query-gpu={fields}", "--format=csv"))
    for res in (x, csv_plain, csv_units):
        assert [(g.bus_id, g.uuid, g.memory_total_mib, g.pcie_width_current, g.ecc_aggregate_uncorrectable)
                for g in res.gpus] == [(g.bus_id, g.uuid, g.memory_total_mib, g.pcie_width_current,
                                        g.ecc_aggregate_uncorrectable) for g in q.gpus]
    assert csv_plain.gpus[0].driver_version == DRIVER


def test_unknown_query_field_is_refused(node: Node) -> None:
    proc = node.run("nvidia-smi", "--query-gpu=index,bogus.field", "--format=csv", ok=False)
    assert proc.returncode == 2 and 'Field "bogus.field" is not a valid field to query.' in proc.stdout


def test_table_and_list(node: Node) -> None:
    table = node.out("nvidia-smi")
    assert f"Driver Version: {DRIVER}" in table and table.count("NVIDIA H100 80GB HBM3") == 8
    assert len(node.out("nvidia-smi", "-L").splitlines()) == 8


def test_topology_and_nvlink(node: Node) -> None:
    topo = parse_topo_matrix(node.out("nvidia-smi", "topo", "-m"))
    assert len(topo.gpus) == 8 and {link.code for link in topo.gpu_pairs()} == {"NV18"}
    nvl = parse_nvlink_status(node.out("nvidia-smi", "nvlink", "--status"))
    assert [g.active_links for g in nvl.gpus] == [18] * 8
    one = parse_nvlink_status(node.out("nvidia-smi", "nvlink", "--status", "-i", "3"))
    assert [g.index for g in one.gpus] == [3]


def test_nvlink_pairs_fault(node: Node) -> None:
    node.faults("nvlink_pairs")
    topo = parse_topo_matrix(node.out("nvidia-smi", "topo", "-m"))
    nv = {(link.a, link.b) for link in topo.gpu_pairs() if link.code.startswith("NV")}
    assert {tuple(sorted(p)) for p in nv} == {("GPU0", "GPU1"), ("GPU2", "GPU3"), ("GPU4", "GPU5"), ("GPU6", "GPU7")}
    assert topo.link("GPU0", "GPU2") == "NODE" and topo.link("GPU0", "GPU4") == "SYS"


def test_gpu_missing_fault(node: Node) -> None:
    node.faults("gpu_missing gpu=3")
    q = parse_nvidia_smi_q(node.out("nvidia-smi", "-q"))
    assert len(q.gpus) == 7 and "00000000:5D:00.0" not in {g.bus_id for g in q.gpus}
    assert len(parse_topo_matrix(node.out("nvidia-smi", "topo", "-m")).gpus) == 7
    assert len(node.out("nvidia-smi", "-L").splitlines()) == 7
    assert len(parse_dcgmi_diag(node.out("dcgmi", "diag", "-r", "1")).device_ids) == 7


def test_pcie_ecc_remap_faults_touch_one_gpu(node: Node) -> None:
    node.faults("pcie_x8 gpu=3", "ecc_uncorrectable gpu=2", "row_remap_pending gpu=1")
    q = parse_nvidia_smi_q(node.out("nvidia-smi", "-q"))
    assert [g.pcie_width_current for g in q.gpus] == [16, 16, 16, 8, 16, 16, 16, 16]
    assert [g.pcie_width_max for g in q.gpus] == [16] * 8
    assert [bool(g.ecc_volatile_uncorrectable) for g in q.gpus] == [i == 2 for i in range(8)]
    assert [g.remap_pending for g in q.gpus] == [i == 1 for i in range(8)]
    diag = parse_dcgmi_diag(node.out("dcgmi", "diag", "-r", "2"))
    failed = {t.name: t for t in diag.failed}
    assert set(failed) == {"PCIe", "GPU Memory", "Page Retirement/Row Remap"}
    assert failed["PCIe"].results[0].gpus == (3,)


def test_dcgmi_diag_healthy_table_and_json(node: Node) -> None:
    for level in ("1", "2", "3"):
        table = parse_dcgmi_diag(node.out("dcgmi", "diag", "-r", level))
        js = parse_dcgmi_diag(node.out("dcgmi", "diag", "-r", level, "-j"))
        assert not table.failed and not js.failed
        assert table.driver_version == js.driver_version == DRIVER
        assert [t.name for t in table.tests] == [t.name for t in js.tests]
    assert len(table.tests) > len(parse_dcgmi_diag(node.out("dcgmi", "diag", "-r", "1")).tests)


def test_dcgmi_needs_the_host_engine(node: Node) -> None:
    (node.root / "run/nvhostengine.pid").write_text("999999999\n")
    proc = node.run("dcgmi", "diag", "-r", "1", ok=False)
    assert proc.returncode != 0 and "Host engine" in proc.stdout


def test_nccl_busbw_from_the_sku_and_slow_nccl(node: Node) -> None:
    floor = load_sku("hgx-h100-80gb").thresholds["all_reduce_busbw_gb_s"].min
    res = parse_nccl_tests(node.out("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"))
    assert res.gpus == 8 and res.nccl_version == "2.27.7" and res.wrong == 0
    assert res.large_msg_busbw_gb_s > floor
    node.faults("slow_nccl")
    slow = parse_nccl_tests(node.out("all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "8"))
    assert slow.large_msg_busbw_gb_s < floor
    assert slow.large_msg_busbw_gb_s == pytest.approx(0.6 * res.large_msg_busbw_gb_s, rel=0.05)
    for test in ("all_gather_perf", "reduce_scatter_perf"):
        assert parse_nccl_tests(node.out(test, "-b", "1G", "-e", "1G", "-g", "8")).test == test


def _rank(rank: int, size: int = 16, local_size: int = 8) -> dict[str, str]:
    """The environment Open MPI's mpirun gives one rank."""
    return {"OMPI_COMM_WORLD_SIZE": str(size), "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size), "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % local_size)}


ALL_REDUCE_1G = ("all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2", "-g", "1")


def test_nccl_under_mpi_rank_0_prints_the_whole_world(node: Node) -> None:
    res = parse_nccl_tests(node.out(*ALL_REDUCE_1G, env=_rank(0)))
    assert res.gpus == 16 and [r.rank for r in res.ranks] == list(range(16))
    assert [r.device for r in res.ranks] == list(range(8)) * 2
    # rank 0 knows its own host; the other node is named as mpirun's host list would (none here)
    assert res.hosts == (os.uname().nodename, "node1")
    # judged as a multi-node run (more ranks than the SKU has GPUs), bounded by the fabric
    multi = node.profile["figures"]["multi_node_busbw_gb_s"]
    single = parse_nccl_tests(node.out("all_reduce_perf", "-b", "8", "-e", "1G", "-f", "2", "-g", "8"))
    assert 0.9 * multi < res.large_msg_busbw_gb_s <= multi < single.large_msg_busbw_gb_s
    verdict = next(v for v in judge_nccl(res, load_sku("hgx-h100-80gb")) if v.check.endswith("busbw_gb_s"))
    assert verdict.check == "multi_node_busbw_gb_s" and verdict.status.value in {"pass", "warn"}


def test_nccl_under_mpi_other_ranks_are_silent(node: Node) -> None:
    for rank in (1, 7, 8, 15):
        proc = node.run(*ALL_REDUCE_1G, env=_rank(rank))
        assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", rank


def test_nccl_under_mpi_names_the_hosts_mpirun_was_given(node: Node, tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("192.168.50.11 slots=8\n# the peer\n192.168.50.12 slots=8\n")
    # a parent whose command line is mpirun's (rank 0 runs beside mpirun, as its child)
    # (the inner bash runs the tool as a child, not by exec, and shows as `mpirun --hostfile …`)
    spawn = shlex.quote('"${@:2}"; exit $?')
    launcher = ["bash", "-c", f'exec -a mpirun bash -c {spawn} --hostfile {shlex.quote(str(hostfile))} "$@"', "_"]
    res = parse_nccl_tests(node.run(*ALL_REDUCE_1G, env=_rank(0), argv=launcher).stdout)
    assert res.hosts == (os.uname().nodename, "192.168.50.12")
    assert {r.host for r in res.ranks[8:]} == {"192.168.50.12"}


def test_nccl_under_mpi_slow_nccl_and_the_fabric_bound(node: Node) -> None:
    healthy = parse_nccl_tests(node.out(*ALL_REDUCE_1G, env=_rank(0))).large_msg_busbw_gb_s
    node.faults("slow_nccl")
    slow = parse_nccl_tests(node.out(*ALL_REDUCE_1G, env=_rank(0))).large_msg_busbw_gb_s
    assert slow == pytest.approx(0.6 * healthy, rel=0.02)
    node.faults("ib_rate_200 speed=200000")  # a 400G fabric port at 200G
    half = parse_nccl_tests(node.out(*ALL_REDUCE_1G, env=_rank(0))).large_msg_busbw_gb_s
    assert half == pytest.approx(0.5 * healthy, rel=0.02)
    # no multi-node figure in the profile: the fabric's line rate x HCAs per node bounds it
    node.faults()
    profile = json.loads((node.root / "profile.json").read_text())
    del profile["figures"]["multi_node_busbw_gb_s"]
    profile["fabric"] = {"rate_gbps": 100, "hcas": 2}
    (node.root / "profile.json").write_text(json.dumps(profile))
    bound = parse_nccl_tests(node.out(*ALL_REDUCE_1G, env=_rank(0))).large_msg_busbw_gb_s
    assert 0.9 * 25.0 < bound <= 25.0


def test_nccl_under_mpi_a_rank_without_its_gpu_fails(node: Node) -> None:
    node.faults("gpu_missing")
    assert node.run(*ALL_REDUCE_1G, env=_rank(6)).returncode == 0
    proc = node.run(*ALL_REDUCE_1G, env=_rank(7), ok=False)
    assert proc.returncode == 1 and "invalid device ordinal" in proc.stdout


def test_nccl_world_of_one_is_a_plain_run(node: Node) -> None:
    env = {"PYTHONHASHSEED": "0"}
    plain = node.out("all_reduce_perf", "-b", "8", "-e", "1G", "-g", "8", env=env)
    alone = node.out("all_reduce_perf", "-b", "8", "-e", "1G", "-g", "8", env=env | _rank(0, size=1, local_size=1))
    def masked(text: str) -> str:
        return re.sub(r"Pid +\d+", "Pid N", text)

    assert masked(plain) == masked(alone) and parse_nccl_tests(alone).gpus == 8


def test_bwprobe_and_gdsio(node: Node) -> None:
    sku = load_sku("hgx-h100-80gb")
    bw = parse_bandwidth(node.out("gpuctl-bwprobe"))
    assert len(bw.gpus) == 8
    assert min(g.h2d_gb_s for g in bw.gpus) > sku.thresholds["h2d_gb_s"].min
    assert min(min(g.p2p_gb_s.values()) for g in bw.gpus) > sku.thresholds["p2p_gb_s"].min
    run = parse_gdsio(node.out("gdsio", "-f", "/raid/gds", "-d", "0", "-w", "4", "-s", "1G", "-i", "1M", "-x", "0",
                               "-I", "1"))
    assert run.runs[0].io_type == "WRITE" and run.runs[0].throughput_gib_s > 0


def test_driver_library_mismatch_like_the_real_one(node: Node) -> None:
    node.load_module("nvidia", "570.133.20")
    proc = node.run("nvidia-smi", ok=False)
    assert proc.returncode == 18
    assert proc.stdout == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n"
    with pytest.raises(DriverLibraryMismatch):
        parse_nvidia_smi_q(node.run("nvidia-smi", "-q", ok=False).stdout)


def test_driver_not_loaded(node: Node) -> None:
    node.load_module("nvidia", None)
    proc = node.run("nvidia-smi", "-q", ok=False)
    assert proc.returncode == 9
    with pytest.raises(DriverNotLoaded):
        parse_nvidia_smi_q(proc.stdout)


def test_persistence_mode(node: Node) -> None:
    assert {g.persistence_mode for g in parse_nvidia_smi_q(node.out("nvidia-smi", "-q")).gpus} == {False}
    out = node.out("nvidia-smi", "-pm", "1")
    assert out.splitlines()[-1] == "All done." and "Enabled persistence mode for GPU 00000000:18:00.0." in out
    assert {g.persistence_mode for g in parse_nvidia_smi_q(node.out("nvidia-smi", "-q")).gpus} == {True}


@pytest.mark.parametrize("sku", ["hgx-a100-80gb", "hgx-h200-141gb", "hgx-b200", "single-h200"])
def test_other_skus(tmp_path: Path, sku: str) -> None:
    node = Node(tmp_path, sku)
    facts = load_sku(sku)
    q = parse_nvidia_smi_q(node.out("nvidia-smi", "-q"))
    assert len(q.gpus) == facts.gpu.count and q.gpus[0].name == facts.gpu.model
    topo = parse_topo_matrix(node.out("nvidia-smi", "topo", "-m"))
    assert len(topo.gpus) == facts.gpu.count


def test_profile_is_deterministic() -> None:
    a, b = write_profile("gpu-02", "hgx-h100-80gb", 2), write_profile("gpu-02", "hgx-h100-80gb", 2)
    assert a == b and a != write_profile("gpu-01", "hgx-h100-80gb", 1)
    assert [g["bus_id"] for g in a["gpus"]] == [f"00000000:{b.upper()}:00.0" for b in
                                                ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]


def test_quick_suite_all_reduce_judged_fail_only_with_slow_nccl(node: Node) -> None:
    """What the lab's slow_nccl test relies on: the quick suite's all_reduce argv on the
    stand-in, judged against the SKU, passes on a healthy node and fails with slow_nccl."""
    from gpuctl.analyze import analyze_text
    from gpuctl.bench.suites import SUITES, nccl_argv

    sku = load_sku("hgx-h100-80gb")
    argv = nccl_argv("all_reduce_perf", SUITES["quick"].nccl_max_bytes, sku.gpu.count)
    assert analyze_text("nccl", node.out(*argv), sku).status.value in ("pass", "warn")
    node.faults("slow_nccl")
    assert analyze_text("nccl", node.out(*argv), sku).status.value == "fail"
