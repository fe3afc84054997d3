"""The per-host summary of a plan or provision run: one rich table, one JSON object, one exit code.

Exit codes (gpuctl.errors.ExitCode): 0 every host succeeded; 1 at least one host failed
(others may have succeeded); 3 gpuctl itself could not run — no host could be reached
or prepared, so nothing was planned or changed anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table
from rich.text import Text

from gpuctl.errors import ExitCode
from gpuctl.redact import redact
from gpuctl.runner.engine import HostResult
from gpuctl.runner.roles import RoleChoice


@dataclass
class RunSummary:
    command: str  # "plan" or "provision"
    hosts: dict[str, HostResult]
    roles: Sequence[RoleChoice] = ()
    seconds: float = 0.0
    run_id: str = ""
    dry: bool = False
    verify: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def failed_hosts(self) -> list[str]:
        return [n for n, h in self.hosts.items() if h.status != "ok"]

    @property
    def reachable(self) -> list[str]:
        return [n for n, h in self.hosts.items() if h.status != "unreachable"]

    def exit_code(self) -> ExitCode:
        code = exit_code_for(self.hosts.values())
        if code == ExitCode.OK and self.verify is not None and self.verify.get("status") not in ("pass", None):
            return ExitCode.CHECKS_FAILED  # provisioned, but verification failed or could not run
        return code

    def host_json(self, h: HostResult) -> dict[str, Any]:
        d: dict[str, Any] = {
            "status": h.status,
            "error": h.error or None,
            "seconds": h.seconds,
            "rebooted": h.rebooted,
            "remote_commands": h.remote_commands,
            "operations": len(h.ops),
        }
        if self.dry:
            d.update(will_change=h.count("will change"), may_change=h.count("may change"),
                     no_change=h.count("no change"),
                     changes=[{"operation": o.name, "role": o.role, "status": o.status, "commands": o.commands}
                              for o in h.ops if o.status in ("will change", "may change")])
            d.update(changed=0, unchanged=0, failed=0)
        else:
            d.update(changed=h.changed, unchanged=h.unchanged, failed=h.failed, not_run=h.not_run)
        return d

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "command": self.command,
            "run_id": self.run_id,
            "dry_run": self.dry,
            "seconds": round(self.seconds, 2),
            "exit_code": int(self.exit_code()),
            "roles": [{"role": r.name, "status": "runs" if r.runs else f"skipped: {r.reason}"} for r in self.roles],
            "hosts": {n: self.host_json(h) for n, h in self.hosts.items()},
        }
        if self.verify is not None:
            out["verify"] = self.verify
        out.update(self.extra)
        return out

    def table(self) -> Table:
        title = f"gpuctl {self.command}" + (f" · run {self.run_id}" if self.run_id else "")
        t = Table(title=title, title_justify="left")
        t.add_column("host")
        t.add_column("status")
        if self.dry:
            t.add_column("will change", justify="right")
            t.add_column("may change", justify="right")
            t.add_column("no change", justify="right")
        else:
            t.add_column("changed", justify="right")
            t.add_column("unchanged", justify="right")
            t.add_column("failed", justify="right")
            t.add_column("rebooted")
        t.add_column("time", justify="right")
        t.add_column("error")
        for n, h in self.hosts.items():
            style = {"ok": "green", "failed": "red", "unreachable": "red"}.get(h.status, "")
            status = Text(h.status, style=style)  # Text, not markup: cells here quote outside text
            if self.dry:
                counts = [str(h.count("will change")), str(h.count("may change")), str(h.count("no change"))]
            else:
                counts = [str(h.changed), str(h.unchanged), str(h.failed), "yes" if h.rebooted else "no"]
            t.add_row(Text(n), status, *counts, f"{h.seconds:.1f}s", Text(redact(h.error or "")))
        return t

    def skipped_roles_lines(self) -> list[str]:
        return [f"{r.name}: skipped: {r.reason}" for r in self.roles if not r.runs]


def exit_code_for(hosts: Sequence[HostResult] | Any) -> ExitCode:
    hosts = list(hosts)
    if not hosts:
        return ExitCode.EXECUTION
    prepared = [h for h in hosts if h.status == "ok" or h.ops]
    if not prepared:
        return ExitCode.EXECUTION
    if any(h.status != "ok" for h in hosts):
        return ExitCode.CHECKS_FAILED
    return ExitCode.OK
