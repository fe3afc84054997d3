"""Options, output helpers and error translation shared by every command."""

from __future__ import annotations

import functools
import json
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
    """Print one JSON object on stdout, secrets redacted (gpuctl.redact: URL userinfo, values
    under secret keys, known inventory secrets): stdout is captured by CI logs and terminals."""
    from gpuctl.redact import redact, redact_obj

    click.echo(json.dumps(redact_obj(obj), indent=2, sort_keys=True, default=lambda o: redact(str(o))))


def _close_runs(status: str) -> None:
    """Finish the run records this process left open (run.json gets `status` and an end
    time) and drop its inventory locks. Imported late: runrecord is not needed for --help."""
    runrecord = sys.modules.get("gpuctl.runrecord")
    if runrecord is not None:
        runrecord.interrupt_active(status)


def handle_errors(func: F) -> F:
    """Translate GpuctlError into a message on stderr (secrets redacted) and its exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except GpuctlError as exc:
            _close_runs("error")
            from gpuctl.redact import redact

            click.echo(f"error: {redact(str(exc))}", err=True)  # an error may quote a URL with its password
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
    from gpuctl.redact import RedactingFormatter

    handler = logging.StreamHandler()  # stderr, secrets redacted like every log gpuctl writes
    handler.setFormatter(RedactingFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
