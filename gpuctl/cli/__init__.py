"""The `gpuctl` command line: the only place that imports click, configures logging
and turns library errors into messages and exit codes.

Each command group lives in its own module in this package and is registered on
`main` in `gpuctl.cli.main`.
"""
