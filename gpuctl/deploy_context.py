"""How a role finds its NodeSpec and run options inside a pyinfra deploy.

The runner stores each host's NodeSpec in pyinfra host data under `gpuctl_spec` and the
command's options under `gpuctl_options`. Roles call `node_spec()` / `run_options()`
instead of reading host data themselves, so the contract lives in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyinfra import host

from gpuctl.spec import NodeSpec

SPEC_KEY = "gpuctl_spec"
OPTIONS_KEY = "gpuctl_options"


@dataclass(frozen=True)
class RunOptions:
    """Command-line decisions the roles must respect."""

    allow_wipe: bool = False
    max_unavailable: int = 1
    reboot_timeout_s: int = 600
    lab: bool = False
    extra: dict[str, str] = field(default_factory=dict)


def node_spec() -> NodeSpec:
    spec = host.data.get(SPEC_KEY)
    if not isinstance(spec, NodeSpec):
        raise RuntimeError(f"host {host.name} has no NodeSpec in host data '{SPEC_KEY}'")
    return spec


def run_options() -> RunOptions:
    opts = host.data.get(OPTIONS_KEY)
    return opts if isinstance(opts, RunOptions) else RunOptions()
