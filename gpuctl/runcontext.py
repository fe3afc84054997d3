"""What a run records about the cluster it ran on: the inventory's summary, the exact matrix,
the effective thresholds — the same dicts whether bench writes them into its stage or the report
reads them back from a still-matching inventory file (results layer: model in, plain data out;
no workflow imported).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuctl.inventory import LoadedInventory
from gpuctl.runrecord import sha256_file
from gpuctl.spec import NodeSpec


def inventory_summary(loaded: LoadedInventory, specs: Sequence[NodeSpec]) -> dict[str, Any]:
    inv = loaded.inventory
    return {"path": str(loaded.path), "sha256": sha256_file(loaded.path), "cluster": inv.cluster.name,
            "sku": inv.cluster.sku, "os": inv.cluster.os, "matrix": inv.cluster.matrix,
            "nodes": [s.node for s in specs], "gpus_per_node": specs[0].hardware.gpu_count if specs else 0,
            "gpu_model": specs[0].hardware.gpu_model if specs else ""}


def matrix_summary(spec: NodeSpec) -> dict[str, Any]:
    """Every pinned package of the matrix for this OS, by component (the report's exact matrix)."""
    return {
        "name": spec.matrix,
        "driver": {"version": spec.driver_version, "branch": spec.driver_branch, "flavour": spec.driver_flavour},
        "components": [
            {"component": c.name, "version": c.version, "enabled": c.enabled, "reason": c.reason,
             "packages": [{"name": p.name, "version": p.version, "pin": p.pin} for p in c.packages]}
            for c in spec.components.values()
        ],
    }


def thresholds_summary(spec: NodeSpec) -> dict[str, dict[str, Any]]:
    """A node's effective thresholds: {name: {min|max, warn_below|warn_above, not_applicable, source}}."""
    return {k: t.model_dump(exclude_none=True, exclude_defaults=True) | {"source": t.source}
            for k, t in sorted(spec.thresholds.items())}
