"""`run_verify`: run every role's checks against the selected nodes and collect the results.

One pytest session (testinfra's ssh backend) runs `roles/<role>/checks.py` for all hosts,
with one generated ssh_config (multiplexed connections). Hosts run in parallel: each
host's remote commands are fetched up front in threads (`parallel` hosts at a time) and
the checks then judge the cached outputs in one process — on two cores this beat
pytest-xdist, whose workers each pay pytest's start-up (see `MODE_XDIST`). Results go to
`stages/verify.json` of the run record, raw outputs to `raw/<host>/verify-*`.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuctl.errors import ExecutionError, InputError
from gpuctl.inventory import LoadedInventory
from gpuctl.lock.model import lock_firmware
from gpuctl.paths import roles_dir
from gpuctl.results import verify_stage
from gpuctl.runner.logroute import engine_logs_to
from gpuctl.runrecord import RunRecord
from gpuctl.spec import ROLE_ORDER, NodeSpec, resolve

from . import paramiko_backend
from . import plugin as gplugin
from .model import CheckResult, CheckStatus, HostResult, VerifyResult
from .sshconfig import close_masters, render_ssh_config

log = logging.getLogger(__name__)

#: testinfra backend for remote hosts: "gpuctl" (in-process paramiko with known_hosts checked,
#: `gpuctl.checks.paramiko_backend`) or "ssh" (one OpenSSH client process per command,
#: multiplexed). gpuctl:// costs a third of the CPU at 64 nodes (issue 8).
SSH_SCHEME = "gpuctl"
#: pytest plugins and features verify does without (see run_verify's arguments).
NO_PLUGINS: tuple[str, ...] = ("-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:typeguard",
                               "-p", "no:unraisableexception", "--assert=plain",
                               # per-item wrappers the checks never use (they neither log, warn
                               # nor print; pytest's own output goes to the record's log):
                               # ~1 s of CPU at 64 nodes × 37 checks (bench/scale.py, issue 8)
                               "-p", "no:logging", "-p", "no:warnings", "--capture=no",
                               "-p", "no:faulthandler", "-p", "no:junitxml", "-p", "no:doctest")
MODE_THREADS = "threads"
MODE_XDIST = "xdist"
DEFAULT_PARALLEL = 64  # hosts at once: in-process paramiko connections (~3 fds each), see SSH_SCHEME


def check_files(roles: Sequence[str] = ROLE_ORDER) -> list[Path]:
    """The check modules that exist, in provision order."""
    return [p for r in roles if (p := roles_dir() / r / "checks.py").is_file()]


class Collector:
    """pytest plugin object: one CheckResult per check and item, from the (possibly xdist)
    reports. A `@for_each` check is one pytest item per host whose call report carries each
    item's outcome; a setup error or skip of that item applies to every item it stands for."""

    def __init__(self) -> None:
        self.results: dict[str, CheckResult] = {}
        self.deselected = 0
        self.collected = 0

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        ident = props.get(gplugin.USER_PROPERTY)
        if ident is None:
            return
        per_item = props.get(gplugin.USER_PROPERTY + "_items")
        if per_item is not None:
            # the call's outcomes (the teardown report carries the same user_properties again)
            if report.when == "call":
                for o in per_item:
                    status = _OUTCOME_STATUS.get(o.get("outcome", ""), CheckStatus.ERROR)
                    self._add(report.nodeid, ident, f"{ident['check']}[{o['item']}]", status, o,
                              o.get("duration_s", 0.0))
            return
        ids = gplugin.item_ids(ident)
        extra: dict[str, Any] = props.get(gplugin.USER_PROPERTY + "_result") or {}
        if report.when == "teardown" and (f"{report.nodeid} {ids[0]}" in self.results or report.passed):
            return
        status: CheckStatus
        if report.passed:
            if report.when != "call":
                return
            status = CheckStatus.PASS
        elif report.skipped:
            status = CheckStatus.SKIP
            if not extra.get("message"):
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                extra = {"message": str(reason).removeprefix("Skipped: ")}
        else:
            outcome = extra.get("outcome", "error" if report.when != "call" else "fail")
            status = CheckStatus.FAIL if outcome == "fail" else CheckStatus.ERROR
            if not extra.get("message"):
                text = str(report.longrepr).strip().splitlines()
                extra = {**extra, "message": text[-1] if text else "check failed"}
        for check in ids:
            self._add(report.nodeid, ident, check, status, extra, getattr(report, "duration", 0.0) / len(ids))

    def _add(self, nodeid: str, ident: dict[str, Any], check: str, status: CheckStatus, extra: dict[str, Any],
             duration: float) -> None:
        result = CheckResult(
            host=ident["host"], check=check, role=ident["role"], status=status,
            expected=extra.get("expected", ""), found=extra.get("found", ""),
            remediation=extra.get("remediation", "") if status in (CheckStatus.FAIL, CheckStatus.ERROR) else "",
            message=extra.get("message", ""), duration_s=round(duration, 3))
        result.unreachable = bool(extra.get("unreachable"))
        self.results[f"{nodeid} {check}"] = result


_OUTCOME_STATUS = {"pass": CheckStatus.PASS, "fail": CheckStatus.FAIL, "error": CheckStatus.ERROR,
                   "skip": CheckStatus.SKIP}


class _Listing:
    def __init__(self) -> None:
        self.ids: dict[str, list[str]] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for it in session.items:
            ident = dict(it.user_properties).get(gplugin.USER_PROPERTY)
            if ident:
                self.ids.setdefault(ident["host"], []).extend(gplugin.item_ids(ident))


def list_checks(specs: Sequence[NodeSpec], roles: Sequence[str] = ROLE_ORDER) -> dict[str, list[str]]:
    """The check ids each host would run (collection only; nothing connects)."""
    work = Path(tempfile.mkdtemp(prefix="gpuctl-l-", dir="/tmp"))
    try:
        (work / "specs.json").write_text(json.dumps({s.node: s.model_dump(mode="json") for s in specs}))
        (work / "pytest.ini").write_text("[pytest]\n")
        args = [str(f) for f in check_files(roles)] + [
            "-c", str(work / "pytest.ini"), "--rootdir", str(roles_dir()), "--import-mode=importlib",
            "-p", "no:cacheprovider", "-p", "gpuctl.checks.plugin", "--collect-only", "-q",
            "--hosts=" + ",".join(f"ssh://{s.node}" for s in specs), f"--gpuctl-specs={work / 'specs.json'}",
        ]
        listing = _Listing()
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            code = pytest.main(args, plugins=[listing])
        if int(code) not in (0, 5):
            raise ExecutionError(f"collecting the checks failed (pytest exit {int(code)}):\n{buf.getvalue()[-2000:]}")
        return {s.node: sorted(listing.ids.get(s.node, [])) for s in specs}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _inventory_ssh(loaded: LoadedInventory) -> tuple[str | None, str | None, bool, int]:
    ssh = loaded.inventory.ssh
    key = ssh.key
    if key and not Path(key).expanduser().is_absolute():
        key = str((loaded.base_dir / key).resolve()) if hasattr(loaded, "base_dir") else key
    return key, ssh.known_hosts, ssh.strict_host_keys, ssh.connect_timeout_s


def run_verify(
    loaded: LoadedInventory,
    specs: Sequence[NodeSpec] | None = None,
    record: RunRecord | None = None,
    limit: Sequence[str] = (),
    parallel: int | None = None,
    *,
    mode: str = MODE_THREADS,
    connection: str = "ssh",
    roles: Sequence[str] = ROLE_ORDER,
    timeout_s: int = 120,
) -> VerifyResult:
    """Verify the selected nodes against their NodeSpecs.

    `specs` defaults to `resolve(loaded, limit)`; with `limit`, given specs are filtered
    by it too. `parallel` bounds how many hosts run at once. `connection="local"` checks
    this machine as the one node given (the hardware tier). Writes `stages/verify.json`
    and raw outputs into `record` when one is given. Raises ExecutionError when pytest
    itself cannot run the checks; unreachable hosts are results, not exceptions.
    """
    if specs is None:
        specs = resolve(loaded, tuple(limit))
    elif limit:
        names = {n.name for n in loaded.inventory.select(tuple(limit))}
        specs = [s for s in specs if s.node in names]
    specs = list(specs)
    if not specs:
        raise InputError("no nodes to verify")
    if len(specs) == 1 and specs[0].address == "@local":
        connection = "local"  # the inventory names this machine (hardware tier)
    if connection == "local" and len(specs) != 1:
        raise InputError("the local connection verifies exactly one node; use --limit")
    files = check_files(roles)
    if not files:
        raise ExecutionError(f"no check modules under {roles_dir()}")
    # A role every selected node skips has no check to run: its module is not collected (its
    # items were made for every host, then all deselected: half of the items on container
    # nodes, ~0.1 s CPU at 16 nodes, issue 18); `_result` reports the skip per host as before.
    files = [f for f in files if any(not s.roles.get(gplugin.role_of(f), "") for s in specs)] or files
    parallel = max(1, min(parallel or DEFAULT_PARALLEL, len(specs)))
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="gpuctl-v-", dir="/tmp"))
    control = work / "cm"
    control.mkdir(mode=0o700)
    try:
        (work / "specs.json").write_text(json.dumps({s.node: s.model_dump(mode="json") for s in specs}))
        # the firmware the lock file records per node (verify's firmware checks judge against it)
        (work / "lock-firmware.json").write_text(json.dumps(lock_firmware(loaded)))
        key, known_hosts, strict, connect_timeout = _inventory_ssh(loaded)
        ssh_config = work / "ssh_config"
        ssh_config.write_text(render_ssh_config(specs, key=key, known_hosts=known_hosts, strict_host_keys=strict,
                                                control_dir=control, connect_timeout_s=connect_timeout))
        ssh_config.chmod(0o600)
        (work / "pytest.ini").write_text("[pytest]\n")
        # Each output goes (redacted, 0600) straight to the record's raw/<host>/verify-<key>.txt
        # as it arrives: no second redaction and copy at the end (issue 18).
        raw_args = [f"--gpuctl-raw-dir={record.path / 'raw'}", "--gpuctl-raw-prefix=verify-"] if record else []
        hosts = "local://" if connection == "local" else ",".join(f"{SSH_SCHEME}://{s.node}" for s in specs)
        args = [str(f) for f in files] + [
            "-c", str(work / "pytest.ini"), "--rootdir", str(roles_dir()), "--import-mode=importlib",
            "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "gpuctl.checks.plugin",
            # Start-up and teardown cost nothing the checks use (profiled at 4-64 nodes, issue 8):
            # hypothesis' summary imports ~1 s of modules, assertion rewriting parses every checks
            # file (checks judge with expect(), never assert), unraisableexception gc-collects.
            *NO_PLUGINS,
            f"--hosts={hosts}", f"--ssh-config={ssh_config}",
            f"--gpuctl-specs={work / 'specs.json'}", *raw_args, f"--gpuctl-timeout={timeout_s}",
            f"--gpuctl-lock-firmware={work / 'lock-firmware.json'}",
            "-q", "-rN", "--tb=line", "-o", "console_output_style=classic",
        ]
        if mode == MODE_XDIST and parallel > 1:
            args += ["-n", str(parallel), "--dist", "loadgroup"]
        else:
            args += [f"--gpuctl-prefetch={parallel}"]
        collector = Collector()
        gplugin.reset_probes()
        buf = io.StringIO()
        log.info("verify: pytest %s", " ".join(args))
        # paramiko logs a traceback per failed handshake: to the record, not the terminal
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf), \
                engine_logs_to(record.path / "verify-ssh.log" if record is not None else None):
            code = pytest.main(args, plugins=[collector])
        remote = {name: p.commands_run for name, p in gplugin.probes().items()}
        gplugin.reset_probes()
        if record is not None:
            record.write_text("verify-pytest.log", buf.getvalue())
        if int(code) not in (0, 1, 5):
            tail = "\n".join(buf.getvalue().strip().splitlines()[-15:])
            raise ExecutionError(f"the check session could not run (pytest exit {int(code)}):\n{tail}")
        result = _result(specs, collector, roles, connection)
        result.duration_s = time.monotonic() - start
        result.remote_commands = remote
        if record is not None:
            result.run_id = record.id
            # written through the typed result the report reads (gpuctl.results.VerifyStage)
            record.stage("verify", verify_stage({**result.as_dict(), "ssh_config": ssh_config.read_text(),
                                                 "pytest_args": args}).dump())
        return result
    finally:
        if connection != "local":
            with contextlib.suppress(Exception):
                paramiko_backend.close_all()
                if SSH_SCHEME == "ssh":
                    close_masters(work / "ssh_config", [s.node for s in specs])
        shutil.rmtree(work, ignore_errors=True)


def _result(specs: Sequence[NodeSpec], collector: Collector, roles: Sequence[str], connection: str) -> VerifyResult:
    hosts = {s.node: HostResult(s.node) for s in specs}
    for r in collector.results.values():
        name = specs[0].node if connection == "local" else r.host
        hosts.setdefault(name, HostResult(name)).checks.append(r)
    for s in specs:
        h = hosts[s.node]
        for role in roles:
            reason = s.roles.get(role, "")
            if reason:
                h.checks.append(CheckResult(s.node, role, role, CheckStatus.SKIP, message=f"role skipped: {reason}"))
        ran = [c for c in h.checks if c.status is not CheckStatus.SKIP]
        if ran and all(c.status is CheckStatus.ERROR for c in ran) and any(c.unreachable for c in ran):
            h.unreachable_reason = next(c.message for c in ran if c.unreachable)
        h.checks.sort(key=lambda c: (roles.index(c.role) if c.role in roles else 99, c.check))
    return VerifyResult(hosts)

