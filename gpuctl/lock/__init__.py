"""The lock file: what is installed on every node, read from the nodes, and drift from it.

`gpuctl lock INVENTORY` reads every node with one shell script (in parallel, through
`gpuctl.bench.remote`) and writes `<inventory stem>.lock.yaml` beside the inventory:

    lock_version: 1
    generated: 2025-01-01T00:00:00+00:00
    gpuctl_version: 0.1.0
    cluster: lab
    inventory: {path: inventories/lab.yaml, sha256: …}
    matrix: {name: r580-cuda13.0, path: matrices/r580-cuda13.0.yaml, sha256: …}
    nodes:
      gpu-01:
        read_at: …
        os: debian 12
        kernel: 6.1.0-27-amd64
        nvidia_module: 580.95.05        # /sys/module/nvidia/version; null when not loaded
        packages:                       # per matrix component: the INSTALLED version
          cuda: {cuda-toolkit-13-0: {version: 13.0.2-1, held: true}}
        firmware: {hca/mlx5_0: 28.39.1002, vbios/0: 96.00.89.00.01}
        files: {/etc/nccl.conf: <sha256>, /etc/sysctl.d/90-gpuctl.conf: null}   # null = absent
        train_env: {torch: 2.8.0, nvidia-nccl-cu12: 2.27.3, …}   # the training venv's distributions

Versions are exactly what dpkg (`${Version}`, epoch included) or rpm (`[E:]V-R`) print,
so they can be used as pins again (`pin_from_lock`). The list of configuration files
lives in one place: `managed_files(spec)`.

`diff(...)` is the pure drift logic: per node against its lock entry, per node against
the majority of its peers (files with node-specific content — addresses, array UUIDs —
are compared with the lock only), nodes missing from the read or from the lock.

One module per part: `model` (the lock file, its reading and writing), `managed` (the list of
rendered configuration files), `read` (the node read script and its parsing), `compare` (drift,
pure), `pins` (pins from the lock); and one per workflow: `locking` (`gpuctl lock`),
`drifting` (`gpuctl drift`), `rebuilding` (`gpuctl rebuild`). This package re-exports their
public names.
"""

from __future__ import annotations

from gpuctl.lock.compare import Drift, DriftReport, diff, diff_entry, diff_peers, flatten
from gpuctl.lock.drifting import drift
from gpuctl.lock.locking import LockOutcome, lock
from gpuctl.lock.managed import ManagedFile, managed_files, per_node_file
from gpuctl.lock.model import (
    LOCK_VERSION,
    FileRef,
    LockedPackage,
    LockFile,
    MatrixRef,
    NodeLock,
    build_lock,
    dump_lock,
    load_lock,
    lock_firmware,
    lock_path,
    now_iso,
    parse_lock,
    write_lock,
)
from gpuctl.lock.pins import consensus_entry, pin_from_lock, pins_changed
from gpuctl.lock.read import (
    READ_TIMEOUT_S,
    ReadResult,
    component_packages,
    parse_read,
    read_nodes,
    read_script,
    train_env_python,
)
from gpuctl.lock.rebuilding import RebuildOutcome, rebuild

__all__ = [
    "LOCK_VERSION", "READ_TIMEOUT_S", "Drift", "DriftReport", "FileRef", "LockFile", "LockOutcome",
    "LockedPackage", "ManagedFile", "MatrixRef", "NodeLock", "ReadResult", "RebuildOutcome", "build_lock",
    "component_packages", "consensus_entry", "diff", "diff_entry", "diff_peers", "drift", "dump_lock", "flatten",
    "load_lock", "lock", "lock_firmware", "lock_path", "managed_files", "now_iso", "parse_lock", "parse_read",
    "per_node_file", "pin_from_lock", "pins_changed", "read_nodes", "read_script", "rebuild", "train_env_python",
    "write_lock",
]
