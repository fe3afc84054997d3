"""Rolling reboots: never more than `--max-unavailable` nodes down at once.

Contract for roles (read this if your role may need a reboot — the nvidia_driver role)
--------------------------------------------------------------------------------------
1. The role decides *whether* its host needs a reboot, at execution time, and says so
   with `_if=`: a callable (not its result) evaluated when the operation runs, e.g.
   "the kernel-module package changed in this run AND the module version loaded now
   differs from the installed one". Decisions made with a Python `if` at prepare time
   would be wrong (the package is not installed yet) and would give hosts different
   operation sequences (pyinfra matches operations by position).

2. The role calls *this* operation, on every host, unconditionally except for `_if`:

       from gpuctl.runner.reboot import rolling_reboot

       rolling_reboot(
           name=f"Reboot to load NVIDIA driver {spec.driver_version}",
           reason="nvidia kernel module changed",
           confirm_command="cat /sys/module/nvidia/version",
           confirm_output=spec.driver_version,     # exact stdout (stripped) after the boot
           _if=needs_reboot,                        # callable, evaluated at run time
           _sudo=True,
       )

   Do not call `server.reboot` yourself: it knows nothing about the other hosts.

3. What the operation does on one host, in order:
   a. waits for a slot of the run's RebootGate (a gevent BoundedSemaphore sized
      `RunOptions.max_unavailable`; default max(1, 10 % of the hosts)). Other hosts keep
      running this same operation concurrently: the ones holding a slot reboot, the
      rest wait. Waiting is gevent-friendly (no thread is blocked);
   b. reads `/proc/sys/kernel/random/boot_id`, starts the reboot detached
      (`( sleep 1 && reboot ) &`), disconnects;
   c. reconnects every `interval_s` until the boot id differs (the host answers SSH
      again and really rebooted), up to `RunOptions.reboot_timeout_s`;
   d. runs `confirm_command` and compares its stripped stdout with `confirm_output`
      (the new module version is the loaded one);
   e. releases the slot only when b–d succeeded. A host that does not come back or
      comes back with the wrong module keeps its slot (it *is* unavailable) and the
      operation fails for it; once every slot is held by such hosts the gate halts and
      the hosts still waiting fail with "rolling reboot halted" instead of rebooting —
      a bad driver never takes down more than `max_unavailable` nodes.

4. The runner reports `rebooted: true` per host (summary, JSON, run record) from the
   gate's own bookkeeping; roles do not report reboots themselves.

5. `plan` (dry run) shows this operation as "may change (decided at run time)" because
   its `_if` is only evaluated during execution.

The gate lives in every host's data under `REBOOT_GATE_KEY` (one shared object per run).
Without one (e.g. the plain `pyinfra` CLI running deploy/provision.py) a gate is created
per pyinfra State from the first host's `run_options().max_unavailable`.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.lock import BoundedSemaphore
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS

from gpuctl.deploy_context import run_options

log = logging.getLogger(__name__)

REBOOT_GATE_KEY = "gpuctl_reboot_gate"
BOOT_ID_COMMAND = "cat /proc/sys/kernel/random/boot_id"
REBOOT_COMMAND = "( sleep 1 && reboot ) </dev/null >/dev/null 2>&1 &"


def default_max_unavailable(hosts: int) -> int:
    """max(1, 10 % of the hosts, rounded down)."""
    return max(1, hosts // 10)


class RebootHalted(RuntimeError):
    """Every reboot slot is held by a host that did not come back healthy."""


@dataclass
class RebootRecord:
    host: str
    started: float
    seconds: float | None = None
    ok: bool | None = None
    error: str = ""


@dataclass
class RebootGate:
    """At most `max_unavailable` hosts between "reboot issued" and "back and confirmed"."""

    max_unavailable: int
    records: dict[str, RebootRecord] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)
    peak_down: int = 0
    lost: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.max_unavailable < 1:
            raise ValueError("max_unavailable must be at least 1")
        self._sem = BoundedSemaphore(self.max_unavailable)

    def __copy__(self) -> RebootGate:
        # pyinfra hands out shallow copies of host data values; the gate must stay one object.
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> RebootGate:
        return self

    @property
    def halted(self) -> bool:
        return len(self.lost) >= self.max_unavailable

    @contextmanager
    def slot(self, host: str, poll_s: float = 0.5) -> Iterator[RebootRecord]:
        """Hold one slot while `host` is down; keep it (host lost) if the body raises."""
        while not self._sem.acquire(timeout=poll_s):
            if self.halted:
                raise RebootHalted(
                    f"rolling reboot halted: {', '.join(sorted(self.lost))} did not come back healthy "
                    f"(max-unavailable {self.max_unavailable} reached); {host} was not rebooted")
        if self.halted:  # a slot freed while the gate halted cannot happen, but be strict
            self._sem.release()
            raise RebootHalted(f"rolling reboot halted; {host} was not rebooted")
        rec = RebootRecord(host=host, started=time.monotonic())
        self.records[host] = rec
        self.down.add(host)
        self.peak_down = max(self.peak_down, len(self.down))
        try:
            yield rec
        except BaseException as exc:
            rec.ok, rec.error = False, str(exc)
            rec.seconds = time.monotonic() - rec.started
            self.lost.add(host)  # keeps its slot: it is unavailable
            raise
        rec.ok = True
        rec.seconds = time.monotonic() - rec.started
        self.down.discard(host)
        self._sem.release()

    def rebooted(self, host: str) -> bool:
        rec = self.records.get(host)
        return bool(rec and rec.ok)


_STATE_GATES: weakref.WeakKeyDictionary[Any, RebootGate] = weakref.WeakKeyDictionary()


def gate_for(state: Any, host: Any) -> RebootGate:
    """The run's gate: from host data, else one per pyinfra State (plain pyinfra CLI)."""
    gate = host.data.get(REBOOT_GATE_KEY)
    if isinstance(gate, RebootGate):
        return gate
    gate = _STATE_GATES.get(state)
    if gate is None:
        gate = RebootGate(max(1, run_options().max_unavailable))
        _STATE_GATES[state] = gate
    return gate


class RebootFailed(RuntimeError):
    pass


def _run(host: Any, command: str, **kwargs: Any) -> tuple[bool, str, str]:
    ok, output = host.run_shell_command(command, **kwargs)
    return bool(ok), "\n".join(output.stdout_lines).strip(), "\n".join(output.stderr_lines).strip()


def _reboot_with_slot(state: Any, host: Any, reason: str, confirm_command: str | None,
                      confirm_output: str | None, delay_s: float, interval_s: float,
                      timeout_s: float | None) -> bool:
    gate = gate_for(state, host)
    # The operation's connector arguments (_sudo, _sudo_user, …) apply to our commands too.
    op_args = host.current_op_global_arguments or {}
    connector_kwargs = {k: op_args[k] for k in CONNECTOR_ARGUMENT_KEYS if k in op_args}
    timeout = float(timeout_s if timeout_s is not None else run_options().reboot_timeout_s)
    try:
        with gate.slot(host.name):
            ok, before, err = _run(host, BOOT_ID_COMMAND, **connector_kwargs)
            if not ok or not before:
                raise RebootFailed(f"cannot read boot id before reboot: {err or 'no output'}")
            log.info("%s: rebooting (%s)", host.name, reason)
            ok, _, err = _run(host, REBOOT_COMMAND, **connector_kwargs)
            if not ok:
                raise RebootFailed(f"reboot command failed: {err}")
            gevent.sleep(delay_s)
            host.disconnect()
            deadline = time.monotonic() + timeout
            while True:
                host.connect(show_errors=False)
                if host.connected:
                    ok, after, _ = _run(host, BOOT_ID_COMMAND, **connector_kwargs)
                    if ok and after and after != before:
                        break
                if time.monotonic() > deadline:
                    raise RebootFailed(f"did not come back within {int(timeout)}s after reboot")
                gevent.sleep(interval_s)
            if confirm_command:
                ok, out, err = _run(host, confirm_command, **connector_kwargs)
                if not ok or (confirm_output is not None and out != confirm_output):
                    raise RebootFailed(f"after reboot `{confirm_command}` gave {out or err!r}, "
                                       f"expected {confirm_output!r}")
    except (RebootFailed, RebootHalted) as exc:
        logging.getLogger("pyinfra").error("%sreboot failed: %s", host.print_prefix, exc)
        _remember_error(host, str(exc))
        return False
    return True


_HOST_ERRORS: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def _remember_error(host: Any, message: str) -> None:
    _HOST_ERRORS.setdefault(host, []).append(message)


def host_errors(host: Any) -> list[str]:
    """Reboot errors recorded for a pyinfra host (the runner puts them in its summary)."""
    return list(_HOST_ERRORS.get(host, []))


@operation(is_idempotent=False)
def rolling_reboot(reason: str, confirm_command: str | None = None, confirm_output: str | None = None,
                   delay_s: float = 5.0, interval_s: float = 2.0, timeout_s: float | None = None):
    """Reboot this host within the run's RebootGate and confirm it came back healthy.

    + reason: why (logged and shown in the plan)
    + confirm_command / confirm_output: after the boot, this command's stripped stdout
      must equal confirm_output (e.g. the loaded module's version)
    + delay_s, interval_s: wait before the first reconnect, between reconnects
    + timeout_s: give up after this long (default RunOptions.reboot_timeout_s)
    """
    yield FunctionCommand(_reboot_with_slot, (reason, confirm_command, confirm_output, delay_s, interval_s,
                                              timeout_s), {})


__all__ = ["BOOT_ID_COMMAND", "REBOOT_COMMAND", "REBOOT_GATE_KEY", "RebootGate", "RebootHalted",
           "default_max_unavailable", "gate_for", "host_errors", "rolling_reboot"]
