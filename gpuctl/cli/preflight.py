"""`gpuctl preflight`: hardware found vs hardware ordered, before anything is installed."""

from __future__ import annotations

import sys

import click
from rich.table import Table

from gpuctl.cli.common import EXIT_CODES_HELP, console, emit_json, handle_errors, json_option, limit_option, styled
from gpuctl.errors import ExitCode
from gpuctl.inventory import load_inventory
from gpuctl.preflight import run_preflight
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "error": "bold red",
          "not-applicable": "dim", "no-threshold": "dim"}


@click.command("preflight", epilog=EXIT_CODES_HELP)
@click.argument("inventory", type=click.Path(dir_okay=False))
@limit_option
@json_option
@handle_errors
def preflight(inventory: str, limit: tuple[str, ...], as_json: bool) -> None:
    """Check every node before installing: SSH, OS and kernel, Secure Boot, free disk, CPU
    memory, GPUs by PCI id with their PCIe links, NVMe count, HCAs and port rates, and the
    rack power budget. Exit 1 when the hardware found is not the hardware ordered."""
    loaded = load_inventory(inventory)
    specs = resolve(loaded, limit)
    record = RunRecord.create("preflight", loaded.path, loaded.matrix.path)
    result = run_preflight(loaded, specs, record)
    record.finish("fail" if result.failed else "pass")
    if as_json:
        data = result.as_dict()
        data["run"] = str(record.path)
        emit_json(data)
    else:
        out = console()
        table = Table("node", "check", "status", "found", "expected", "message", title="preflight")
        for node, verdicts in result.verdicts.items():
            for v in verdicts:
                if v.status.value == "pass" and v.check not in ("gpu_count", "nvme_count", "cpu_memory", "os"):
                    continue
                table.add_row(node, v.check, styled((v.status.value, _STYLE[v.status.value])), str(v.value),
                              str(v.threshold), "" if v.status.value == "pass" else v.message)
        out.print(table)
        racks = Table("rack", "cooling", "budget kW", "nodes", "draw kW", title="rack power")
        for r in result.racks:
            racks.add_row(str(r["rack"]), str(r["cooling"]), f"{r['budget_kw']:g}", ", ".join(r["nodes"]),
                          f"{r['draw_kw']:g}")
        out.print(racks)
        out.print(f"run record: {record.path}")
    if result.failed:
        sys.exit(int(ExitCode.CHECKS_FAILED))


def register(main: click.Group) -> None:
    main.add_command(preflight)
