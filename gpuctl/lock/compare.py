"""Drift, the pure logic: a node against its lock entry (`diff_entry`), against the majority
of its peers (`diff_peers`; files with node-specific content are compared with the lock only),
nodes missing from the read or from the lock (`diff`).
"""


from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.lock.managed import per_node_file
from gpuctl.lock.model import LockFile, NodeLock
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- drift


@dataclass(frozen=True)
class Drift:
    """One difference. kind: lock (node vs its lock entry) | peers (node vs the majority
    of its peers) | missing (locked node not read) | unlocked (node read, not in the lock)."""

    node: str
    kind: str
    key: str
    expected: str | None
    found: str | None
    note: str = ""

    def message(self) -> str:
        if self.kind == "missing":
            return f"{self.node}: locked but not read ({self.found})"
        if self.kind == "unlocked":
            return f"{self.node}: not in the lock file (run `gpuctl lock` to add it)"
        against = "lock" if self.kind == "lock" else "peers"
        extra = f" ({self.note})" if self.note else ""
        return f"{self.node}: {self.key}: {against} {_show(self.expected)}, found {_show(self.found)}{extra}"

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "kind": self.kind, "key": self.key, "expected": self.expected,
                "found": self.found, "note": self.note, "message": self.message()}


def _show(v: str | None) -> str:
    return "absent" if v is None else v


@dataclass
class DriftReport:
    items: list[Drift]
    nodes: list[str]

    @property
    def clean(self) -> bool:
        return not self.items

    def for_node(self, node: str) -> list[Drift]:
        return [d for d in self.items if d.node == node]

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "clean" if self.clean else "drift",
            "nodes": {n: [d.as_dict() for d in self.for_node(n)] for n in self.nodes},
            "drift_count": len(self.items),
        }


def flatten(entry: NodeLock) -> dict[str, str | None]:
    """A node's lock entry as comparable keys: 'package NAME', 'hold NAME', 'kernel', …"""
    out: dict[str, str | None] = {"os": entry.os, "kernel": entry.kernel, "nvidia module": entry.nvidia_module}
    for comp in entry.packages.values():
        for name, p in comp.items():
            out[f"package {name}"] = p.version
            if p.version is not None:
                out[f"hold {name}"] = "held" if p.held else "not held"
    for k, v in entry.firmware.items():
        out[f"firmware {k}"] = v
    for path, digest in entry.files.items():
        out[f"file {path}"] = digest
    for name, version in entry.train_env.items():
        out[f"train_env {name}"] = version
    return out


def _peer_comparable(key: str, spec: NodeSpec | None) -> bool:
    return not (key.startswith("file ") and spec is not None and per_node_file(key[5:], spec))


def diff_entry(node: str, locked: NodeLock, found: NodeLock) -> list[Drift]:
    """Differences between one node's lock entry and what it has now."""
    a, b = flatten(locked), flatten(found)
    out = []
    for key in list(dict.fromkeys([*a, *b])):
        if a.get(key) != b.get(key):
            out.append(Drift(node, "lock", key, a.get(key), b.get(key)))
    return out


def diff_peers(found: Mapping[str, NodeLock], spec: NodeSpec | None = None) -> list[Drift]:
    """Nodes that differ from the majority of their peers, key by key.

    A value held by more than half of the nodes is the majority; every other node is
    reported against it. Without a majority (e.g. two nodes that disagree) every node
    is reported, with the note "no majority". `spec` (a node of the inventory: its role_vars
    and package manager say where the node-specific files are) keeps those files out of the
    comparison; without it every file is compared."""
    if len(found) < 2:
        return []
    flat = {n: flatten(e) for n, e in found.items()}
    keys = list(dict.fromkeys(k for f in flat.values() for k in f))
    out: list[Drift] = []
    for key in keys:
        if not _peer_comparable(key, spec):
            continue
        values = {n: f.get(key) for n, f in flat.items()}
        counts = Counter(values.values())
        if len(counts) == 1:
            continue
        value, count = counts.most_common(1)[0]
        if count * 2 > len(values):
            for n, v in values.items():
                if v != value:
                    out.append(Drift(n, "peers", key, value, v, f"{count} of {len(values)} nodes"))
        else:
            spread = ", ".join(f"{_show(v)} on {c}" for v, c in counts.most_common())
            for n, v in values.items():
                out.append(Drift(n, "peers", key, None, v, f"no majority: {spread}"))
    return out


def diff(lock: LockFile, found: Mapping[str, NodeLock], errors: Mapping[str, str] | None = None,
         nodes: Iterable[str] | None = None, spec: NodeSpec | None = None) -> DriftReport:
    """Drift of `found` against `lock` and between the nodes found.

    `nodes`: the nodes that were meant to be read (default: the lock's and the found ones);
    `errors`: why a node could not be read; `spec`: as for `diff_peers`."""
    errors = errors or {}
    wanted = list(nodes) if nodes is not None else list(dict.fromkeys([*lock.nodes, *found]))
    items: list[Drift] = []
    for node in wanted:
        if node not in found:
            if node in lock.nodes:
                items.append(Drift(node, "missing", "node", "locked", errors.get(node, "not read")))
            continue
        if node not in lock.nodes:
            items.append(Drift(node, "unlocked", "node", None, "read"))
            continue
        items.extend(diff_entry(node, lock.nodes[node], found[node]))
    items.extend(diff_peers({n: e for n, e in found.items() if n in wanted}, spec))
    return DriftReport(items, wanted)
