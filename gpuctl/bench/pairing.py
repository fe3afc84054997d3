"""Node pairing for pairwise fabric benchmarks (ib_write_bw, ib_write_lat).

The pairs are the edges of a ring over the nodes in inventory order: (0,1), (1,2), …,
(N-1,0). Every node is measured against both of its neighbours, so a bad HCA or cable
shows up in two failing pairs that share one node, while a bad link shows up in one.

The ring is split into rounds in which no node appears twice, so every pair in a round
runs at the same time and N nodes take a constant number of rounds:

* round 1: (0,1), (2,3), (4,5), …                      (even start)
* round 2: (1,2), (3,4), …, and (N-1,0) when N is even  (shifted by one)
* round 3: (N-1,0) when N is odd — the ring's one edge that could not fit

So 1 round for N = 2 (the ring is one pair), 2 rounds for even N ≥ 4, 3 for odd N ≥ 3,
0 for a single node. In each pair the first node runs the server, the second the client.
"""

from __future__ import annotations

from collections.abc import Sequence

Pair = tuple[str, str]


def ring_pairs(nodes: Sequence[str]) -> list[Pair]:
    """The ring's edges, each once: (n0,n1), (n1,n2), …, (n[N-1],n0); one pair for N = 2."""
    n = len(nodes)
    if n < 2:
        return []
    if n == 2:
        return [(nodes[0], nodes[1])]
    return [(nodes[i], nodes[(i + 1) % n]) for i in range(n)]


def pairing_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """The ring's pairs in rounds where every node appears at most once per round."""
    n = len(nodes)
    if len(set(nodes)) != n:
        raise ValueError("node names must be unique")
    if n < 2:
        return []
    if n == 2:
        return [[(nodes[0], nodes[1])]]
    first = [(nodes[i], nodes[i + 1]) for i in range(0, n - 1, 2)]
    second = [(nodes[i], nodes[i + 1]) for i in range(1, n - 1, 2)]
    closing = (nodes[n - 1], nodes[0])
    if n % 2 == 0:
        return [first, [*second, closing]]
    return [first, second, [closing]]
