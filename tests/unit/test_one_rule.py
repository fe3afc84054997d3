"""Unit: one rule per judgement (issue 18). Where verify and `gpuctl analyze` judge the same
hardware fact, one function judges it, and both reach the same verdict on the same data."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from gpuctl.checks.model import CheckFailure, Remediation
from gpuctl.parsers.nvidia_smi.model import GpuInfo, NvidiaSmiResult
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q
from gpuctl.verdicts import Status, judge_nvidia_smi
from gpuctl.verdicts import judge_topo as judge_nvidia_topo
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


SKU_CASES = {  # check of verify → (analyze's check, GPU fields)
    "healthy": (None, {}),
    "width x8": ("pcie_width", {"pcie_width_current": 8}),
    "width x16 of max x8": ("pcie_width", {"pcie_width_current": 16, "pcie_width_max": 8}),
    "gen4 max": ("pcie_gen_max", {"pcie_gen_max": 4}),
    "gen1 current (idle)": ("pcie_gen_max", {"pcie_gen_current": 1}),
    "other model": ("gpu_model", {"name": "NVIDIA H100 PCIe"}),
    "less memory": ("memory_total_mib", {"memory_total_mib": 40960}),
}
VERIFY_CHECK = {"pcie_width": "test_gpu_pcie_width", "pcie_gen_max": "test_gpu_pcie_gen",
                "gpu_model": "test_gpu_model", "memory_total_mib": "test_gpu_memory"}


@pytest.mark.parametrize("case", SKU_CASES)
@pytest.mark.parametrize("check", VERIFY_CHECK)
def test_verify_and_analyze_agree_on_the_gpu_against_its_sku(case, check):
    from gpuctl.catalog import load_sku

    spec = inventory_spec("h100-8x4")
    parsed = parse_nvidia_smi_q(H100_Q)
    gpu = replace(parsed.gpus[5], **SKU_CASES[case][1])
    result = replace(parsed, gpus=(*parsed.gpus[:5], gpu, *parsed.gpus[6:]))
    vs = [v for v in judge_nvidia_smi(result, load_sku(spec.sku)) if v.subject.gpu == 5 and v.check == check]
    failed = [v for v in vs if v.status is Status.FAIL]
    analyze = ("fail", failed[0].remediation) if failed else ("pass", None)
    assert _verify(getattr(drv, VERIFY_CHECK[check]), spec, result, "gpu5") == analyze


@pytest.mark.parametrize("code", ["NV18", "NV12", "SYS", "PIX"])
def test_verify_and_analyze_agree_on_an_nvlink_pair(code):
    from gpuctl.catalog import load_sku
    from gpuctl.parsers.topo import parse_topo_matrix

    spec = inventory_spec("h100-8x4")
    text = fixture("topo/topo-h100-8gpu-nonic-awesomemlsys.txt")
    rows = text.splitlines()
    # GPU2↔GPU6 (both directions) set to `code`
    for i, line in enumerate(rows):
        tokens = list(re.finditer(r"\S+", line))
        if tokens and tokens[0].group() in ("GPU2", "GPU6"):
            t = tokens[7 if tokens[0].group() == "GPU2" else 3]  # the other GPU's column
            rows[i] = line[:t.start()] + code.ljust(len(t.group())) + line[t.end():]
    topo = parse_topo_matrix("\n".join(rows) + "\n")
    assert topo.link("GPU2", "GPU6") == code
    p = probe(spec, {})
    p._parsed["topo"] = topo
    try:
        drv.test_nvlink_pair(None, spec, p, "gpu2-gpu6")
        verify = ("pass", None)
    except CheckFailure as exc:
        verify = ("fail", exc.remediation)
    bad = [v for v in judge_nvidia_topo(topo, load_sku(spec.sku)) if v.check == "nvlink_pair"
           and {v.subject.gpu, v.subject.peer} == {2, 6}]
    assert verify == (("fail", bad[0].remediation) if bad else ("pass", None))


@pytest.mark.parametrize("rate", [400, 800, 200, 100])
def test_verify_analyze_and_preflight_agree_on_a_port_rate(rate):
    """One HCA port's rate (mlx5_0/1 of the h100-8x4 cluster, whose inventory and SKU say 400 Gb/s):
    verify's network.fabric_port_rate, `gpuctl analyze ibstat` and preflight's hca_rate. Before,
    preflight failed a port faster than the inventory's rate (== instead of >=)."""
    from pathlib import Path

    from gpuctl.catalog import load_sku
    from gpuctl.inventory import load_inventory
    from gpuctl.parsers.ibstat import parse_ibstat
    from gpuctl.paths import inventories_dir
    from gpuctl.preflight import judge_node, parse_preflight
    from gpuctl.verdicts import judge_ibstat

    spec = inventory_spec("h100-8x4")
    ibstat = fixture("ibstat/ibstat-cx7-ndr-ib-8port-active.txt").replace("Rate: 400", f"Rate: {rate}", 1)
    p = probe(spec, {"ibstat": ibstat})
    try:
        role("network").test_fabric_port_rate(None, spec, p, "mlx5_0")
        verify = ("pass", None)
    except CheckFailure as exc:
        verify = ("fail", exc.remediation)
    port = next(v for v in judge_ibstat(parse_ibstat(ibstat), load_sku(spec.sku)) if v.subject.port == "mlx5_0/1")
    analyze = ("fail", port.remediation) if port.status is Status.FAIL else ("pass", None)
    text = (Path(__file__).resolve().parents[1] / "data" / "preflight" / "h100-8gpu-synthetic.txt").read_text()
    line = "mlx5_0 1 MT4129 InfiniBand 4:_ACTIVE "
    text = text.replace(line + "400_Gb", f"{line}{rate}_Gb")
    loaded = load_inventory(inventories_dir() / "h100-8x4.yaml")
    pre = next(v for v in judge_node(parse_preflight(text), spec, loaded)
               if v.check == "hca_rate" and v.subject.port == "mlx5_0/1")
    preflight = ("fail", pre.remediation) if pre.status is Status.FAIL else ("pass", None)
    assert verify == analyze == preflight


@pytest.mark.parametrize(("width", "gts", "gen"), [(16, "32.0", 5), (8, "32.0", 5), (16, "16.0", 4), (4, "8.0", 3)])
def test_preflight_judges_pcie_like_verify(width, gts, gen):
    """PCIe width and maximum generation of one GPU: preflight (sysfs) and verify (nvidia-smi) agree."""
    from pathlib import Path

    from gpuctl.inventory import load_inventory
    from gpuctl.paths import inventories_dir
    from gpuctl.preflight import judge_node, parse_preflight

    spec = inventory_spec("h100-8x4")
    text = (Path(__file__).resolve().parents[1] / "data" / "preflight" / "h100-8gpu-synthetic.txt").read_text()
    line = "0000:3a:00.0 0x2330 0x030200 32.0_GT/s_PCIe 16 32.0_GT/s_PCIe 16"
    assert line in text
    text = text.replace(line, f"0000:3a:00.0 0x2330 0x030200 32.0_GT/s_PCIe {width} {gts}_GT/s_PCIe 16")
    loaded = load_inventory(inventories_dir() / "h100-8x4.yaml")
    pre = {v.check: v for v in judge_node(parse_preflight(text), spec, loaded) if v.subject.bus_id == "0000:3a:00.0"}
    parsed = parse_nvidia_smi_q(H100_Q)
    gpu = replace(parsed.gpus[2], pcie_width_current=width, pcie_gen_max=gen)
    result = replace(parsed, gpus=(*parsed.gpus[:2], gpu, *parsed.gpus[3:]))
    for pre_check, verify_check in (("gpu_pcie_width", "test_gpu_pcie_width"), ("gpu_pcie_gen", "test_gpu_pcie_gen")):
        v = pre[pre_check]
        preflight = ("fail", v.remediation) if v.status is Status.FAIL else ("pass", None)
        assert _verify(getattr(drv, verify_check), spec, result, "gpu2") == preflight, pre_check


@pytest.mark.parametrize(("rdma", "ibstat"), [
    (("ACTIVE", "LINK_UP"), ("Active", "LinkUp")),
    (("DOWN", "DISABLED"), ("Down", "Disabled")),
    (("DOWN", "POLLING"), ("Down", "Polling")),
    (("INIT", "LINK_UP"), ("Initializing", "LinkUp")),
])
def test_verify_and_analyze_agree_on_a_port_state(rdma, ibstat):
    """One port's state, as `rdma link` (verify's network.fabric_port_state) and ibstat (`gpuctl
    analyze ibstat`) print it. Before, verify asked a reseat for every port not up; analyze asks
    by the physical state (Disabled and an unactivated LinkUp are configuration)."""
    import json

    from gpuctl.catalog import load_sku
    from gpuctl.parsers.ibstat import parse_ibstat
    from gpuctl.verdicts import judge_ibstat

    spec = inventory_spec("h100-8x4")
    link = [{"ifindex": 1, "ifname": "mlx5_0", "port": 1, "state": rdma[0], "physical_state": rdma[1]}]
    p = probe(spec, {"rdma -j link": json.dumps(link)})
    try:
        role("network").test_fabric_port_state(None, spec, p, "mlx5_0")
        verify = ("pass", None)
    except CheckFailure as exc:
        verify = ("fail", exc.remediation)
    text = fixture("ibstat/ibstat-cx7-ndr-ib-8port-active.txt")
    head, rest = text.split("Port 1:", 1)
    rest = rest.replace("State: Active", f"State: {ibstat[0]}", 1).replace("Physical state: LinkUp",
                                                                          f"Physical state: {ibstat[1]}", 1)
    port = next(v for v in judge_ibstat(parse_ibstat(head + "Port 1:" + rest), load_sku(spec.sku))
                if v.subject.port == "mlx5_0/1")
    analyze = ("fail", port.remediation) if port.status is Status.FAIL else ("pass", None)
    assert verify == analyze


def test_a_shared_judgement_with_nothing_judged_is_not_a_pass():
    from gpuctl.checks.api import judge_verdicts
    from gpuctl.checks.model import CouldNotRun
    from gpuctl.verdicts import NODE, Verdict

    with pytest.raises(CouldNotRun, match="nothing judged"):
        judge_verdicts([], expected=str, found=str)
    figure = Verdict("ib_port", Status.NO_THRESHOLD, NODE, None, 400, "Gb/s", "x", Remediation.NONE, "rate not printed")
    with pytest.raises(CouldNotRun, match="rate not printed"):
        judge_verdicts([figure], expected=str, found=str)
