"""NCCL's device-list syntax (NCCL_IB_HCA, NCCL_SOCKET_IFNAME), written and read in one place.

NCCL reads these as comma-separated names, each optionally prefixed with ``^`` (exclude) or
``=`` (exact name, not a prefix) and, for HCAs, suffixed ``:<port>``
(docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, NCCL_IB_HCA). gpuctl writes exact
names (`exact_list`, used by the NodeSpec's nccl.conf) and verify reads the names back
(`list_names`) to check that each exists on the node.
"""

from __future__ import annotations

from collections.abc import Iterable


def exact_list(names: Iterable[str]) -> str:
    """['mlx5_0', 'mlx5_1'] → '=mlx5_0,=mlx5_1' (exact matches: mlx5_1 must not also select mlx5_10)."""
    return ",".join(f"={n}" for n in names)


def list_names(value: str) -> list[str]:
    """The device names of an NCCL list: '=mlx5_0:1,^mlx5_2' → ['mlx5_0', 'mlx5_2']."""
    return [part.strip().lstrip("=^").split(":")[0] for part in value.split(",") if part.strip("=^ ")]
