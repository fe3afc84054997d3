"""Custom pyinfra facts gpuctl's roles read (packages, kernel/boot state, NVIDIA module state,
network and storage).

Each fact is a small `FactBase` subclass whose `process` calls a pure parser in the same
module, so the parsers are unit-tested on recorded outputs without a host. Every fact's
command exits 0 on a host where the thing it reads is absent (a fact that fails would fail
the host), and starts with a `: gpuctl-fact <name>;` marker so tests and run records can
tell which fact ran.
"""

from __future__ import annotations


def marker(name: str) -> str:
    """The shell no-op prefix that names a fact in its command line."""
    return f": gpuctl-fact {name};"


def one_line(script: str) -> str:
    """A multi-line shell script as one command line (for a fact's command)."""
    return (script.strip().replace("\n", "; ").replace("then;", "then").replace("else;", "else")
            .replace("do;", "do"))
