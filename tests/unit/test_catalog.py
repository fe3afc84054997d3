"""The SKU catalog: every SKU defines every threshold, each with a source."""

from __future__ import annotations

import pytest

from gpuctl.catalog import THRESHOLD_NAMES, load_health, load_sku, sku_names


@pytest.mark.parametrize("name", sku_names())
def test_every_sku_defines_every_threshold_with_a_source(name: str) -> None:
    sku = load_sku(name)
    assert set(sku.thresholds) == set(THRESHOLD_NAMES)
    for key, t in sku.thresholds.items():
        assert len(t.source) > 10, key
        assert t.not_applicable or (t.min is None) != (t.max is None), key


@pytest.mark.parametrize("name", sku_names())
def test_every_figure_has_a_source(name: str) -> None:
    sku = load_sku(name)
    for fig in (sku.hbm_bandwidth_tb_s, sku.dense_bf16_tflops, sku.node_power_kw, sku.min_cpu_memory_gib,
                sku.nvme_count, sku.nvlink.per_gpu_bandwidth_gb_s):
        assert fig.source
    assert sku.gpu.source and sku.pcie.source and sku.nvlink.source


def test_expected_catalog_entries() -> None:
    assert {"hgx-a100-80gb", "hgx-a800-80gb", "hgx-h100-80gb", "hgx-h200-141gb", "hgx-b200",
            "single-h200"} <= set(sku_names())
    assert load_sku("hgx-b200").preview
    assert load_sku("hgx-h100-80gb").gpu.pci_ids == ("2330",)
    assert 79 in load_health().xid_fatal.codes
