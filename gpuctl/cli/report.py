"""`gpuctl report`: the acceptance report of a run, as HTML, Markdown or JSON."""

from __future__ import annotations

from pathlib import Path

import click

from gpuctl.cli.common import EXIT_CODES_HELP, handle_errors
from gpuctl.report.gather import build_report
from gpuctl.report.render import FORMATS, render


@click.command("report", epilog=EXIT_CODES_HELP)
@click.argument("run", default="latest")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="html", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
@handle_errors
def report(run: str, fmt: str, output: str | None) -> None:
    """The acceptance report for RUN (a run id, a run folder or 'latest'): cluster, exact
    version matrix, per-node checks, benchmarks against thresholds with sources, the NCCL
    chart, failures with remediation. Verify and bench results come from RUN or, when RUN
    lacks them, from the newest run of the same inventory (same sha256)."""
    text = render(build_report(run), fmt)
    if output:
        Path(output).write_text(text)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


def register(main: click.Group) -> None:
    main.add_command(report)
