"""ibstat parser (tests/data/fixtures/ibstat/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.errors import ParseError
from gpuctl.parsers.ibstat import parse_ibstat

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "ibstat"


def ibstat(name: str):
    return parse_ibstat((FIX / name).read_text())


def test_cx7_ndr_all_active() -> None:
    r = ibstat("ibstat-cx7-ndr-ib-8port-active.txt")
    assert len(r.cas) == 9
    ib = [p for p in r.ports if p.link_layer == "InfiniBand"]
    assert len(ib) == 8 and all(p.active and p.rate_gbps == 400 for p in ib)
    ca = r.cas[0]
    assert (ca.name, ca.ca_type, ca.firmware, ca.node_guid) == ("mlx5_0", "MT4129", "28.41.1000", "0x58a2e10300a7820e")
    assert r.ports[0].name == "mlx5_0/1" and r.ports[0].base_lid == 128 and r.ports[0].sm_lid == 1
    bond = r.cas[-1]
    assert (bond.name, bond.ca_type, bond.ports[0].rate_gbps, bond.ports[0].link_layer) == (
        "mlx5_bond_0", "MT41692", 200, "Ethernet")


def test_cx7_with_cx6dx_down() -> None:
    r = ibstat("ibstat-cx7-ndr-ib-cx6dx-down.txt")
    assert len(r.cas) == 12
    down = [(p.name, p.state, p.physical_state, p.rate_gbps) for p in r.ports if not p.active]
    assert down == [("mlx5_2/1", "Down", "Disabled", 40), ("mlx5_7/1", "Down", "Disabled", 40),
                    ("mlx5_8/1", "Down", "Disabled", 40)]
    assert sum(1 for p in r.ports if p.link_layer == "InfiniBand" and p.active and p.rate_gbps == 400) == 8


def test_roce_down_and_polling() -> None:
    r = ibstat("ibstat-cx7-roce-down-polling.txt")
    assert {p.link_layer for p in r.ports} == {"Ethernet"}
    bad = {p.name: p.physical_state for p in r.ports if not p.active}
    assert bad == {"mlx5_11/1": "Polling", "mlx5_5/1": "Disabled"}


def test_a100_hdr() -> None:
    r = ibstat("ibstat-a100-hdr-active.txt")
    assert len(r.cas) == 9
    assert sum(1 for p in r.ports if p.link_layer == "InfiniBand" and p.rate_gbps == 200 and p.active) == 8


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("ibpanic: [1234] main: stat of IB device 'mlx5_9' failed: No such file or directory\n", "ibpanic"),
        ("CA 'mlx5_0'\n\tCA type: MT4129\n", "no ports"),
        ("CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n", "Physical state"),
        ("\tPort 1:\n", "before any CA"),
    ],
)
def test_unusable_output_raises(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_ibstat(text)


def test_duplicate_ca_in_one_paste_is_refused() -> None:
    one = (FIX / "ibstat-cx7-ndr-ib-8port-active.txt").read_text()
    first_ca = one[: one.index("CA 'mlx5_1'")]  # the whole mlx5_0 block
    with pytest.raises(ParseError, match=r"mlx5_0.*twice"):
        parse_ibstat(one + first_ca)
