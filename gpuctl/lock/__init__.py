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
`drifting` (`gpuctl drift`), `rebuilding` (`gpuctl rebuild`). Import each name from the module
it lives in; this package re-exports nothing.
"""
