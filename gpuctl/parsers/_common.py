"""Helpers shared by the parsers: input checks, error quoting, ANSI stripping, key=value lines."""

from __future__ import annotations

import re

from gpuctl.errors import ParseError

# "\x1b[4mGPU0\tCPU Affinity\x1b[0m" (nvidia-smi topo -m on a terminal-less run of 580.x)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """`text` without ANSI escape sequences."""
    return _ANSI.sub("", text)


# mpirun --tag-output: "[1,0]<stdout>:" / "[1,3]<stderr>:" before every line
_MPI_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr|stddiag)>:", re.MULTILINE)


def strip_mpi_tags(text: str) -> str:
    """`text` without Open MPI ``--tag-output`` line prefixes."""
    return _MPI_TAG.sub("", text)


def quote(line: str, limit: int = 160) -> str:
    """A line shortened for an error message, in quotes."""
    line = line.strip()
    if len(line) > limit:
        line = line[: limit - 3] + "..."
    return repr(line)


def require_text(text: str, tool: str) -> str:
    """`text` with ANSI codes removed; ParseError if it holds nothing but whitespace."""
    if text is None or not text.strip():
        raise ParseError(f"{tool}: empty output")
    return strip_ansi(text).replace("\r\n", "\n")


def to_float(token: str, tool: str, line: str) -> float:
    """`token` as a float; ParseError quoting `line` if it is not a number."""
    try:
        return float(token)
    except ValueError:
        raise ParseError(f"{tool}: expected a number, got {token!r} in {quote(line)}") from None


def to_int(token: str, tool: str, line: str) -> int:
    """`token` as an int; ParseError quoting `line` if it is not an integer."""
    try:
        return int(token)
    except ValueError:
        raise ParseError(f"{tool}: expected an integer, got {token!r} in {quote(line)}") from None


def key_values(lines: list[str]) -> dict[str, str]:
    """``key=value`` lines (the probes' own output) as a dict, both sides stripped; lines
    without ``=`` are ignored."""
    kv: dict[str, str] = {}
    for line in lines:
        k, sep, v = line.partition("=")
        if sep:
            kv[k.strip()] = v.strip()
    return kv
