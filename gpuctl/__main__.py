"""`python -m gpuctl` runs the CLI."""

from gpuctl.cli.entry import run

run()
