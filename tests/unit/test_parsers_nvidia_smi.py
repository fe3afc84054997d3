"""nvidia-smi -q / -q -x / --query-gpu parsers (tests/data/fixtures/nvidia_smi/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.parsers.nvidia_smi.model import (
    QUERY_GPU_FIELDS,
    DriverLibraryMismatch,
    DriverNotLoaded,
    GpuLost,
    NoDevicesFound,
    NvidiaSmiFailure,
)
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q
from gpuctl.parsers.nvidia_smi.q_xml import parse_nvidia_smi_xml
from gpuctl.parsers.nvidia_smi.query_gpu import parse_query_gpu_csv

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "nvidia_smi"


def text(name: str) -> str:
    return (FIX / name).read_text()


H100_BUSES = ("00000000:19:00.0", "00000000:3B:00.0", "00000000:4C:00.0", "00000000:5D:00.0",
              "00000000:9B:00.0", "00000000:BB:00.0", "00000000:CB:00.0", "00000000:DB:00.0")


def test_h100_535_161() -> None:
    r = parse_nvidia_smi_q(text("nvidia-smi-q-h100-8gpu-535.161.txt"))
    assert (r.format, r.driver_version, r.cuda_version, len(r.gpus)) == ("q", "535.161.08", "12.2", 8)
    assert tuple(g.bus_id for g in r.gpus) == H100_BUSES
    g = r.gpus[0]
    assert g.index == 0 and g.name == "NVIDIA H100 80GB HBM3"
    assert g.uuid == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa" and g.serial == "1650124031592"
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
    assert g.memory_total_mib == 81559
    assert g.persistence_mode is True and g.ecc_mode is True
    assert (g.ecc_volatile_uncorrectable, g.ecc_aggregate_uncorrectable, g.ecc_aggregate_correctable) == (0, 0, 0)
    assert (g.retired_sbe, g.retired_dbe, g.retired_pending) == (None, None, None)  # N/A on Hopper
    assert (g.remapped_correctable, g.remapped_uncorrectable, g.remap_pending, g.remap_failure) == (0, 0, False, False)
    assert all(x.driver_version == "535.161.08" for x in r.gpus)


def test_h100_535_183() -> None:
    r = parse_nvidia_smi_q(text("nvidia-smi-q-h100-8gpu-535.183.txt"))
    assert (r.driver_version, len(r.gpus)) == ("535.183.01", 8)
    assert r.gpus[0].bus_id == "00000000:53:00.0"
    assert {g.name for g in r.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.memory_total_mib for g in r.gpus} == {81559}


def test_h200_580() -> None:
    r = parse_nvidia_smi_q(text("nvidia-smi-q-h200-1gpu-580.159.txt"))
    assert (r.driver_version, r.cuda_version, len(r.gpus)) == ("580.159.04", "13.0", 1)
    g = r.gpus[0]
    assert (g.name, g.bus_id, g.memory_total_mib) == ("NVIDIA H200", "00000000:00:06.0", 143771)
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
    assert g.ecc_volatile_uncorrectable == 0  # Parity + SEC-DED + DRAM
    assert g.remap_pending is False


def test_azure_page_retirement_section_only() -> None:
    r = parse_nvidia_smi_q(text("nvidia-smi-q-d-page-8gpu-azure.txt"))
    assert (r.driver_version, len(r.gpus)) == ("535.86.10", 8)
    assert [g.bus_id for g in r.gpus] == [f"0000000{i}:00:00.0" for i in range(1, 9)]
    g = r.gpus[7]
    assert (g.index, g.name, g.retired_sbe, g.retired_dbe, g.retired_pending) == (7, None, 0, 0, False)
    assert g.ecc_mode is None


def test_xml_p100() -> None:
    r = parse_nvidia_smi_xml(text("nvidia-smi-q-x-tesla-p100-netdata.txt"))
    assert (r.format, r.driver_version, r.cuda_version) == ("xml", "510.47.03", "11.6")
    g = r.gpus[0]
    assert (g.name, g.bus_id, g.memory_total_mib) == ("Tesla P100-PCIE-16GB", "00000000:00:04.0", 16384)
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current) == (3, 3, 16)
    assert g.persistence_mode is False and g.ecc_mode is True
    assert (g.ecc_volatile_uncorrectable, g.ecc_aggregate_correctable, g.ecc_dram_correctable) == (0, 3, 3)
    assert (g.retired_sbe, g.retired_dbe, g.retired_pending) == (0, 0, False)
    assert g.remap_pending is None  # <remapped_rows>N/A</remapped_rows>


def test_xml_a100_mig() -> None:
    r = parse_nvidia_smi_xml(text("nvidia-smi-q-x-a100-sxm4-40gb-mig-netdata.txt"))
    g = r.gpus[0]
    assert (g.name, g.memory_total_mib, g.pcie_gen_max) == ("NVIDIA A100-SXM4-40GB", 40960, 4)
    assert g.ecc_volatile_uncorrectable is None  # all N/A with MIG on
    assert g.ecc_aggregate_uncorrectable == 0


CSV = (
    "0, NVIDIA H100 80GB HBM3, 00000000:19:00.0, 535.161.08, 5, 5, 16, 16, 81559, Enabled, Enabled, 0, 0, 0, "
    "[N/A], 0, 0, No, No, 1650124031592, GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa\n"
    "1, NVIDIA H100 80GB HBM3, 00000000:3B:00.0, 535.161.08, 1, 5, 8, 16, 81559, Disabled, Enabled, 2, 2, 7, "
    "[Not Supported], 1, 2, Yes, No, 1650124008135, GPU-47daa2ad-a218-6286-252b-af45f0dfaf00\n"
)


def test_query_gpu_csv_noheader_nounits() -> None:
    r = parse_query_gpu_csv(CSV)
    assert (r.format, r.driver_version, len(r.gpus)) == ("csv", "535.161.08", 2)
    a, b = r.gpus
    assert (a.index, a.bus_id, a.pcie_width_current, a.persistence_mode, a.retired_pending) == (
        0, "00000000:19:00.0", 16, True, None)
    assert (b.pcie_gen_current, b.pcie_width_current, b.persistence_mode) == (1, 8, False)
    assert (b.ecc_volatile_uncorrectable, b.remapped_uncorrectable, b.remap_pending) == (2, 2, True)
    assert b.uuid == "GPU-47daa2ad-a218-6286-252b-af45f0dfaf00"


def test_query_gpu_csv_with_header_and_units() -> None:
    header = ", ".join(f + (" [MiB]" if f == "memory.total" else "") for f in QUERY_GPU_FIELDS) + "\n"
    r = parse_query_gpu_csv(header + CSV.replace("81559,", "81559 MiB,"))
    assert [g.memory_total_mib for g in r.gpus] == [81559, 81559]


def test_query_gpu_csv_custom_fields() -> None:
    r = parse_query_gpu_csv("3, 00000000:4C:00.0\n", ("index", "pci.bus_id"))
    assert (r.gpus[0].index, r.gpus[0].bus_id, r.gpus[0].name) == (3, "00000000:4C:00.0", None)


@pytest.mark.parametrize(
    ("output", "exc", "kind"),
    [
        ("Failed to initialize NVML: Driver/library version mismatch\n", DriverLibraryMismatch,
         "driver-library-mismatch"),
        ("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124\n",
         DriverLibraryMismatch, "driver-library-mismatch"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
         "latest NVIDIA driver is installed and running.\n", DriverNotLoaded, "driver-not-loaded"),
        ("No devices were found\n", NoDevicesFound, "no-devices"),
        ("Unable to determine the device handle for GPU0000:18:00.0: GPU is lost.  Reboot the system to recover "
         "this GPU\n", GpuLost, "gpu-lost"),
        ("Failed to initialize NVML: Unknown Error\n", NvidiaSmiFailure, "nvidia-smi-failed"),
    ],
)
@pytest.mark.parametrize("parser", [parse_nvidia_smi_q, parse_nvidia_smi_xml, parse_query_gpu_csv])
def test_driver_failures_are_typed(parser, output: str, exc: type, kind: str) -> None:
    with pytest.raises(exc) as info:
        parser(output)
    assert info.value.kind == kind
    assert isinstance(info.value, ParseError)


def test_truncated_q_output_is_read_as_partial() -> None:
    # issue 19 class 2: a cut paste is judged for what it shows, and marked partial
    full = text("nvidia-smi-q-h100-8gpu-535.161.txt")
    cut = full[: full.index("GPU 00000000:3B:00.0")]
    r = parse_nvidia_smi_q(cut)
    assert len(r.gpus) == 1 and r.partial is not None and "Attached GPUs : 8' but 1" in r.partial


def test_truncated_xml_output() -> None:
    full = text("nvidia-smi-q-x-tesla-p100-netdata.txt")
    with pytest.raises(ParseError, match="not well-formed"):
        parse_nvidia_smi_xml(full[: len(full) // 2])


@pytest.mark.parametrize(
    ("parser", "output", "match"),
    [
        (parse_nvidia_smi_q, "", "empty"),
        (parse_nvidia_smi_q, "==============NVSMI LOG==============\n", "no 'GPU"),
        (parse_nvidia_smi_xml, "", "empty"),
        (parse_nvidia_smi_xml, "garbage\n", "no <nvidia_smi_log>"),
        (parse_query_gpu_csv, "", "empty"),
        (parse_query_gpu_csv, "0, NVIDIA H100 80GB HBM3\n", "2 values where 21"),
        (parse_query_gpu_csv, CSV.replace("81559", "lots", 1), "expected a number"),
        (parse_query_gpu_csv, CSV.replace("Enabled", "Maybe", 1), "Enabled/Disabled"),
    ],
)
def test_unusable_output_raises(parser, output: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parser(output)


@pytest.mark.parametrize("keep_lines", [1, 6, 40])
def test_truncated_last_gpu_block_is_partial(keep_lines: int) -> None:
    # the output cut inside the last GPU's block: 'Attached GPUs : 8' and 8 headers match, but
    # GPU 7 lacks the sections (Product Name, PCI, ECC Errors, ...) every other GPU has: the
    # other seven are judged, the paste is partial (never a pass)
    full = text("nvidia-smi-q-h100-8gpu-535.161.txt")
    start = full.index("GPU 00000000:DB:00.0")
    cut = "\n".join(full[start:].splitlines()[:keep_lines])
    r = parse_nvidia_smi_q(full[:start] + cut + "\n")
    assert len(r.gpus) == 8 and r.partial is not None and "GPU 00000000:DB:00.0" in r.partial
    assert r.gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_single_gpu_cut_mid_block_is_partial() -> None:
    full = text("nvidia-smi-q-h200-1gpu-580.159.txt")
    r = parse_nvidia_smi_q(full[: full.index("    ECC Mode")])
    assert r.partial is not None and "Processes" in r.partial


def test_h800_525_single_gpu_of_eight_and_ecc_mode_spelling() -> None:
    # real `nvidia-smi -q -i 0` (llm-action docs): 'Attached GPUs : 8', one GPU shown, 'Ecc Mode' (525.x)
    full = text("nvidia-smi-q-i0-h800-525.105-llmaction.txt")
    assert "-q -i" in (parse_nvidia_smi_q(full).partial or "")
    r = parse_nvidia_smi_q(full.replace("Attached GPUs                             : 8",
                                        "Attached GPUs                             : 1"))
    g = r.gpus[0]
    assert (g.name, g.bus_id, r.driver_version) == ("NVIDIA H800", "00000000:18:00.0", "525.105.17")
    assert g.ecc_mode is False  # 'Ecc Mode > Current : Disabled' was read as unknown
    assert (g.pcie_width_current, g.pcie_width_max, g.remap_failure) == (16, 16, False)
