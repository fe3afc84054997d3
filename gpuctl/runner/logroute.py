"""Where the SSH engines' own logs go: the run record, never the terminal.

pyinfra logs every operation, and paramiko logs a whole traceback at ERROR for each failed
SSH handshake — dozens of them while a rebooting node's forwarded port accepts TCP but no
sshd answers yet. `engine_logs_to(path)` sends both loggers to a file of the run record
(secrets redacted) for the duration of a run, or drops them when there is no record, and
restores the loggers afterwards. Every command that drives pyinfra or paramiko
(provision, plan, rebuild, handover, mirror, verify) runs inside it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from gpuctl.fileio import write_private
from gpuctl.redact import RedactingFormatter, redact  # noqa: F401  (redact: the one redactor, tested)

#: Loggers of the execution engines (pyinfra) and the SSH library under it and under verify.
ENGINE_LOGGERS: tuple[str, ...] = ("pyinfra", "paramiko")


@contextlib.contextmanager
def engine_logs_to(path: Path | None) -> Iterator[None]:
    """Route pyinfra's and paramiko's loggers to `path` (appending), or discard them when
    `path` is None; nothing of theirs reaches the terminal meanwhile. Restored afterwards."""
    handler: logging.Handler
    if path is None:
        handler = logging.NullHandler()
    else:

        write_private(path, "", append=True)  # 0600 whatever the umask; never through a symlink
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.setLevel(logging.INFO)
    saved = {name: logging.getLogger(name) for name in ENGINE_LOGGERS}
    before = {name: (lg.propagate, lg.level, list(lg.handlers)) for name, lg in saved.items()}
    for lg in saved.values():
        lg.handlers = [handler]
        lg.setLevel(logging.INFO)
        lg.propagate = False
    try:
        yield
    finally:
        for name, lg in saved.items():
            lg.propagate, level, lg.handlers = before[name]
            lg.setLevel(level)
        handler.close()
