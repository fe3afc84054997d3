"""`nvidia-smi -q -x`: the XML report, read into `NvidiaSmiResult`."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text
from gpuctl.parsers.nvidia_smi.model import CLOCK_EVENT_NAMES, TOOL, GpuInfo, NvidiaSmiResult, check_failure
from gpuctl.parsers.nvidia_smi.values import active, clean, flag, number, percent, total

# ---------------------------------------------------------------- nvidia-smi -q -x (XML)

#: the command whose output this module reads (verify's probe, `gpuctl health`, the lock)
COMMAND = "nvidia-smi -q -x"


def _x(elem: ET.Element, path: str) -> str | None:
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    return found.text


def _x_clock_events(gpu: ET.Element, where: str) -> tuple[tuple[str, bool], ...] | None:
    for section, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                            ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        sec = gpu.find(section)
        if sec is None:
            continue
        out = []
        for child in sec:
            key = child.tag.removeprefix(prefix)
            name = CLOCK_EVENT_NAMES.get(key, key)
            if (state := active(child.text, f"{where} {name}")) is not None:
                out.append((name, state))
        return tuple(out)
    return None


def _x_gpu(index: int, gpu: ET.Element, driver: str | None) -> GpuInfo:
    where = f"GPU {gpu.get('id')}"

    def ecc_sum(scope: str, kinds: tuple[str, ...], legacy: str) -> int | None:
        sec = gpu.find(f"ecc_errors/{scope}")
        if sec is None:
            return None
        if sec.find(legacy) is not None:  # <double_bit><total>
            return number(_x(sec, f"{legacy}/total"), where)
        return total([number(_x(sec, k), where) for k in kinds])

    return GpuInfo(
        index=index,
        name=clean(_x(gpu, "product_name")),
        bus_id=clean(_x(gpu, "pci/pci_bus_id")) or gpu.get("id"),
        uuid=clean(_x(gpu, "uuid")),
        serial=clean(_x(gpu, "serial")),
        driver_version=driver,
        pcie_gen_current=number(_x(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"), where),
        pcie_gen_max=number(_x(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"), where),
        pcie_width_current=number(_x(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width"), where),
        pcie_width_max=number(_x(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width"), where),
        memory_total_mib=number(_x(gpu, "fb_memory_usage/total"), where),
        persistence_mode=flag(_x(gpu, "persistence_mode"), where),
        ecc_mode=flag(_x(gpu, "ecc_mode/current_ecc"), where),
        ecc_volatile_uncorrectable=ecc_sum("volatile", ("dram_uncorrectable", "sram_uncorrectable"), "double_bit"),
        ecc_aggregate_uncorrectable=ecc_sum("aggregate", ("dram_uncorrectable", "sram_uncorrectable"), "double_bit"),
        ecc_aggregate_correctable=ecc_sum("aggregate", ("dram_correctable", "sram_correctable"), "single_bit"),
        ecc_dram_correctable=ecc_sum("aggregate", ("dram_correctable",), "single_bit"),
        ecc_sram_correctable=ecc_sum("aggregate", ("sram_correctable",), "__none__")
        if gpu.find("ecc_errors/aggregate/single_bit") is None else None,
        retired_sbe=number(_x(gpu, "retired_pages/multiple_single_bit_retirement/retired_count"), where),
        retired_dbe=number(_x(gpu, "retired_pages/double_bit_retirement/retired_count"), where),
        retired_pending=flag(
            clean(_x(gpu, "retired_pages/pending_retirement")) or _x(gpu, "retired_pages/pending_blacklist"), where
        ),
        remapped_correctable=number(_x(gpu, "remapped_rows/remapped_row_corr"), where),
        remapped_uncorrectable=number(_x(gpu, "remapped_rows/remapped_row_unc"), where),
        remap_pending=flag(_x(gpu, "remapped_rows/remapped_row_pending"), where),
        remap_failure=flag(_x(gpu, "remapped_rows/remapped_row_failure"), where),
        ecc_sram_uncorrectable=total([number(_x(gpu, f"ecc_errors/aggregate/{k}"), where) for k in (
            "sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded")]),
        sram_threshold_exceeded=flag(_x(gpu, "ecc_errors/aggregate/sram_threshold_exceeded"), where),
        clock_events=_x_clock_events(gpu, where),
        utilization_gpu_pct=percent(_x(gpu, "utilization/gpu_util"), f"{where} utilization"),
        vbios_version=clean(_x(gpu, "vbios_version")),
        fabric_section=gpu.find("fabric") is not None,
        fabric_state=clean(_x(gpu, "fabric/state")),
        fabric_status=clean(_x(gpu, "fabric/status")),
        fabric_clique_id=clean(_x(gpu, "fabric/cliqueId")),
        fabric_cluster_uuid=clean(_x(gpu, "fabric/clusterUuid")),
        fabric_health=clean(_x(gpu, "fabric/health/summary")),
    )


def parse_nvidia_smi_xml(text: str) -> NvidiaSmiResult:
    """Parse `nvidia-smi -q -x`."""
    text = require_text(text, TOOL)
    if "<nvidia_smi_log" not in text:
        check_failure(text)
        first = text.strip().splitlines()[0]
        raise ParseError(f"{TOOL} -q -x: no <nvidia_smi_log> document; first line {quote(first)}")
    start = text.index("<?xml") if "<?xml" in text else text.index("<nvidia_smi_log")
    try:
        root = ET.fromstring(text[start:])
    except ET.ParseError as exc:
        raise ParseError(f"{TOOL} -q -x: not well-formed XML ({exc}; truncated output?)") from None
    driver = clean(_x(root, "driver_version"))
    gpus = tuple(_x_gpu(i, g, driver) for i, g in enumerate(root.findall("gpu")))
    if not gpus:
        raise ParseError(f"{TOOL} -q -x: the document lists no <gpu>")
    return NvidiaSmiResult("xml", driver, clean(_x(root, "cuda_version")), gpus)
