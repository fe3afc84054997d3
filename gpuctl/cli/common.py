"""Options, output helpers and error translation shared by every command."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.text import Text

from gpuctl.errors import ExitCode, GpuctlError, InputError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 checks failed, 2 usage or input error, 3 execution error."
)


def console(stderr: bool = False) -> Console:
    """A rich console that respects NO_COLOR and plain (non-TTY) output.

    Markup is off: every string printed (tool output, a matrix description, a message
    quoting an inventory) is shown as it is, `[/]` included, never read as rich markup.
    Styling is given explicitly with `styled()` (a `rich.text.Text`)."""
    return Console(
        stderr=stderr,
        no_color="NO_COLOR" in os.environ,
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text from plain strings and (text, style) pairs: styles without markup parsing."""
    return Text.assemble(*parts)


def emit_json(obj: Any) -> None:
    """Print one JSON object on stdout, secrets redacted (gpuctl.redact: URL userinfo, values
    under secret keys, known inventory secrets): stdout is captured by CI logs and terminals;
    non-finite numbers never printed (gpuctl.fileio.dumps_json)."""
    from gpuctl.fileio import dumps_json
    from gpuctl.redact import redact, redact_obj

    click.echo(dumps_json(redact_obj(obj), default=lambda o: redact(str(o))))


def _close_runs(status: str) -> None:
    """Finish the run records this process left open (run.json gets `status` and an end
    time) and drop its inventory locks. Imported late: runrecord is not needed for --help."""
    runrecord = sys.modules.get("gpuctl.runrecord")
    if runrecord is not None:
        runrecord.interrupt_active(status)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread: handled like Ctrl-C (a KeyboardInterrupt,
    so gevent's hub and the runner's cancel path treat it the same)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signum)


def handle_errors(func: F) -> F:
    """Translate GpuctlError into a message on stderr (secrets redacted) and its exit code;
    Ctrl-C, SIGTERM and SIGHUP finish the open run records as interrupted and exit 3."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous: dict[int, Any] = {}
        for sig in _STOP_SIGNALS:
            with contextlib.suppress(ValueError):  # not the main thread: signals stay as they are
                previous[sig] = signal.signal(sig, _raise_terminated)
        try:
            return func(*args, **kwargs)
        except GpuctlError as exc:
            _close_runs("error")
            from gpuctl.redact import redact

            click.echo(f"error: {redact(str(exc))}", err=True)  # an error may quote a URL with its password
            sys.exit(int(exc.exit_code))
        except KeyboardInterrupt as exc:
            for sig in (*_STOP_SIGNALS, signal.SIGINT):  # a second signal must not cut the bookkeeping short
                with contextlib.suppress(ValueError):
                    previous.setdefault(sig, signal.signal(sig, signal.SIG_IGN))
            _close_runs("interrupted")
            click.echo(f"terminated ({exc.args[0]})" if isinstance(exc, Terminated) else "interrupted", err=True)
            sys.exit(int(ExitCode.EXECUTION))
        finally:
            for sig, handler in previous.items():
                if handler is not None:
                    with contextlib.suppress(ValueError):
                        signal.signal(sig, handler)

    return wrapper  # type: ignore[return-value]


def on_terminal() -> bool:
    """Whether a person can be asked: stdin and stderr are both a terminal."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def yes_option(func: F) -> F:
    return click.option("--yes", "-y", is_flag=True,
                        help="Do not ask for confirmation (required when not on a terminal).")(func)


def require_yes(yes: bool, command: str, what: str) -> None:
    """Consent before a command changes hosts: `--yes`, or "y" typed on a terminal.
    Without a terminal and without --yes: InputError (exit 2), nothing touched. A "no"
    exits 0 with nothing changed."""
    if yes:
        return
    if not on_terminal():
        raise InputError(f"{command} {what}: pass --yes to run it without a terminal to confirm on "
                         "(nothing was changed)")
    if not click.confirm(f"{command} {what}. Continue?", default=False, err=True):
        click.echo("cancelled: nothing was changed", err=True)
        sys.exit(int(ExitCode.OK))


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
