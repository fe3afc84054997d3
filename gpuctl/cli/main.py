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
    """Attach every command group: each module of this package that defines
    `register(main)` adds its commands (click lists them alphabetically)."""
    import importlib
    import pkgutil

    import gpuctl.cli as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name in {"common", "main"}:
            continue
        module = importlib.import_module(f"gpuctl.cli.{info.name}")
        if hasattr(module, "register"):
            module.register(main)


_register()
