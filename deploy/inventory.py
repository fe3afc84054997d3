"""pyinfra inventory adapter: lets the plain `pyinfra` CLI run gpuctl deploys.

    GPUCTL_INVENTORY=.lab/lab.yaml pyinfra deploy/inventory.py deploy/provision.py [--dry]

Builds the same hosts and host data as `gpuctl provision` (NodeSpec, RunOptions, SSH
settings) from a gpuctl inventory. Optional: GPUCTL_LIMIT (comma-separated globs),
GPUCTL_MAX_UNAVAILABLE (reboot slots, default max(1, 10 % of the nodes)),
GPUCTL_ALLOW_WIPE=1, GPUCTL_STRICT_HOST_KEYS=1.
"""

from __future__ import annotations

import os

from gpuctl.deploy_context import RunOptions
from gpuctl.inventory import load_inventory
from gpuctl.runner.inventory import SshSettings, ssh_targets
from gpuctl.runner.reboot import default_max_unavailable
from gpuctl.spec import resolve

_loaded = load_inventory(os.environ["GPUCTL_INVENTORY"])
_specs = resolve(_loaded, tuple(p for p in os.environ.get("GPUCTL_LIMIT", "").split(",") if p))
_options = RunOptions(
    allow_wipe=os.environ.get("GPUCTL_ALLOW_WIPE") == "1",
    max_unavailable=int(os.environ.get("GPUCTL_MAX_UNAVAILABLE") or default_max_unavailable(len(_specs))),
    lab=_loaded.inventory.lab is not None,
)
_ssh = SshSettings.from_loaded(_loaded, strict_host_keys=os.environ.get("GPUCTL_STRICT_HOST_KEYS") == "1")

gpuctl_nodes = [
    (t.name, {**t.data, "gpuctl_spec": t.spec, "gpuctl_options": _options})
    for t in ssh_targets(_specs, _ssh)
]
