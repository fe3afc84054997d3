"""Programs gpuctl ships to the nodes and runs there (read as data, see `program_text`)."""

from __future__ import annotations

from importlib import resources


def program_text(name: str) -> str:
    """The source of a shipped program, e.g. 'train_smoke.py'."""
    return resources.files(__name__).joinpath(name).read_text()
