"""`python -m gpuctl` runs the CLI."""

from gpuctl.cli.main import main

main()
