"""Issue 19, class 5: a threshold carries the workload it was measured for (catalog
`applies_to`, decided by the one function `gpuctl.catalog.outside_workload`); outside it the
figure is reported with the reason, not judged (tests/data/fixtures/issue19/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.analyze import analyze_text
from gpuctl.catalog import Measured, load_sku, outside_workload, sku_names
from gpuctl.remediation import Remediation
from gpuctl.verdicts import Status

FIX = Path(__file__).parents[1] / "data" / "fixtures"
H100 = "hgx-h100-80gb"


def _verdict(kind: str, path: Path, check: str, sku: str = H100):
    a = analyze_text(kind, path.read_text(), load_sku(sku))
    return [v for v in a.verdicts if v.check == check]


@pytest.mark.parametrize("name", [
    "nccl-allreduce-rtx3090-2node-1gpu-1nic-ok.txt",
    "nccl-allreduce-gh200-2node-1gpu-wrong-at-1MiB-test-failure-nccl-tests369.txt",
])
def test_two_nodes_with_one_gpu_each_are_not_held_to_the_8_gpu_multi_node_floor(name: str) -> None:
    (v,) = _verdict("nccl", FIX / "issue19" / name, "multi_node_busbw_gb_s")
    assert v.status is Status.NOT_APPLICABLE
    assert "1 GPU per node, the threshold is for 8" in v.message and v.threshold == 340


def test_full_nodes_are_still_judged() -> None:
    (v,) = _verdict("nccl", FIX / "nccl" / "nccl-allreduce-2.18.3-2node-16gpu-cx8-mpirun-warnings.txt",
                    "multi_node_busbw_gb_s")
    assert v.status is Status.FAIL  # 16 ranks on 2 hosts: 8 per node, 21 GB/s


def test_8_byte_message_rate_perftest_is_not_held_to_the_bandwidth_floor() -> None:
    (v,) = _verdict("ib_write_bw", FIX / "issue19" / "ib_write_bw-post-list-8B-msgrate-duration-perftest273.txt",
                    "ib_write_bw_gbit_s")
    assert (v.status, v.value) == (Status.NOT_APPLICABLE, pytest.approx(0.48))
    assert "8 B messages" in v.message


def test_large_message_perftest_is_still_judged() -> None:
    (v,) = _verdict("ib_write_bw", FIX / "perftest" / "ib_write_bw-ib-loopback-8M-superbench.txt", "ib_write_bw_gbit_s")
    assert v.status is Status.FAIL


def test_mixed_randrw_fio_is_not_held_to_the_randread_floor() -> None:
    (v,) = _verdict("fio", FIX / "fio" / "fio-nvme-randrw-4k-json-superbench.txt", "fio_randread_iops")
    assert v.status is Status.NOT_APPLICABLE and "rw=randrw" in v.message


def test_randread_fio_is_still_judged() -> None:
    (v,) = _verdict("fio", FIX / "fio" / "fio-nvme-raid0-randread-4k-iouring-racksetup.txt", "fio_randread_iops")
    assert v.status in (Status.PASS, Status.WARN, Status.FAIL)


def test_box_with_one_nic_per_gpu_pair_is_not_failed_for_placement() -> None:
    # 8x H20, 36 NIC names at 4 PCIe sites (one per GPU pair): before, GPUs 1, 3, 5, 7 failed reseat_or_replace
    path = [v for v in _verdict("topo", FIX / "topo" / "topo-h20-8gpu-nv18-36nic-cells-run-together-sglang14092.txt",
                                "gpu_nic_path")]
    assert len(path) == 8 and all(v.status is Status.NOT_APPLICABLE for v in path)
    assert not [v for v in path if v.remediation is Remediation.RESEAT_OR_REPLACE]
    assert "4 fabric NICs for 8 GPUs" in path[1].message and "NODE" in path[1].message


def test_one_nic_per_gpu_box_still_fails_a_far_nic() -> None:
    path = _verdict("topo", FIX / "topo" / "topo-gb200-4gpu-nv18-8nic-all-sys-numa-lists.txt", "gpu_nic_path",
                    "hgx-b200")
    assert [v.status for v in path] == [Status.FAIL] * 4


@pytest.mark.parametrize(("measured", "outside"), [
    (Measured(gpus_per_node=8), False), (Measured(gpus_per_node=1), True), (Measured(), False),
    (Measured(nics=7, gpus=8), False), (Measured(nics=4, gpus=8), True), (Measured(nics=9, gpus=8), False),
])
def test_outside_workload(measured: Measured, outside: bool) -> None:
    sku = load_sku(H100)
    wl = sku.thresholds["multi_node_busbw_gb_s"].applies_to if measured.gpus_per_node or not measured.nics \
        else sku.fabric.gpu_nic_max_path.applies_to  # type: ignore[union-attr]
    assert (outside_workload(wl, measured) is not None) == outside


@pytest.mark.parametrize("name", sku_names())
def test_every_judged_bandwidth_threshold_says_its_workload(name: str) -> None:
    sku = load_sku(name)
    for check in ("all_reduce_busbw_gb_s", "multi_node_busbw_gb_s", "ib_write_bw_gbit_s", "fio_randread_iops",
                  "fio_seqwrite_gb_s"):
        t = sku.thresholds[check]
        assert t.not_applicable or t.applies_to is not None, (name, check)
