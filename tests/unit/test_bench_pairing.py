"""Pairing rounds for pairwise fabric benchmarks (gpuctl.bench.pairing)."""

from __future__ import annotations

from collections import Counter

import pytest

from gpuctl.bench.pairing import pairing_rounds, ring_pairs


def names(n: int) -> list[str]:
    return [f"gpu-{i:02d}" for i in range(n)]


@pytest.mark.parametrize("n", range(2, 10))
def test_every_node_at_most_once_per_round(n: int) -> None:
    for rnd in pairing_rounds(names(n)):
        seen = Counter(node for pair in rnd for node in pair)
        assert max(seen.values()) == 1, rnd


@pytest.mark.parametrize("n", range(2, 10))
def test_rounds_cover_the_ring_exactly_once(n: int) -> None:
    rounds = pairing_rounds(names(n))
    flat = [p for rnd in rounds for p in rnd]
    assert sorted(flat) == sorted(ring_pairs(names(n)))
    assert len(flat) == len(set(frozenset(p) for p in flat))  # no pair twice, in either order


@pytest.mark.parametrize("n", range(3, 10))
def test_every_node_measured_against_two_neighbours(n: int) -> None:
    flat = [p for rnd in pairing_rounds(names(n)) for p in rnd]
    degree = Counter(node for pair in flat for node in pair)
    assert set(degree.values()) == {2}
    assert set(degree) == set(names(n))


@pytest.mark.parametrize("n, rounds", [(2, 1), (3, 3), (4, 2), (5, 3), (6, 2), (7, 3), (8, 2), (9, 3),
                                       (64, 2), (65, 3)])
def test_constant_number_of_rounds(n: int, rounds: int) -> None:
    assert len(pairing_rounds(names(n))) == rounds


def test_first_round_pairs_neighbours_and_second_shifts_by_one() -> None:
    r = pairing_rounds(names(6))
    assert r[0] == [("gpu-00", "gpu-01"), ("gpu-02", "gpu-03"), ("gpu-04", "gpu-05")]
    assert r[1] == [("gpu-01", "gpu-02"), ("gpu-03", "gpu-04"), ("gpu-05", "gpu-00")]


def test_odd_count_closes_the_ring_in_a_third_round() -> None:
    r = pairing_rounds(names(5))
    assert r[0] == [("gpu-00", "gpu-01"), ("gpu-02", "gpu-03")]
    assert r[1] == [("gpu-01", "gpu-02"), ("gpu-03", "gpu-04")]
    assert r[2] == [("gpu-04", "gpu-00")]


def test_one_or_no_node_has_no_pairs() -> None:
    assert pairing_rounds(names(1)) == []
    assert pairing_rounds([]) == []


def test_two_nodes_one_pair() -> None:
    assert pairing_rounds(["a", "b"]) == [[("a", "b")]]


def test_duplicate_names_rejected() -> None:
    with pytest.raises(ValueError):
        pairing_rounds(["a", "a", "b"])
