"""Error types raised by the library and the exit codes the CLI maps them to.

Only the CLI turns these into messages and exit codes; library code raises them.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes, the same for every command."""

    OK = 0
    CHECKS_FAILED = 1
    USAGE_OR_INPUT = 2
    EXECUTION = 3


class GpuctlError(Exception):
    """Base of every error gpuctl reports to the user without a traceback."""

    exit_code: ExitCode = ExitCode.EXECUTION


class InputError(GpuctlError):
    """Bad user input: an inventory, matrix, option or file that cannot be used."""

    exit_code = ExitCode.USAGE_OR_INPUT

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems or [])

    def __str__(self) -> str:
        head = super().__str__()
        if not self.problems:
            return head
        return head + "\n" + "\n".join(f"  {p}" for p in self.problems)


class ParseError(InputError):
    """A tool output that cannot be parsed (empty, truncated, error output)."""


class ExecutionError(GpuctlError):
    """gpuctl itself could not run (connection setup, missing tools, lab failure)."""

    exit_code = ExitCode.EXECUTION
