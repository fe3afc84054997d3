"""Verification: testinfra checks generated from the NodeSpec, run over SSH, judged into
per-host results with expected / found / remediation for every failure.

`run_verify(loaded_inventory, specs, record, limit, parallel)` is the entry point for
`gpuctl verify` and for `gpuctl provision` after provisioning. Role check modules live in
`roles/<role>/checks.py` and are written with `gpuctl.checks.api`. The result types live in
`gpuctl.checks.model`, the entry points in `gpuctl.checks.runner`; this package re-exports nothing.
"""
