"""The `gpuctl` console script: patch gevent first, then run the CLI.

pyinfra runs hosts as gevent greenlets; the standard library must be monkey-patched
before anything imports socket/ssl users, or hosts run one at a time. Tests drive
`gpuctl.cli.main.main` directly and leave their own process unpatched.
"""

from __future__ import annotations


def run() -> None:
    from gpuctl.runner.bootstrap import ensure_patched

    ensure_patched()
    import gpuctl.cli

    gpuctl.cli.LAZY_COMMANDS = True  # type: ignore[attr-defined]  # read by gpuctl.cli.main at import
    from gpuctl.cli.main import enable_lazy_registration, main

    enable_lazy_registration()
    main()
