"""NodeSpec resolution: exact pins from the matrix, expected hardware from the SKU."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuctl.cli.main import main
from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory, load_inventory_text
from gpuctl.paths import inventories_dir
from gpuctl.spec import ROLE_ORDER, resolve

H100 = inventories_dir() / "h100-8x4.yaml"


def test_h100_spec_pins_driver_and_fabric_manager_identically() -> None:
    spec = resolve(load_inventory(H100), ["gpu-01"])[0]
    drv = {p.upstream for p in spec.components["driver"].packages}
    fm = {p.upstream for p in spec.components["fabricmanager"].packages}
    assert drv == fm == {spec.driver_version} == {"570.133.20"}
    assert spec.components["nccl"].packages[0].pin == "libnccl2=2.25.1-1+cuda12.8"
    assert spec.hardware.gpu_count == 8 and spec.hardware.nvlink_topo_code == "NV18"
    assert spec.hardware.nvswitch and spec.roles["fabricmanager"] == ""
    assert [p.interface for p in spec.fabric.ports] == [f"ib{i}" for i in range(8)]
    assert spec.fabric.ports[2].address == "192.168.3.11/16"
    assert spec.vlans[0].interface == "eno1.100" and spec.vlans[0].address == "10.100.0.11/24"
    assert spec.nccl_conf["NCCL_IB_HCA"].startswith("=mlx5_0,")
    assert set(spec.roles) == set(ROLE_ORDER)


def test_single_gpu_sku_skips_fabric_manager_with_a_reason() -> None:
    text = """
cluster: {name: one, sku: single-h200, matrix: r580-cuda13.0, os: ubuntu-24.04}
nodes: [{name: h200-01, address: 127.0.0.1}]
"""
    spec = resolve(load_inventory_text(text, "one.yaml"))[0]
    assert not spec.components["fabricmanager"].enabled
    assert spec.roles["fabricmanager"] == "single-h200 has no NVSwitch"
    assert spec.roles["ofed"] == "no fabric in the inventory"
    assert "nvidia-fabricmanager" not in {s.name for s in spec.services}


def test_inventory_threshold_override_names_its_source() -> None:
    text = H100.read_text() + (
        "thresholds:\n  fio_randread_iops: {min: 100, warn_below: 200, source: 'emulated NVMe'}\n"
    )
    spec = resolve(load_inventory_text(text, "x.yaml", base_dir=inventories_dir()))[0]
    assert spec.thresholds["fio_randread_iops"].min == 100
    assert spec.thresholds["fio_randread_iops"].source == "inventory override: emulated NVMe"
    assert spec.thresholds["h2d_gb_s"].min == 48


def test_unknown_threshold_override_is_rejected() -> None:
    text = H100.read_text() + "thresholds:\n  fio_randreed_iops: {min: 100, source: lab disks}\n"
    with pytest.raises(InputError, match="did you mean 'fio_randread_iops'"):
        load_inventory_text(text, "x.yaml", base_dir=inventories_dir())


def test_matrix_rule_failure_stops_resolution(tmp_path) -> None:  # type: ignore[no-untyped-def]
    matrix = (inventories_dir().parent / "matrices" / "r570-cuda12.8.yaml").read_text()
    (tmp_path / "matrices").mkdir()
    (tmp_path / "matrices" / "bad.yaml").write_text(
        matrix.replace("fabricmanager: {version: 570.133.20", "fabricmanager: {version: 570.133.19"))
    inv = tmp_path / "inv.yaml"
    inv.write_text(H100.read_text().replace("matrix: r570-cuda12.8", "matrix: bad"))
    with pytest.raises(InputError, match="nothing was touched") as exc:
        resolve(load_inventory(inv))
    assert any("570.133.19" in p for p in exc.value.problems)


def test_cli_spec_json_for_one_host() -> None:
    result = CliRunner().invoke(main, ["spec", str(H100), "--host", "gpu-01", "--json"])
    assert result.exit_code == 0, result.output
    spec = json.loads(result.output)
    assert spec["node"] == "gpu-01"
    fm = spec["components"]["fabricmanager"]["packages"]
    assert all(p["version"].startswith(spec["driver_version"]) for p in fm)
    assert "+cuda12.8" in spec["components"]["nccl"]["packages"][0]["version"]


def test_cli_spec_other_os_family() -> None:
    result = CliRunner().invoke(main, ["spec", str(H100), "--host", "gpu-02", "--os", "rhel9", "--json"])
    assert result.exit_code == 0, result.output
    spec = json.loads(result.output)
    assert spec["package_manager"] == "dnf"
    assert spec["components"]["nccl"]["packages"][0]["name"] == "libnccl"
