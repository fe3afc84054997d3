"""Command lines from argv lists: the one place a word is quoted for a remote shell.

`sh(*argv)` quotes every word (`shlex.join`); `pipe`, `and_then` and `or_else` compose
results of `sh` with literal operators, and the `QUIET`/`OR_TRUE` suffixes (which hold no
data) are appended as text. Nothing else in roles/, gpuctl/bench, gpuctl/facts or
gpuctl/lock/ quotes a value (tests/unit/test_one_quoting_place.py holds them to it).
This module imports nothing from gpuctl, so facts (which gpuctl.operations imports) can use it.
"""

from __future__ import annotations

import shlex

#: appended to a command whose stderr is noise (a missing file, a stopped unit)
QUIET = " 2>/dev/null"
#: appended to a command whose failure is an answer, not an error (a fact read)
OR_TRUE = " || true"


def sh(*argv: object) -> str:
    """The one place a command line is made from an argv: every word quoted (`shlex.join`).
    Compose pipelines from its results with `pipe`, `and_then`, `or_else` and the suffixes."""
    return shlex.join(str(a) for a in argv)


def pipe(*commands: str) -> str:
    """`a | b | c` from commands made by `sh`."""
    return " | ".join(commands)


def and_then(*commands: str) -> str:
    """`a && b && c` from commands made by `sh`."""
    return " && ".join(commands)


def or_else(*commands: str) -> str:
    """`a || b` from commands made by `sh`."""
    return " || ".join(commands)
