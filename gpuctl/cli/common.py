"""Options, output helpers and error translation shared by every command."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from gpuctl.errors import ExitCode, GpuctlError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 checks failed, 2 usage or input error, 3 execution error."
)


def console(stderr: bool = False) -> Console:
    """A rich console that respects NO_COLOR and plain (non-TTY) output."""
    return Console(
        stderr=stderr,
        no_color="NO_COLOR" in os.environ,
        highlight=False,
        soft_wrap=True,
    )


def emit_json(obj: Any) -> None:
    """Print one JSON object on stdout."""
    from gpuctl.fileio import dumps_json

    click.echo(dumps_json(obj))


def _close_runs(status: str) -> None:
    """Finish the run records this process left open (run.json gets `status` and an end
    time) and drop its inventory locks. Imported late: runrecord is not needed for --help."""
    runrecord = sys.modules.get("gpuctl.runrecord")
    if runrecord is not None:
        runrecord.interrupt_active(status)


def handle_errors(func: F) -> F:
    """Translate GpuctlError into a message on stderr and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except GpuctlError as exc:
            _close_runs("error")
            click.echo(f"error: {exc}", err=True)
            sys.exit(int(exc.exit_code))
        except KeyboardInterrupt:
            _close_runs("interrupted")
            click.echo("interrupted", err=True)
            sys.exit(int(ExitCode.EXECUTION))

    return wrapper  # type: ignore[return-value]


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")(func)


def limit_option(func: F) -> F:
    return click.option(
        "--limit",
        "limit",
        multiple=True,
        metavar="PATTERN",
        help="Only nodes whose name matches this glob (repeatable).",
    )(func)


def configure_logging(verbose: int) -> None:
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
