"""Progress of a run, fed by pyinfra's state callbacks.

`ProgressCallback` (a `BaseStateCallback`) keeps per host the current role and operation
and overall the operations done out of the total; it does no I/O itself beyond asking
its display to redraw (throttled), so the callbacks stay cheap at 64+ hosts.

Displays:
  LiveDisplay   on a TTY: one rich Live panel — a bar for operations done/total, and a
                table of hosts (current role and operation; at scale only the hosts that
                are busy or failed, plus one line of counts).
  PlainDisplay  not a TTY: one line per event *summary* — stage changes, each failed host
                once, and one line per finished operation across all hosts
                ("[12/87] base | Blacklist nouveau: 62 ok (3 changed), 2 failed") —
                never a line per host per operation.
  NullDisplay   --json: nothing (the JSON object is the only output).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from pyinfra.api.state import BaseStateCallback
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

# At most this many host rows in the live table; beyond, only busy/failed hosts are listed.
LIVE_HOST_ROWS = 16


@dataclass
class HostProgress:
    name: str
    state: str = "waiting"  # waiting | connecting | connected | running | done | failed
    role: str = ""
    op: str = ""
    done: int = 0
    error: str = ""


class Display(Protocol):
    def start(self, tracker: ProgressCallback) -> None: ...
    def stage(self, tracker: ProgressCallback, text: str) -> None: ...
    def host_failed(self, tracker: ProgressCallback, host: HostProgress) -> None: ...
    def op_finished(self, tracker: ProgressCallback, name: str, ok: int, changed: int, failed: int) -> None: ...
    def refresh(self, tracker: ProgressCallback) -> None: ...
    def stop(self, tracker: ProgressCallback) -> None: ...


class ProgressCallback(BaseStateCallback):
    """Tracks hosts and operations; `node_of` maps pyinfra host names to node names."""

    def __init__(self, node_of: dict[str, str], display: Display, op_role: dict[str, str] | None = None) -> None:
        self.hosts = {n: HostProgress(n) for n in node_of.values()}
        self.node_of = node_of
        self.display = display
        self.op_role = op_role if op_role is not None else {}
        self.total = 0
        self.done = 0
        self.ops_total = 0
        self.ops_done = 0
        self._op_counts: dict[str, list[int]] = {}
        self._last_draw = 0.0

    def _host(self, host: Any) -> HostProgress:
        return self.hosts[self.node_of.get(host.name, host.name)]

    def _draw(self) -> None:
        now = time.monotonic()
        if now - self._last_draw >= 0.1:
            self._last_draw = now
            self.display.refresh(self)

    # -- called by the runner ----------------------------------------------------------------

    def set_total(self, host_ops: int, ops: int) -> None:
        self.total, self.ops_total = host_ops, ops

    def stage(self, text: str) -> None:
        self.display.stage(self, text)

    def fail(self, node: str, error: str) -> None:
        h = self.hosts.get(node)
        if h and h.state != "failed":
            h.state, h.error = "failed", error
            self.display.host_failed(self, h)

    # -- pyinfra callbacks ------------------------------------------------------------------

    def host_before_connect(self, state: Any, host: Any) -> None:  # type: ignore[override]
        h = self._host(host)
        if h.state == "waiting":
            h.state = "connecting"
        self._draw()

    def host_connect(self, state: Any, host: Any) -> None:  # type: ignore[override]
        h = self._host(host)
        if h.state in ("waiting", "connecting"):
            h.state = "connected"
        self._draw()

    def operation_start(self, state: Any, op_hash: str) -> None:  # type: ignore[override]
        self._op_counts[op_hash] = [0, 0, 0]

    def operation_host_start(self, state: Any, host: Any, op_hash: str) -> None:  # type: ignore[override]
        h = self._host(host)
        meta = state.op_meta.get(op_hash)
        h.state = "running"
        h.op = ", ".join(sorted(meta.names)) if meta else ""
        h.role = self.op_role.get(op_hash, h.role)
        self._draw()

    def operation_host_success(self, state: Any, host: Any, op_hash: str,  # type: ignore[override]
                               retry_count: int = 0) -> None:
        h = self._host(host)
        h.done += 1
        self.done += 1
        self._op_counts.setdefault(op_hash, [0, 0, 0])[0] += 1
        self._draw()

    def operation_host_error(self, state: Any, host: Any, op_hash: str,  # type: ignore[override]
                             retry_count: int = 0, max_retries: int = 0) -> None:
        h = self._host(host)
        h.done += 1
        self.done += 1
        self._op_counts.setdefault(op_hash, [0, 0, 0])[2] += 1
        meta = state.op_meta.get(op_hash)
        self.fail(h.name, f"{', '.join(sorted(meta.names)) if meta else 'operation'} failed")
        self._draw()

    def operation_end(self, state: Any, op_hash: str) -> None:  # type: ignore[override]
        self.ops_done += 1
        ok, _, failed = self._op_counts.pop(op_hash, [0, 0, 0])
        # pyinfra marks an operation complete (did_change) only after the per-host
        # success callback, so changes are counted here, once every host has run it.
        changed = 0
        for ops in state.ops.values():
            data = ops.get(op_hash)
            if data is not None and data.operation_meta.is_complete() and data.operation_meta.did_change():
                changed += 1
        meta = state.op_meta.get(op_hash)
        name = ", ".join(sorted(meta.names)) if meta else op_hash
        self.display.op_finished(self, name, ok, changed, failed)
        self._draw()

    def finish(self) -> None:
        for h in self.hosts.values():
            if h.state not in ("failed",):
                h.state = "done"
        self.display.stop(self)


class NullDisplay:
    def start(self, tracker: ProgressCallback) -> None:
        pass

    def stage(self, tracker: ProgressCallback, text: str) -> None:
        pass

    def host_failed(self, tracker: ProgressCallback, host: HostProgress) -> None:
        pass

    def op_finished(self, tracker: ProgressCallback, name: str, ok: int, changed: int, failed: int) -> None:
        pass

    def refresh(self, tracker: ProgressCallback) -> None:
        pass

    def stop(self, tracker: ProgressCallback) -> None:
        pass


class PlainDisplay(NullDisplay):
    """Line-oriented output for logs and CI."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def _print(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def stage(self, tracker: ProgressCallback, text: str) -> None:
        self._print(f"--> {text}")

    def host_failed(self, tracker: ProgressCallback, host: HostProgress) -> None:
        self._print(f"    {host.name}: FAILED: {host.error}")

    def op_finished(self, tracker: ProgressCallback, name: str, ok: int, changed: int, failed: int) -> None:
        width = len(str(tracker.ops_total or 0))
        line = f"[{tracker.ops_done:>{width}}/{tracker.ops_total}] {name}: {ok} ok ({changed} changed)"
        if failed:
            line += f", {failed} failed"
        self._print(line)


class LiveDisplay(NullDisplay):
    """A rich Live panel, redrawn from the callbacks (no refresh thread)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console)
        self.task = self.progress.add_task("operations", total=None)
        self.live: Live | None = None
        self.stage_text = ""

    def start(self, tracker: ProgressCallback) -> None:
        self.live = Live(self._render(tracker), console=self.console, auto_refresh=False, transient=False)
        self.live.start()

    def stage(self, tracker: ProgressCallback, text: str) -> None:
        self.stage_text = text
        self.refresh(tracker)

    def host_failed(self, tracker: ProgressCallback, host: HostProgress) -> None:
        self.refresh(tracker)

    def _render(self, tracker: ProgressCallback) -> Group:
        self.progress.update(self.task, total=tracker.total or None, completed=tracker.done,
                             description=f"{self.stage_text or 'operations'}")
        table = Table(show_header=True, header_style="bold", box=None)
        table.add_column("host")
        table.add_column("state")
        table.add_column("role")
        table.add_column("operation")
        hosts = list(tracker.hosts.values())
        shown = hosts
        hidden = 0
        if len(hosts) > LIVE_HOST_ROWS:
            shown = [h for h in hosts if h.state in ("failed", "running", "connecting")][:LIVE_HOST_ROWS]
            hidden = len(hosts) - len(shown)
        for h in shown:
            style = "red" if h.state == "failed" else "green" if h.state == "done" else ""
            # Text, not markup: an error or operation name may hold "[/]"
            table.add_row(Text(h.name), Text(h.state, style=style), Text(h.role),
                          Text(h.error if h.state == "failed" else h.op))
        parts: list[Any] = [self.progress.get_renderable(), table]
        if hidden:
            counts: dict[str, int] = {}
            for h in hosts:
                counts[h.state] = counts.get(h.state, 0) + 1
            parts.append(f"{len(hosts)} hosts: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
        return Group(*parts)

    def refresh(self, tracker: ProgressCallback) -> None:
        if self.live is not None:
            self.live.update(self._render(tracker), refresh=True)

    def stop(self, tracker: ProgressCallback) -> None:
        if self.live is not None:
            self.live.update(self._render(tracker), refresh=True)
            self.live.stop()
            self.live = None


def make_display(console: Console, as_json: bool) -> Display:
    if as_json:
        return NullDisplay()
    if console.is_terminal:
        return LiveDisplay(console)
    return PlainDisplay(console)
