"""Where the SSH engines' own logs go: the run record, never the terminal.

pyinfra logs every operation, and paramiko logs a whole traceback at ERROR for each failed
SSH handshake — dozens of them while a rebooting node's forwarded port accepts TCP but no
sshd answers yet. `engine_logs_to(path)` sends both loggers to a file of the run record
(secrets redacted) for the duration of a run, or drops them when there is no record, and
restores the loggers afterwards. Every command that drives pyinfra or paramiko
(provision, plan, rebuild, handover, mirror, verify) runs inside it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from gpuctl.runrecord import redact

#: Loggers of the execution engines (pyinfra) and the SSH library under it and under verify.
ENGINE_LOGGERS: tuple[str, ...] = ("pyinfra", "paramiko")


class _RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class engine_logs_to:
    """Context manager: route pyinfra's and paramiko's loggers to `path` (appending), or
    discard them when `path` is None; nothing of theirs reaches the terminal meanwhile."""

    def __init__(self, path: Path | None) -> None:
        self.handler: logging.Handler
        if path is None:
            self.handler = logging.NullHandler()
        else:
            self.handler = logging.FileHandler(path, encoding="utf-8")
            self.handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        self.handler.setLevel(logging.INFO)
        self.saved: dict[str, tuple[bool, int, list[logging.Handler]]] = {}

    def __enter__(self) -> engine_logs_to:
        for name in ENGINE_LOGGERS:
            lg = logging.getLogger(name)
            self.saved[name] = (lg.propagate, lg.level, list(lg.handlers))
            for h in lg.handlers[:]:
                lg.removeHandler(h)
            lg.addHandler(self.handler)
            lg.setLevel(logging.INFO)
            lg.propagate = False
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, (propagate, level, handlers) in self.saved.items():
            lg = logging.getLogger(name)
            lg.removeHandler(self.handler)
            lg.propagate = propagate
            lg.setLevel(level)
            for h in handlers:
                lg.addHandler(h)
        self.handler.close()
