"""`gpuctl spec`: print the resolved NodeSpec (what roles install and checks verify)."""

from __future__ import annotations

import click
from rich.table import Table

from gpuctl.cli.common import EXIT_CODES_HELP, console, emit_json, handle_errors, json_option, styled
from gpuctl.components import component
from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory
from gpuctl.matrix import OS_FAMILIES
from gpuctl.redact import known_from_files
from gpuctl.spec import resolve

_OS_BY_FAMILY = {"ubuntu2204": "ubuntu-22.04", "ubuntu2404": "ubuntu-24.04", "debian12": "debian-12",
                 "rhel9": "rocky-9"}


@click.command("spec", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--host", "host", help="Only this node.")
@click.option("--os", "os_family", type=click.Choice(OS_FAMILIES), help="Resolve as if the nodes ran this OS.")
@json_option
@handle_errors
def spec(inventory: str, host: str | None, os_family: str | None, as_json: bool) -> None:
    """Resolve INVENTORY + matrix + SKU into one NodeSpec per node and print it."""
    loaded = load_inventory(inventory)
    known_from_files((inventory,))  # its secrets are redacted from what is printed (emit_json)
    if os_family:
        cluster = loaded.inventory.cluster.model_copy(update={"os": _OS_BY_FAMILY[os_family]})
        loaded.inventory = loaded.inventory.model_copy(update={"cluster": cluster})
        if os_family not in loaded.matrix.matrix.packages:
            raise InputError(f"matrix {loaded.matrix.matrix.name} has no packages for {os_family}")
    specs = resolve(loaded, (host,) if host else ())
    if host and not specs:
        raise InputError(f"no node named {host}")
    if as_json:
        dumped = [s.model_dump(mode="json") for s in specs]
        emit_json(dumped[0] if host else dumped)
        return
    out = console()
    for s in specs:
        out.print(styled((s.node, "bold"), f" {s.address}:{s.ssh_port} — {s.sku}, {s.os} ({s.os_family}), "
                         f"matrix {s.matrix}"))
        table = Table("role / component", "packages (pinned, held)", "note")
        for role, reason in s.roles.items():
            pins = ", ".join(pin for part in component(role).parts for pin in s.pins(part.name))
            table.add_row(role, pins, f"skipped: {reason}" if reason else "")
        out.print(table)


def register(main: click.Group) -> None:
    main.add_command(spec)
