"""The verify result model: what one check on one host found, and how a failure is told.

A check function raises `CheckFailure` (an AssertionError) carrying what was expected,
what was found and a remediation class; `CouldNotRun` says the check could not be made
at all (SSH failed, the tool is missing, its output was unreadable) — a distinct status,
never a pass and never a plain "fail". The pytest plugin copies these fields into the
test report, so the runner reads them even from an xdist worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from gpuctl.redact import redact
from gpuctl.remediation import Remediation
from gpuctl.results import CheckStatus, HostStatus

__all__ = [
    "CheckFailure", "CheckResult", "CheckStatus", "CouldNotRun", "HostResult", "HostStatus", "Remediation",
    "VerifyResult",
]


def _text(value: Any) -> str:
    """A field as text, secrets redacted (a message may name a repository URL with its
    password; every field reaches the terminal, --json and the report)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return redact(str(value))


class CheckFailure(AssertionError):
    """A check ran and the host is not as the NodeSpec says."""

    def __init__(self, message: str, *, expected: Any, found: Any, remediation: Remediation,
                 subject: str = "") -> None:
        self.expected = _text(expected)
        self.found = _text(found)
        self.remediation = Remediation(remediation)
        self.subject = subject
        self.message = message = _text(message)
        super().__init__(f"{message} (expected: {self.expected}; found: {self.found}; "
                         f"remediation: {self.remediation.value})")

    def fields(self) -> dict[str, str]:
        return {"expected": self.expected, "found": self.found, "remediation": self.remediation.value,
                "message": self.message, "subject": self.subject}


class CouldNotRun(Exception):
    """The check could not be made: SSH failure, a missing command, unreadable output."""

    def __init__(self, message: str, remediation: Remediation = Remediation.RERUN) -> None:
        self.message = message = _text(message)
        self.remediation = Remediation(remediation)
        super().__init__(message)

    def fields(self) -> dict[str, str]:
        return {"expected": "", "found": "", "remediation": self.remediation.value, "message": self.message,
                "subject": ""}


@dataclass
class CheckResult:
    host: str
    check: str  # "nvidia_driver.gpu_pcie_width[gpu3]"
    role: str
    status: CheckStatus
    expected: str = ""
    found: str = ""
    remediation: str = ""
    message: str = ""
    duration_s: float = 0.0
    unreachable: bool = False  # could not run because SSH to the host failed

    def as_dict(self) -> dict[str, Any]:
        # field by field: dataclasses.asdict deep-copies each value (3000+ results at 64 nodes)
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"status": self.status.value}


@dataclass
class HostResult:
    host: str
    checks: list[CheckResult] = field(default_factory=list)
    unreachable_reason: str = ""

    def count(self, status: CheckStatus) -> int:
        return sum(1 for c in self.checks if c.status is status)

    @property
    def status(self) -> HostStatus:
        if self.unreachable_reason:
            return HostStatus.UNREACHABLE
        if self.count(CheckStatus.FAIL):
            return HostStatus.FAIL
        if self.count(CheckStatus.ERROR):
            return HostStatus.ERROR
        return HostStatus.PASS if self.count(CheckStatus.PASS) else HostStatus.ERROR

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status is CheckStatus.FAIL]

    @property
    def errors(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status is CheckStatus.ERROR]

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "status": self.status.value,
            "unreachable_reason": self.unreachable_reason,
            "counts": {s.value: self.count(s) for s in CheckStatus},
            "failed": [_brief(c) for c in self.failed],
            "could_not_run": [{"check": "ssh", "expected": "host reachable", "found": "unreachable",
                               "remediation": "rerun", "message": self.unreachable_reason}]
            if self.unreachable_reason else [_brief(c) for c in self.errors],
            "checks": [c.as_dict() for c in self.checks],
        }


def _brief(c: CheckResult) -> dict[str, str]:
    return {"check": c.check, "expected": c.expected, "found": c.found, "remediation": c.remediation,
            "message": c.message}


@dataclass
class VerifyResult:
    hosts: dict[str, HostResult]
    duration_s: float = 0.0
    run_id: str | None = None
    remote_commands: dict[str, int] = field(default_factory=dict)

    @property
    def status(self) -> HostStatus:
        statuses = {h.status for h in self.hosts.values()}
        if not self.hosts or statuses == {HostStatus.UNREACHABLE}:
            return HostStatus.UNREACHABLE
        if HostStatus.FAIL in statuses:
            return HostStatus.FAIL
        if statuses & {HostStatus.ERROR, HostStatus.UNREACHABLE}:
            return HostStatus.ERROR
        return HostStatus.PASS

    @property
    def all_checks(self) -> list[CheckResult]:
        return [c for h in self.hosts.values() for c in h.checks]

    def to_json(self) -> dict[str, Any]:
        """The runner's hook name for `as_dict` (gpuctl provision records it)."""
        return self.as_dict()

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "run": self.run_id,
            "duration_s": round(self.duration_s, 2),
            "remote_commands": self.remote_commands,
            "hosts": {name: h.as_dict() for name, h in sorted(self.hosts.items())},
        }
