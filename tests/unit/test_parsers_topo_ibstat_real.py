"""`analyze topo` / `analyze ibstat` on real public outputs (tests/data/fixtures/topo/SOURCES.md,
tests/data/fixtures/ibstat/SOURCES.md).

Each case asserts the figures a careful engineer reads off the output (GPU and NIC count,
the link code of every GPU pair, each GPU's nearest NIC; ports, states, rates, link layers)
and the verdict with and without a SKU. The findings these samples exposed:

- topo: a header pasted without its leading indent was refused ("no matrix header");
- topo: a GPU whose nearest NIC is NODE/SYS (no compute NIC on its PCIe switch) passed an
  HGX SKU: now `gpu_nic_path` per GPU against the SKU's `fabric.gpu_nic_max_path`;
- topo: one GPU against an NVSwitch SKU showed the expected code ('NV18') as measured;
- ibstat: every port that was not Active was blamed on the cable; Disabled and LinkUp
  (Initializing, Down) ports are a configuration matter (interface down, no subnet manager);
- ibstat: an Active port on an adapter slower than the SKU's rate (ConnectX-6 at HDR100 for
  a 400G SKU) was called a degraded cable; now the adapter model is named.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.analyze import analyze_text
from gpuctl.catalog import load_sku
from gpuctl.parsers.ibstat import parse_ibstat
from gpuctl.parsers.topo import parse_topo_matrix
from gpuctl.remediation import Remediation
from gpuctl.verdicts import Status

FIX = Path(__file__).parents[1] / "data" / "fixtures"


def text(kind: str, name: str) -> str:
    return (FIX / kind / name).read_text()


def pairs(codes: dict[tuple[int, int], str], default: str, n: int = 8) -> dict[str, str]:
    """{'GPU0-GPU1': code} for every GPU pair: `codes` where given, else `default`."""
    return {f"GPU{a}-GPU{b}": codes.get((a, b), default) for a in range(n) for b in range(a + 1, n)}


# DGX-1 hybrid cube-mesh (both V100 samples): NV1/NV2 pairs, every other pair over PCIe
_CUBE = {(0, 1): "NV1", (0, 2): "NV1", (0, 3): "NV2", (0, 4): "NV2", (1, 2): "NV2", (1, 3): "NV1", (1, 5): "NV2",
         (2, 3): "NV2", (2, 6): "NV1", (3, 7): "NV1", (4, 5): "NV1", (4, 6): "NV1", (4, 7): "NV2", (5, 6): "NV2",
         (5, 7): "NV1", (6, 7): "NV2"}
_PADDLE = {(0, 1): "NV2", (0, 2): "NV2", (0, 3): "NV1", (0, 4): "NV1", (1, 2): "NV1", (1, 3): "NV1", (1, 5): "NV2",
           (2, 3): "NV2", (2, 6): "NV1", (3, 7): "NV2", (4, 5): "NV2", (4, 6): "NV2", (4, 7): "NV1", (5, 6): "NV1",
           (5, 7): "NV1", (6, 7): "NV2"}

# file, GPUs, NIC columns, every GPU pair's code, nearest NIC per GPU ('PIX NIC0 (mlx5_0)'),
# SKU, overall status with it, the GPUs whose gpu_nic_path fails
TOPO = [
    ("topo-a100sxm40-8gpu-nv12-10nic-tabs-gpucompress.txt", 8, [f"NIC{i}" for i in range(10)],
     pairs({}, "NV12"), [f"PXB NIC{2 * (g // 2)} (mlx5_{2 * (g // 2)})" for g in range(8)],
     "hgx-a100-80gb", Status.PASS, []),
    ("topo-h100pcie-1gpu-nic0-phb-sglang.txt", 1, ["NIC0"], {}, ["PHB NIC0 (mlx5_0)"],
     "hgx-h100-80gb", Status.FAIL, [0]),
    ("topo-h100-8gpu-nv18-8nic-pix-legend-sglang30401.txt", 8, [f"NIC{i}" for i in range(8)],
     pairs({}, "NV18"), [f"PIX NIC{g} (mlx5_{g})" for g in range(8)], "hgx-h100-80gb", Status.PASS, []),
    ("topo-h200-8gpu-nv18-9nic-bond-reformatted-weiziyang.txt", 8, [f"NIC{i}" for i in range(9)],
     pairs({}, "NV18"), ["PIX NIC0 (mlx5_0)"] + [f"PIX NIC{g} (mlx5_{g + 2})" for g in range(1, 8)],
     "hgx-h200-141gb", Status.PASS, []),
    ("topo-gb200-4gpu-nv18-8nic-all-sys-numa-lists.txt", 4, [f"NIC{i}" for i in range(8)],
     pairs({}, "NV18", 4), ["SYS NIC0 (mlx5_0)"] * 4, "hgx-b200", Status.FAIL, [0, 1, 2, 3]),
    ("topo-h20-8gpu-nv18-2nic-no-legend-arthurchiao.txt", 8, ["NIC0", "NIC1"], pairs({}, "NV18"),
     # 2 NICs (one PCIe site) for 8 GPUs: outside the one-NIC-per-GPU placement rule (issue 19 class 5)
     ["SYS NIC0"] * 4 + ["NODE NIC0", "NODE NIC0", "PHB NIC0", "NODE NIC0"], "hgx-h100-80gb", Status.PASS, []),
    ("topo-h20-8gpu-nv18-36nic-cells-run-together-sglang14092.txt", 8, [f"NIC{i}" for i in range(36)],
     pairs({}, "NV18"), ["PIX NIC0 (mlx5_0)", "NODE NIC0 (mlx5_0)", "PIX NIC8 (mlx5_8)", "NODE NIC0 (mlx5_0)",
                         "PIX NIC16 (mlx5_16)", "NODE NIC16 (mlx5_16)", "PIX NIC24 (mlx5_24)",
                         # 36 NIC names at 4 PCIe sites, one per GPU pair: a healthy shared-NIC design,
                         # outside the one-NIC-per-GPU rule (issue 19 class 5), its odd GPUs not failed
                         "NODE NIC16 (mlx5_16)"], "hgx-h100-80gb", Status.PASS, []),
    ("topo-v100-dgx1-8gpu-hybrid-cube-4nic-unsorted-pytorch-ddp.txt", 8, ["mlx5_2", "mlx5_0", "mlx5_3", "mlx5_1"],
     pairs(_CUBE, "SYS"), ["PIX mlx5_0"] * 2 + ["PIX mlx5_1"] * 2 + ["PIX mlx5_2"] * 2 + ["PIX mlx5_3"] * 2,
     "hgx-a100-80gb", Status.FAIL, []),
    ("topo-v100-8gpu-hybrid-cube-1nic-header-unindented-paddle.txt", 8, ["mlx5_0"], pairs(_PADDLE, "NODE"),
     ["NODE mlx5_0"] * 8, "hgx-a100-80gb", Status.FAIL, []),  # 1 NIC for 8 GPUs: placement not judged
]


@pytest.mark.parametrize(("name", "gpus", "nics", "links", "nearest", "sku", "status", "far"), TOPO,
                         ids=[t[0] for t in TOPO])
def test_topo_real_sample(name: str, gpus: int, nics: list[str], links: dict[str, str], nearest: list[str],
                          sku: str, status: Status, far: list[int]) -> None:
    r = parse_topo_matrix(text("topo", name))
    assert (len(r.gpus), list(r.nics), r.notes) == (gpus, nics, ())
    assert r.asymmetric_pairs() == ()
    a = analyze_text("topo", text("topo", name))
    fig = {f.name: f.value for f in a.figures}
    assert (fig["gpus"], fig["nics"], fig["links"]) == (gpus, nics, links)
    assert list(fig["nearest_nic"].values()) == nearest
    assert fig["nvlink_full_mesh"] == (bool(links) and all(c.startswith("NV") for c in links.values()))
    assert a.status is Status.PASS  # without a SKU: only the matrix's own consistency
    judged = analyze_text("topo", text("topo", name), load_sku(sku))
    assert judged.status is status
    path = [v for v in judged.verdicts if v.check == "gpu_nic_path"]
    assert [v.subject.gpu for v in path] == list(range(gpus))
    assert [v.subject.gpu for v in path if v.status is Status.FAIL] == far
    assert all(v.value == n.split()[0] and v.threshold == "PXB" for v, n in zip(path, nearest, strict=True))
    assert all(v.remediation is Remediation.RESEAT_OR_REPLACE for v in path if v.status is Status.FAIL)


def test_topo_header_without_indent_is_read() -> None:
    """Markdown drops the first line's indent; the GPU block was intact but refused."""
    r = parse_topo_matrix(text("topo", "topo-v100-8gpu-hybrid-cube-1nic-header-unindented-paddle.txt"))
    assert r.link("GPU0", "GPU1") == "NV2" and r.link("GPU7", "mlx5_0") == "NODE"
    assert len(r.unconnected_pairs()) == 12 and not r.nvlink_full_mesh()


def test_topo_hybrid_cube_fails_nvswitch_sku_pair_by_pair() -> None:
    a = analyze_text("topo", text("topo", "topo-v100-dgx1-8gpu-hybrid-cube-4nic-unsorted-pytorch-ddp.txt"),
                     load_sku("hgx-a100-80gb"))
    bad = {(v.subject.gpu, v.subject.peer): (v.value, v.remediation) for v in a.verdicts if v.check == "nvlink_pair"}
    assert len(bad) == 28  # no pair has NV12
    assert bad[(0, 3)] == ("NV2", Remediation.RESEAT_OR_REPLACE)
    assert bad[(0, 5)] == ("SYS", Remediation.VENDOR_RMA)
    assert next(v for v in a.verdicts if v.check == "gpu_count").status is Status.PASS


def test_topo_single_gpu_against_nvswitch_sku_reports_no_pairs() -> None:
    a = analyze_text("topo", text("topo", "topo-h100pcie-1gpu-nic0-phb-sglang.txt"), load_sku("hgx-h100-80gb"))
    mesh = next(v for v in a.verdicts if v.check == "nvlink_full_mesh")
    assert (mesh.status, mesh.value, mesh.threshold) == (Status.FAIL, None, "NV18")
    count = next(v for v in a.verdicts if v.check == "gpu_count")
    assert (count.status, count.value, count.threshold) == (Status.FAIL, 1, 8)


def test_topo_36_nics_run_together_reads_every_nic_row() -> None:
    r = parse_topo_matrix(text("topo", "topo-h20-8gpu-nv18-36nic-cells-run-together-sglang14092.txt"))
    assert r.nic_names[32:] == tuple((f"NIC{32 + i}", f"mlx5_bond_{i}") for i in range(4))
    assert (r.link("GPU0", "NIC12"), r.link("GPU0", "NIC13"), r.link("GPU0", "NIC35")) == ("NODE", "NODE", "PIX")
    assert (r.link("NIC12", "NIC13"), r.link("NIC34", "NIC35")) == ("PIX", "NODE")
    assert r.link("GPU4", "NIC32") == "PIX" and r.link("GPU0", "NIC32") == "SYS"


def test_topo_sku_without_nic_limit_and_output_without_nics() -> None:
    single = analyze_text("topo", text("topo", "topo-h100pcie-1gpu-nic0-phb-sglang.txt"), load_sku("single-h200"))
    assert single.status is Status.PASS and not any(v.check == "gpu_nic_path" for v in single.verdicts)
    nonic = analyze_text("topo", text("topo", "topo-h100-8gpu-nonic-awesomemlsys.txt"), load_sku("hgx-h100-80gb"))
    (v,) = [v for v in nonic.verdicts if v.check == "gpu_nic_path"]
    assert v.status is Status.NOT_APPLICABLE and nonic.status is Status.PASS


# file, CAs, ports (name, state, physical state, rate, link layer)
IBSTAT = [
    ("ibstat-cx4-ib-100-and-40-plus-cx4lx-bond-eth10-linuxrdma.txt", ["MT4115", "MT4115", "MT4117"],
     [("mlx5_2/1", "Active", "LinkUp", 100, "InfiniBand"), ("mlx5_3/1", "Active", "LinkUp", 40, "InfiniBand"),
      ("mlx5_bond_0/1", "Active", "LinkUp", 10, "Ethernet")]),
    ("ibstat-cx6-hdr-1ca-initializing-no-sm-lid65535.txt", ["MT4123"],
     [("mlx5_5/1", "Initializing", "LinkUp", 200, "InfiniBand")]),
    ("ibstat-cx6-vf-hdr-1ca-down-but-linkup-sriov.txt", ["MT4124"],
     [("mlx5_6/1", "Down", "LinkUp", 200, "InfiniBand")]),
    ("ibstat-cx3-mlx4-1ca-2port-ib-polling-eth-disabled-linuxrdma.txt", ["MT4099"],
     [("mlx4_0/1", "Down", "Polling", 10, "InfiniBand"), ("mlx4_0/2", "Down", "Disabled", 40, "Ethernet")]),
    ("ibstat-cx6lx-h20-2ca-eth-down-disabled-arthurchiao.txt", ["MT4127", "MT4127"],
     [("mlx5_0/1", "Down", "Disabled", 40, "Ethernet"), ("mlx5_1/1", "Down", "Disabled", 40, "Ethernet")]),
    ("ibstat-cx6-hdr100-1ca-ib-active-mi100.txt", ["MT4123"], [("mlx5_0/1", "Active", "LinkUp", 100, "InfiniBand")]),
]


@pytest.mark.parametrize(("name", "cas", "ports"), IBSTAT, ids=[t[0] for t in IBSTAT])
def test_ibstat_real_sample_figures(name: str, cas: list[str], ports: list[tuple[str, str, str, int, str]]) -> None:
    r = parse_ibstat(text("ibstat", name))
    assert [ca.ca_type for ca in r.cas] == cas
    assert [(p.name, p.state, p.physical_state, p.rate_gbps, p.link_layer) for p in r.ports] == ports
    a = analyze_text("ibstat", text("ibstat", name))
    up = next(v for v in a.verdicts if v.check == "ib_ports_up")
    assert up.value == sum(1 for p in ports if p[1:3] == ("Active", "LinkUp"))
    assert a.status is (Status.PASS if up.value == len(ports) else Status.WARN)
    assert next(f.value for f in a.figures if f.name == "cas") == len(cas)


# file, SKU, {port: (status, remediation, words the message must hold)}, ib_ports_up value
IBSTAT_SKU = [
    ("ibstat-cx6-hdr-1ca-initializing-no-sm-lid65535.txt", "hgx-a100-80gb",
     {"mlx5_5/1": (Status.FAIL, Remediation.RECONFIGURE, "subnet manager (SM lid 0)")}, 0),
    ("ibstat-cx6-vf-hdr-1ca-down-but-linkup-sriov.txt", "hgx-a100-80gb",
     {"mlx5_6/1": (Status.FAIL, Remediation.RECONFIGURE, "physical link up")}, 0),
    ("ibstat-cx3-mlx4-1ca-2port-ib-polling-eth-disabled-linuxrdma.txt", "hgx-h100-80gb",
     {"mlx4_0/1": (Status.FAIL, Remediation.RESEAT_OR_REPLACE, "no link partner: cable")}, 0),
    ("ibstat-cx6lx-h20-2ca-eth-down-disabled-arthurchiao.txt", "hgx-h200-141gb",
     {"mlx5_0/1": (Status.FAIL, Remediation.RECONFIGURE, "port disabled, not a cable fault"),
      "mlx5_1/1": (Status.FAIL, Remediation.RECONFIGURE, "port disabled, not a cable fault")}, 0),
    ("ibstat-cx6-hdr100-1ca-ib-active-mi100.txt", "hgx-h100-80gb",
     {"mlx5_0/1": (Status.FAIL, Remediation.RESEAT_OR_REPLACE, "adapter MT4123 tops out at 200 Gb/s")}, 0),
    ("ibstat-cx6-hdr100-1ca-ib-active-mi100.txt", "hgx-a100-80gb",
     {"mlx5_0/1": (Status.FAIL, Remediation.RESEAT_OR_REPLACE, "degraded link: cable or transceiver")}, 0),
    ("ibstat-cx4-ib-100-and-40-plus-cx4lx-bond-eth10-linuxrdma.txt", "hgx-a100-80gb",
     {"mlx5_2/1": (Status.FAIL, Remediation.RESEAT_OR_REPLACE, "adapter MT4115 tops out at 100 Gb/s"),
      "mlx5_3/1": (Status.FAIL, Remediation.RESEAT_OR_REPLACE, "adapter MT4115 tops out at 100 Gb/s")}, 0),
]


@pytest.mark.parametrize(("name", "sku", "expected", "up"), IBSTAT_SKU, ids=[f"{t[0]}-{t[1]}" for t in IBSTAT_SKU])
def test_ibstat_real_sample_against_sku(name: str, sku: str, expected: dict[str, tuple[Status, Remediation, str]],
                                        up: int) -> None:
    a = analyze_text("ibstat", text("ibstat", name), load_sku(sku))
    ports = {v.subject.port: v for v in a.verdicts if v.check == "ib_port"}
    assert set(ports) == set(expected)
    for port, (status, rem, words) in expected.items():
        assert (ports[port].status, ports[port].remediation) == (status, rem)
        assert words in ports[port].message
    total = next(v for v in a.verdicts if v.check == "ib_ports_up")
    assert (total.value, total.threshold, total.status) == (up, 8, Status.FAIL)


def test_ibstat_without_sku_names_the_cause_of_each_down_port() -> None:
    a = analyze_text("ibstat", text("ibstat", "ibstat-cx3-mlx4-1ca-2port-ib-polling-eth-disabled-linuxrdma.txt"))
    warn = {v.subject.port: (v.status, v.remediation) for v in a.verdicts if v.check == "ib_port_state"}
    assert warn == {"mlx4_0/1": (Status.WARN, Remediation.RESEAT_OR_REPLACE),
                    "mlx4_0/2": (Status.WARN, Remediation.RECONFIGURE)}
    init = analyze_text("ibstat", text("ibstat", "ibstat-cx6-hdr-1ca-initializing-no-sm-lid65535.txt"))
    (v,) = [v for v in init.verdicts if v.check == "ib_port_state"]
    assert v.remediation is Remediation.RECONFIGURE and "subnet manager" in v.message
