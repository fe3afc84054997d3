"""`gpuctl inventory validate`: check an inventory (and its matrix) without touching a host."""

from __future__ import annotations

import click

from gpuctl.cli.common import EXIT_CODES_HELP, console, emit_json, handle_errors, json_option
from gpuctl.inventory import load_inventory
from gpuctl.spec import check_before_touching


@click.group(epilog=EXIT_CODES_HELP)
def inventory() -> None:
    """Inventory files: validation."""


@inventory.command("validate", epilog=EXIT_CODES_HELP)
@click.argument("path", type=click.Path(dir_okay=False))
@json_option
@handle_errors
def validate(path: str, as_json: bool) -> None:
    """Validate PATH: schema, addresses, racks and power, RAID, Lustre, and the matrix
    rules for its SKU and OS. Every problem is reported with its line; exit 2 on any."""
    loaded = load_inventory(path)
    check_before_touching(loaded)
    inv = loaded.inventory
    if as_json:
        emit_json({"path": path, "valid": True, "cluster": inv.cluster.name, "nodes": len(inv.nodes),
                   "sku": loaded.sku.name, "matrix": loaded.matrix.matrix.name, "warnings": loaded.warnings})
        return
    out = console()
    for w in loaded.warnings:
        out.print(w)
    out.print(f"{path}: ok — cluster {inv.cluster.name}, {len(inv.nodes)} node(s) of {loaded.sku.name}, "
              f"matrix {loaded.matrix.matrix.name}, {inv.cluster.os}")


def register(main: click.Group) -> None:
    main.add_command(inventory)
