"""Verification: testinfra checks generated from the NodeSpec, run over SSH, judged into
per-host results with expected / found / remediation for every failure.

`run_verify(loaded_inventory, specs, record, limit, parallel)` is the entry point for
`gpuctl verify` and for `gpuctl provision` after provisioning. Role check modules live in
`roles/<role>/checks.py` and are written with `gpuctl.checks.api`.
"""

from gpuctl.checks.model import (
    CheckFailure,
    CheckResult,
    CheckStatus,
    CouldNotRun,
    HostResult,
    HostStatus,
    VerifyResult,
)
from gpuctl.checks.runner import check_files, list_checks, run_verify

__all__ = [
    "CheckFailure", "CheckResult", "CheckStatus", "CouldNotRun", "HostResult", "HostStatus", "VerifyResult",
    "check_files", "list_checks", "run_verify",
]
