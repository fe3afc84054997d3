"""Host lists folded for people: `gpu-01 … gpu-64` read as `gpu-[01-64]` (the Slurm/pdsh
notation operators already know), so one finding on 64 nodes is one line, not 64."""

from __future__ import annotations

import re
from collections.abc import Iterable

_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def fold(names: Iterable[str]) -> str:
    """Names sharing a prefix and a zero-padded width fold into ranges, in order of first
    appearance of each prefix: ['gpu-01', 'gpu-02', 'gpu-03', 'gpu-07', 'head'] →
    'gpu-[01-03,07], head'. A lone numbered name stays as it is."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for name in dict.fromkeys(names):
        m = _NUMBERED.match(name)
        if not m:
            order.append(name)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    parts = []
    for entry in order:
        if isinstance(entry, str):
            parts.append(entry)
            continue
        prefix, width = entry
        nums = sorted(groups[entry])  # names are unique, so are their numbers
        if len(nums) == 1:
            parts.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        spans, start, prev = [], nums[0], nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            spans.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(spans)}]")
    return ", ".join(parts)
