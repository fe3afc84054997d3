"""nvidia-smi in its three useful forms: `-q` text, `-q -x` XML, and `--query-gpu` CSV.

All three give the same `NvidiaSmiResult` (one `GpuInfo` per GPU). Checks should run the
CSV form with the canonical field list `QUERY_GPU_FIELDS`::

    nvidia-smi --query-gpu=<",".join(QUERY_GPU_FIELDS)> --format=csv,noheader,nounits

`-q` and `-q -x` carry no GPU index: GPUs are numbered in the order printed, which is
nvidia-smi's own index order (PCI bus order).

When nvidia-smi cannot talk to the driver it prints one line instead of data. Those
outputs raise a typed `NvidiaSmiFailure` subclass of `ParseError`, so a check can tell
them apart (`except DriverLibraryMismatch:` → "driver/library mismatch, reboot") from a
merely unreadable file; each carries a short `kind` string.

Values nvidia-smi cannot report (``N/A``, ``[N/A]``, ``[Not Supported]``) become None.

One module per form: `q_text` (-q), `q_xml` (-q -x), `query_gpu` (--query-gpu CSV); the data
model and failures in `model`, the value readers the three share in `values`. Import each name
from the module it lives in; this package re-exports nothing.
"""
