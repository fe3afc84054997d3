"""The top-level `gpuctl` group and the registration of every command group."""

from __future__ import annotations

import click

from gpuctl import __version__
from gpuctl.cli.common import EXIT_CODES_HELP, configure_logging


@click.group(epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuctl")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """Build a GPU training cluster from bare metal and prove that it works."""
    configure_logging(verbose)


def _register() -> None:
    """Attach every command group; each module exposes `register(main)`."""
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"gpuctl.cli.{name}").register(main)


# One module per command group, in the order they appear in --help.
COMMAND_MODULES: list[str] = []

_register()
