"""Provision: every role of gpuctl.spec.ROLE_ORDER, in order, on the current host.

This file only composes roles; each role lives in roles/<name>/install.py.

Two ways to run it:

1. `gpuctl provision INVENTORY` (normal): the runner loads this file by path, computes
   the role selection once for the whole cluster (--only/--skip and the NodeSpecs'
   skip reasons) and calls `provision(choices, on_role=...)` for every host.

2. The plain pyinfra CLI, with the inventory adapter next to this file:

       GPUCTL_INVENTORY=.lab/lab.yaml pyinfra deploy/inventory.py deploy/provision.py
       GPUCTL_INVENTORY=.lab/lab.yaml GPUCTL_ONLY=base,nvidia_repo \\
           pyinfra deploy/inventory.py deploy/provision.py --dry

   Here the selection is computed from the current host's NodeSpec and the GPUCTL_ONLY /
   GPUCTL_SKIP environment variables (comma separated). The NodeSpecs of one inventory
   share SKU and matrix, so every host gets the same role sequence (pyinfra matches
   operations across hosts by position). Reboots use one RebootGate per pyinfra run,
   sized by GPUCTL_MAX_UNAVAILABLE (default 1).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from gpuctl.deploy_context import node_spec
from gpuctl.runner.roles import RoleChoice, load_role, select_roles


def provision(choices: Sequence[RoleChoice], on_role: Callable[[str], None] | None = None) -> None:
    """Run each selected role's `install` deploy on the current host, in order."""
    for choice in choices:
        if not choice.runs:
            continue
        if on_role is not None:
            on_role(choice.name)
        load_role(choice.name).install()


def _env_list(name: str) -> tuple[str, ...]:
    return tuple(p for p in os.environ.get(name, "").split(",") if p.strip())


def _cli_main() -> None:
    """Entry when executed by the plain `pyinfra` CLI."""

    choices = select_roles([node_spec()], only=_env_list("GPUCTL_ONLY"), skip=_env_list("GPUCTL_SKIP"))
    provision(choices)


try:
    import pyinfra as _pyinfra

    if _pyinfra.is_cli and __name__ != "gpuctl_deploy.provision":
        _cli_main()
except ImportError:  # pragma: no cover
    pass
