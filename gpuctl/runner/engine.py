"""The pyinfra engine: one run over many hosts through pyinfra's Python API.

Stages, as pyinfra's own CLI orders them: connect (all hosts in parallel) → prepare
(every host runs the deploy function, which gathers facts and records operations; this
is the dry run) → execute (`run_ops`) → disconnect. A host that fails at any stage is
reported with a one-line reason and the others carry on: the engine connects hosts
itself (so unreachable hosts never abort the run), prepares hosts in parallel with
per-host error capture, runs with `FAIL_PERCENT=100`, and treats pyinfra's
"No hosts remaining!" as the normal end of a run in which every host failed.

Every remote command is recorded (host, stage, operation, command, exit status, output,
duration) by wrapping each host connector; the run record keeps them, the summary
counts them. Nothing here prints: progress goes through callbacks, pyinfra's log through
`logging.getLogger("pyinfra")` (the caller routes it to the run record).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gevent
from pyinfra.api import Config, State
from pyinfra.api.command import FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops
from pyinfra.api.state import (
    BaseStateCallback,
    StateStage,
)
from pyinfra.context import ctx_config, ctx_host, ctx_state

from gpuctl.deploy_context import RunOptions
from gpuctl.runner.inventory import Target, build_inventory
from gpuctl.runner.reboot import RebootGate, host_errors

log = logging.getLogger(__name__)

os.environ.setdefault("PYINFRA_PROGRESS", "off")


def one_line(text: str, limit: int = 240) -> str:
    """First non-empty line of text, shortened: the form of every per-host reason."""
    for line in str(text).splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


@dataclass
class CommandRecord:
    """One remote command as it ran."""

    host: str
    stage: str  # "prepare" (facts) or "execute"
    op: str | None  # operation name while an operation executes
    command: str
    success: bool
    stdout: list[str]
    stderr: list[str]
    seconds: float


@dataclass
class OpResult:
    """One operation on one host. status: changed | unchanged | failed | not run |
    will change | no change | may change (dry run; decided at run time)."""

    name: str
    role: str | None
    status: str
    commands: list[str] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""


@dataclass
class HostResult:
    node: str
    host: str
    status: str = "ok"  # ok | failed | unreachable
    error: str = ""
    ops: list[OpResult] = field(default_factory=list)
    seconds: float = 0.0
    rebooted: bool = False
    remote_commands: int = 0

    def count(self, status: str) -> int:
        return sum(1 for o in self.ops if o.status == status)

    @property
    def changed(self) -> int:
        return self.count("changed")

    @property
    def unchanged(self) -> int:
        return self.count("unchanged")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def not_run(self) -> int:
        return self.count("not run")


class _EngineCallback(BaseStateCallback):
    """Keeps connect errors, failing operations and per-host end times."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def host_connect_error(self, state: State, host: Any, error: Any) -> None:  # type: ignore[override]
        if self.engine.executed:
            # while operations run, a connect error comes from a reboot's reconnect loop:
            # the reboot records its own outcome, and a host that comes back is fine
            return
        self.engine._set_error(host, one_line(error.args[0] if getattr(error, "args", None) else error))

    def operation_host_start(self, state: State, host: Any, op_hash: str) -> None:  # type: ignore[override]
        self.engine._host_last[host.name] = time.monotonic()

    def operation_host_success(self, state: State, host: Any, op_hash: str,  # type: ignore[override]
                               retry_count: int = 0) -> None:
        self.engine._host_last[host.name] = time.monotonic()

    def operation_host_error(self, state: State, host: Any, op_hash: str,  # type: ignore[override]
                             retry_count: int = 0, max_retries: int = 0) -> None:
        self.engine._host_last[host.name] = time.monotonic()
        self.engine._failed_op.setdefault(host.name, op_hash)


class Engine:
    """One pyinfra State over the given targets. Use: connect → prepare → (execute) → results."""

    def __init__(self, targets: Sequence[Target], options: RunOptions | None = None, *,
                 parallel: int = 0, connect_timeout_s: int = 10, gate: RebootGate | None = None,
                 callbacks: Iterable[BaseStateCallback] = (), record_files: bool = False) -> None:
        self.targets = list(targets)
        self.options = options or RunOptions()
        self.gate = gate or RebootGate(max(1, self.options.max_unavailable))
        inventory = build_inventory(self.targets, self.options, self.gate)
        config = Config(PARALLEL=parallel or 0, FAIL_PERCENT=100, CONNECT_TIMEOUT=connect_timeout_s)
        self.state = State(inventory, config)
        self.state.add_callback_handler(_EngineCallback(self))
        for cb in callbacks:
            self.state.add_callback_handler(cb)
        self.node_of = {t.name: t.node for t in self.targets}
        self.commands: dict[str, list[CommandRecord]] = {t.node: [] for t in self.targets}
        self.files: dict[str, dict[str, str | bytes]] = {t.node: {} for t in self.targets}
        self.errors: dict[str, str] = {}
        self.op_role: dict[str, str] = {}
        self._role_marks: dict[str, list[tuple[int, str]]] = {}
        self._failed_op: dict[str, str] = {}
        self._host_last: dict[str, float] = {}
        self._record_files = record_files
        self.started = time.monotonic()
        self.executed = False
        for host in self.state.inventory:
            self._wrap_connector(host)

    # -- bookkeeping ------------------------------------------------------------------

    def hosts(self) -> list[Any]:
        return list(self.state.inventory)

    def _set_error(self, host: Any, message: str) -> None:
        self.errors.setdefault(host.name, message or "failed")

    def _wrap_connector(self, host: Any) -> None:
        connector = host.connector
        run_orig = connector.run_shell_command
        put_orig = connector.put_file
        node = self.node_of[host.name]
        state = self.state

        def current_op() -> str | None:
            op_hash = host.executing_op_hash
            if op_hash is None or op_hash not in state.op_meta:
                return None
            return ", ".join(sorted(state.op_meta[op_hash].names))

        def run_shell_command(command: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.monotonic()
            text = command.get_masked_value() if isinstance(command, StringCommand) else str(command)
            stage = "execute" if state.current_stage >= StateStage.Execute else "prepare"
            try:
                ok, output = run_orig(command, *args, **kwargs)
            except Exception as exc:
                self.commands[node].append(CommandRecord(node, stage, current_op(), text, False, [],
                                                         [f"{type(exc).__name__}: {exc}"], time.monotonic() - t0))
                raise
            self.commands[node].append(CommandRecord(node, stage, current_op(), text, bool(ok),
                                                     list(output.stdout_lines), list(output.stderr_lines),
                                                     time.monotonic() - t0))
            return ok, output

        def put_file(filename_or_io: Any, remote_filename: str, *args: Any, **kwargs: Any) -> Any:
            if self._record_files:
                self.files[node][remote_filename] = _read_upload(filename_or_io)
            stage = "execute" if state.current_stage >= StateStage.Execute else "prepare"
            ok = put_orig(filename_or_io, remote_filename, *args, **kwargs)
            self.commands[node].append(CommandRecord(node, stage, current_op(), f"<upload {remote_filename}>",
                                                     bool(ok), [], [], 0.0))
            return ok

        connector.run_shell_command = run_shell_command
        connector.put_file = put_file

    def mark_role(self, role: str) -> None:
        """Called by the composing deploy before each role on the current host."""
        from pyinfra import host

        self._role_marks.setdefault(host.name, []).append((len(host.op_hash_order), role))

    def _spawn_each(self, hosts: Sequence[Any], func: Callable[[Any], None]) -> None:
        """Run func(host) for each host in the state's pool; exceptions fail that host only."""
        state = self.state

        def wrapped(h: Any) -> BaseException | None:
            # Return, never raise: gevent prints tracebacks of greenlets that raise.
            try:
                # ctx_config and ctx_host are greenlet-local; ctx_state is a process-wide
                # global, set once around the whole pool below (set here, the first greenlet
                # to finish would restore "no state" under the feet of the others).
                with ctx_config.use(state.config.copy()), ctx_host.use(h):
                    func(h)
            except Exception as exc:
                # the traceback goes to pyinfra's log (the run record), the summary gets one line
                logging.getLogger("pyinfra").error("[%s] failed", h.name, exc_info=True)
                return exc
            return None

        with ctx_state.use(state):
            greenlets = {state.pool.spawn(wrapped, h): h for h in hosts}
            gevent.joinall(list(greenlets))
        failed = set()
        for g, h in greenlets.items():
            exc = g.value if g.successful() else g.exception
            if exc is not None:
                message = one_line(str(exc)) or type(exc).__name__
                if isinstance(exc, PyinfraError) and "No hosts remaining" in str(exc):
                    message = self._last_failure(h) or "failed"
                elif not isinstance(exc, PyinfraError):
                    message = f"{type(exc).__name__}: {message}"
                self._set_error(h, message)
                failed.add(h)
        self._fail(failed)

    def _fail(self, hosts: set[Any]) -> None:
        """Mark hosts failed without pyinfra's FAIL_PERCENT / no-hosts-left exceptions."""
        if not hosts:
            return
        self.state.failed_hosts.update(hosts)
        self.state.active_hosts -= hosts

    def _last_failure(self, host: Any) -> str:
        node = self.node_of[host.name]
        for rec in reversed(self.commands[node]):
            if not rec.success:
                detail = one_line("\n".join(reversed(rec.stderr))) or one_line("\n".join(reversed(rec.stdout)))
                return one_line(f"`{one_line(rec.command, 80)}` failed" + (f": {detail}" if detail else ""))
        return ""

    # -- stages -------------------------------------------------------------------------

    def connect(self) -> None:
        """Connect every host in parallel; unreachable hosts are failed with their reason."""
        state = self.state
        state.set_stage(StateStage.Connect)

        def connect_one(h: Any) -> None:
            key = h.data.get("ssh_key")
            if key and not h.name.startswith("@") and not os.path.isfile(key):
                self._set_error(h, f"SSH key {key} not found")
                return
            h.connect(show_errors=False)

        self._spawn_each(self.hosts(), connect_one)
        for h in self.hosts():
            if h.connected:
                state.activate_host(h)
            else:
                self._set_error(h, "could not connect")
                state.failed_hosts.add(h)

    def connected(self) -> list[Any]:
        return [h for h in self.hosts() if h in self.state.active_hosts]

    def prepare(self, deploy: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run the deploy function on every connected host (facts + operation recording)."""
        self.state.set_stage(StateStage.Prepare)
        self._spawn_each(self.connected(), lambda h: deploy(*args, **kwargs))
        self._map_roles()

    def execute(self) -> None:
        """Run the recorded operations (pyinfra's `run_ops`), failures per host."""
        state = self.state
        state.set_stage(StateStage.Execute)
        self.executed = True
        if state.active_hosts:
            try:
                run_ops(state)
            except PyinfraError as exc:
                if "No hosts remaining" not in str(exc):
                    raise
        for h in self.hosts():
            if h in state.failed_hosts and h.name not in self.errors:
                self._set_error(h, self._failure_reason(h))

    def disconnect(self) -> None:
        state = self.state
        if state.current_stage < StateStage.Disconnect:
            state.set_stage(StateStage.Disconnect)
        for h in list(state.activated_hosts):
            try:
                h.disconnect()
            except Exception as exc:  # a host gone away must not hide the results
                log.debug("disconnect %s: %r", h.name, exc)

    def _failure_reason(self, host: Any) -> str:
        reboot = host_errors(host)
        if reboot:
            return one_line(reboot[-1])
        op_hash = self._failed_op.get(host.name)
        op_name = ", ".join(sorted(self.state.op_meta[op_hash].names)) if op_hash in self.state.op_meta else ""
        detail = self._last_failure(host)
        return one_line(f"{op_name}: {detail}" if op_name else detail) or "failed"

    def _map_roles(self) -> None:
        for host in self.hosts():
            marks = self._role_marks.get(host.name)
            if not marks:
                continue
            for i, op_hash in enumerate(host.op_hash_order):
                role = None
                for start, name in marks:
                    if start <= i:
                        role = name
                if role:
                    self.op_role.setdefault(op_hash, role)

    # -- results ------------------------------------------------------------------------

    def op_name(self, op_hash: str) -> str:
        meta = self.state.op_meta.get(op_hash)
        return ", ".join(sorted(meta.names)) if meta else op_hash

    def results(self, with_commands: bool = False) -> dict[str, HostResult]:
        """Per node: operations with their status, error, time, reboot, remote command count."""
        state = self.state
        out: dict[str, HostResult] = {}
        order = state.get_op_order()
        for h in self.hosts():
            node = self.node_of[h.name]
            res = HostResult(node=node, host=h.name, rebooted=self.gate.rebooted(h.name),
                             remote_commands=sum(1 for c in self.commands[node] if not c.command.startswith("<")))
            ops = state.ops.get(h, {})
            for op_hash in order:
                data = ops.get(op_hash)
                if data is None:
                    continue
                res.ops.append(self._op_result(h, op_hash, data, with_commands))
            if h not in state.activated_hosts:
                res.status = "unreachable"
            elif h in state.failed_hosts:
                res.status = "failed"
            if res.status != "ok":
                # a reboot's own failure outranks the connect errors its reconnect loop saw
                res.error = (one_line(host_errors(h)[-1]) if host_errors(h) else None) \
                    or self.errors.get(h.name) or self._failure_reason(h)
            last = self._host_last.get(h.name, time.monotonic())
            res.seconds = round(max(0.0, last - self.started), 2)
            out[node] = res
        return out

    def _op_result(self, host: Any, op_hash: str, data: Any, with_commands: bool) -> OpResult:
        meta = data.operation_meta
        name, role = self.op_name(op_hash), self.op_role.get(op_hash)
        if self.executed:
            if not meta.is_complete():
                return OpResult(name, role, "not run")
            status = "failed" if not meta.did_succeed() else "changed" if meta.did_change() else "unchanged"
            res = OpResult(name, role, status)
            if status != "unchanged":
                res.stdout, res.stderr = meta.stdout, meta.stderr
            return res
        will = bool(meta._maybe_is_change)  # set during prepare (check_for_changes)
        conditional = bool(data.global_arguments.get("_if"))
        status = ("may change" if conditional else "will change") if will else "no change"
        res = OpResult(name, role, status)
        if will and with_commands:
            res.commands = self._planned_commands(host, data)
        return res

    def _planned_commands(self, host: Any, data: Any) -> list[str]:
        """What a changing operation would run (re-runs its generator: may load facts)."""
        cmds: list[str] = []
        with ctx_state.use(self.state), ctx_host.use(host):
            try:
                for cmd in data.command_generator():
                    if isinstance(cmd, StringCommand):
                        cmds.append(cmd.get_masked_value())
                    elif isinstance(cmd, FileUploadCommand):
                        cmds.append(f"upload {cmd.dest}")
                    elif isinstance(cmd, FunctionCommand):
                        cmds.append(f"python: {getattr(cmd.function, '__name__', 'function')}")
                    else:
                        cmds.append(repr(cmd))
            except Exception as exc:  # a plan must not fail because one listing did
                cmds.append(f"(could not list commands: {one_line(str(exc))})")
        return cmds


def _read_upload(filename_or_io: Any) -> str | bytes:
    if isinstance(filename_or_io, str):
        try:
            with open(filename_or_io, "rb") as f:
                data = f.read()
        except OSError:
            return b""
    else:
        getvalue = getattr(filename_or_io, "getvalue", None)
        if getvalue is not None:
            data = getvalue()
        else:
            pos = filename_or_io.tell()
            data = filename_or_io.read()
            filename_or_io.seek(pos)
    if isinstance(data, bytes):
        try:
            return data.decode()
        except UnicodeDecodeError:
            return data
    return data
