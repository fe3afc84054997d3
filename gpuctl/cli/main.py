"""The top-level `gpuctl` group and the registration of every command group."""

from __future__ import annotations

import click

from gpuctl import __version__
from gpuctl.cli.common import EXIT_CODES_HELP, configure_logging

#: Commands whose module is not named after them (a stale entry only costs the fallback).
_MODULE_OF = {"plan": "provision", "drift": "lock", "rebuild": "lock"}


class _LazyGroup(click.Group):
    """Registers only the module a command needs when `lazy` is set (the console script):
    importing every command module (verify pulls in pytest and testinfra, analyze the
    parsers) cost ~1 s of CPU on every `gpuctl` run (profiled for issue 8). Unknown
    names and --help fall back to registering everything, so nothing is ever missing."""

    lazy = False

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if self.lazy and cmd_name not in self.commands:
            _register(_MODULE_OF.get(cmd_name, cmd_name))
            if cmd_name not in self.commands:
                _register()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        if self.lazy:
            _register()
        return super().list_commands(ctx)


@click.group(cls=_LazyGroup, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuctl")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """Build a GPU training cluster from bare metal and prove that it works."""
    configure_logging(verbose)


_registered: set[str] = set()


def _register(only: str | None = None) -> None:
    """Attach every command group: each module of this package that defines
    `register(main)` adds its commands (click lists them alphabetically).
    With `only`, just that module and its ``<only>_*`` extensions (e.g. lab_fault)."""
    import importlib
    import pkgutil

    import gpuctl.cli as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name in {"common", "main", "entry"} or info.name in _registered:
            continue
        if only is not None and info.name != only and not info.name.startswith(f"{only}_"):
            continue
        module = importlib.import_module(f"gpuctl.cli.{info.name}")
        _registered.add(info.name)
        if hasattr(module, "register"):
            module.register(main)


def enable_lazy_registration() -> None:
    """Called by the console script before `main()`: register command modules on demand."""
    main.lazy = True  # type: ignore[attr-defined]


if not getattr(__import__("gpuctl.cli", fromlist=["_"]), "LAZY_COMMANDS", False):
    _register()
