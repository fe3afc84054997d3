"""`gpuctl lab fault NODE FAULT [--clear]`: inject or clear an emulated hardware fault.

Added to the `lab` group defined in gpuctl/cli/lab.py (registered before this module);
the work is done by `gpuctl.lab.standin.faults.apply_fault`.
"""

from __future__ import annotations

import click

from gpuctl.cli.common import console, emit_json, handle_errors, json_option
from gpuctl.lab.standin.faults import FAULTS

#: the faults as `gpuctl.lab.standin.faults.FAULTS` declares them (the one list)
_FAULT_HELP = ", ".join(FAULTS)


@click.command("fault")
@click.argument("node")
@click.argument("fault", required=False)
@click.option("--clear", is_flag=True, help="Remove the fault instead of injecting it.")
@click.option("--gpu", type=int, default=None, help="GPU index for per-GPU faults (default: the fault's own).")
@click.option("--list", "list_active", is_flag=True, help="List the faults active on NODE.")
@json_option
@handle_errors
def fault_cmd(node: str, fault: str | None, clear: bool, gpu: int | None, list_active: bool, as_json: bool) -> None:
    """Inject FAULT on lab NODE (or --clear it)."""
    from gpuctl.errors import InputError
    from gpuctl.lab.standin.faults import active_faults, apply_fault

    if list_active or fault is None:
        if fault is None and not list_active:
            raise InputError("name a FAULT (or --list)", [f"known faults: {_FAULT_HELP}"])
        lines = active_faults(node)
        if as_json:
            emit_json({"node": node, "faults": lines})
        else:
            console().print("\n".join(lines) or f"{node}: no faults")
        return
    out = apply_fault(node, fault, clear=clear, gpu=gpu)
    if as_json:
        emit_json({"node": node, "fault": fault, "cleared": clear, "output": out})
    else:
        console().print(f"{node}: {fault} {'cleared' if clear else 'injected'}")
        if out.strip():
            console().print(out.rstrip(), markup=False, highlight=False)


fault_cmd.help = "Inject FAULT on lab NODE (or --clear it). Faults: " + _FAULT_HELP


def register(main: click.Group) -> None:
    group = main.commands.get("lab")
    if isinstance(group, click.Group) and "fault" not in group.commands:
        group.add_command(fault_cmd)
