"""Preflight: hardware found vs ordered, judged from a recorded sysfs capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.inventory import load_inventory
from gpuctl.paths import inventories_dir
from gpuctl.preflight import PREFLIGHT_SCRIPT, judge_node, parse_preflight, rack_power
from gpuctl.spec import resolve

DATA = Path(__file__).resolve().parents[1] / "data" / "preflight"
GOOD = (DATA / "h100-8gpu-synthetic.txt").read_text()


@pytest.fixture(scope="module")
def h100():  # type: ignore[no-untyped-def]
    loaded = load_inventory(inventories_dir() / "h100-8x4.yaml")
    return loaded, resolve(loaded, ["gpu-01"])[0]


def failed(verdicts) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    out: dict[str, list[str]] = {}
    for v in verdicts:
        if v.status.value in ("fail", "error"):
            out.setdefault(v.check, []).append(v.message)
    return out


def test_parse_h100_capture() -> None:
    facts = parse_preflight(GOOD)
    assert facts.os_family == "ubuntu2204" and facts.secure_boot is False
    assert len(facts.gpus) == 8 and len(facts.nvswitches) == 4
    assert facts.gpus[0].device_id == "2330" and facts.gpus[0].current_gen == 5
    assert facts.ib_ports[3].rate_gbps == 400 and facts.ib_ports[3].state == "Active"
    assert len(facts.nvme) == 9


def test_healthy_h100_passes(h100) -> None:  # type: ignore[no-untyped-def]
    loaded, spec = h100
    assert failed(judge_node(parse_preflight(GOOD), spec, loaded)) == {}


@pytest.mark.parametrize(
    ("mutate", "check", "needle"),
    [
        (lambda t: t.replace("0000:db:00.0 0x2330 0x030200 32.0_GT/s_PCIe 16 32.0_GT/s_PCIe 16\n", ""),
         "gpu_count", "7 NVIDIA GPU(s) on the PCI bus, ordered 8"),
        (lambda t: t.replace("0000:3a:00.0 0x2330 0x030200 32.0_GT/s_PCIe 16", "0000:3a:00.0 0x2330 0x030200 "
                             "32.0_GT/s_PCIe 8"), "gpu_pcie_width", "x8, expected x16"),
        (lambda t: t.replace("0000:18:00.0 0x2330", "0000:18:00.0 0x20b2"), "gpu_model", "10de:20b2 is not"),
        (lambda t: t.replace("mlx5_5 1 MT4129 InfiniBand 4:_ACTIVE 400", "mlx5_5 1 MT4129 InfiniBand 4:_ACTIVE 200"),
         "hca_rate", "port rate 200 Gb/s, expected 400"),
        (lambda t: t.replace("MemTotal:       2113642324 kB", "MemTotal:       528410581 kB"),
         "cpu_memory", "the hgx-h100-80gb minimum is 1024 GiB"),
        (lambda t: t.replace("ID=ubuntu", "ID=rocky").replace('VERSION_ID="22.04"', 'VERSION_ID="9.4"'),
         "os", "the inventory says ubuntu-22.04"),
        (lambda t: t.replace(str(400 * 2**30), str(10 * 2**30)), "free_disk", "10.0 GiB free on /"),
        (lambda t: t.replace("nvme8\n", "").replace("nvme7\n", ""), "nvme_count", "7 NVMe controller(s), expected 8"),
    ],
)
def test_each_mismatch_fails_naming_the_device(h100, mutate, check, needle) -> None:  # type: ignore[no-untyped-def]
    loaded, spec = h100
    found = failed(judge_node(parse_preflight(mutate(GOOD)), spec, loaded))
    assert check in found, found
    assert any(needle in m for m in found[check]), found[check]
    assert len(found) == 1, found


def test_idle_link_speed_is_not_a_failure(h100) -> None:  # type: ignore[no-untyped-def]
    loaded, spec = h100
    text = GOOD.replace("0000:2a:00.0 0x2330 0x030200 32.0_GT/s_PCIe", "0000:2a:00.0 0x2330 0x030200 2.5_GT/s_PCIe")
    assert failed(judge_node(parse_preflight(text), spec, loaded)) == {}


def test_secure_boot_is_a_warning(h100) -> None:  # type: ignore[no-untyped-def]
    loaded, spec = h100
    verdicts = judge_node(parse_preflight(GOOD.replace("efivar 0", "efivar 1")), spec, loaded)
    sb = next(v for v in verdicts if v.check == "secure_boot")
    assert sb.status.value == "warn" and "MOK" in sb.message


@pytest.mark.parametrize("text", ["", "### os-release\nID=debian\n", "garbage"])
def test_truncated_output_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_preflight(text)


def test_script_runs_on_this_machine() -> None:
    import subprocess

    out = subprocess.run(["bash", "-c", PREFLIGHT_SCRIPT], capture_output=True, text=True, check=True).stdout
    facts = parse_preflight(out)
    assert facts.kernel and facts.mem_total_kib and facts.mem_total_kib > 0


def test_rack_power_table() -> None:
    loaded = load_inventory(inventories_dir() / "h100-8x4.yaml")
    rows = rack_power(loaded)
    assert rows[0]["nodes"] == ["gpu-01", "gpu-02"] and rows[0]["draw_kw"] == 14.0
