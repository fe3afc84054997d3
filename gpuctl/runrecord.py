"""Run records: everything one gpuctl command did, under `runs/<timestamp>-<command>/`.

Layout of a run folder:
  run.json                 id, command, argv, gpuctl version, inventory path + sha256,
                           matrix name + sha256, start/end times, status
  stages/<stage>.json      one JSON object per stage (plan, provision, verify, bench, …)
                           with per-host results
  raw/<host>/<name>        raw tool outputs and command logs, as the tools printed them
  <name>.log               engine logs (pyinfra's own log goes to pyinfra.log)

Everything written through a RunRecord passes `redact()` first: private keys,
passwords and tokens never reach the disk. The runs root is `./runs` or $GPUCTL_RUNS_DIR.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from gpuctl import __version__
from gpuctl.errors import InputError

_SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
     "[redacted private key]"),
    (re.compile(r"(?i)\b(password|passwd|secret|token|api[_-]?key|bmc_pass\w*)\b(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"),
     r"\1\2[redacted]"),
    (re.compile(r"(?i)(https?://[^:/\s]+:)[^@/\s]+@"), r"\1[redacted]@"),
)


def redact(text: str) -> str:
    """Remove private keys, passwords, tokens and URL credentials from text."""
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _redact_obj(obj: Any) -> Any:
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: _redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_redact_obj(v) for v in obj]
    return obj


def runs_root() -> Path:
    return Path(os.environ.get("GPUCTL_RUNS_DIR", "runs"))


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class RunRecord:
    """One run folder; create with `RunRecord.create`, reopen with `RunRecord.open`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, command: str, inventory_path: str | Path | None = None,
               matrix_path: str | Path | None = None, root: Path | None = None) -> RunRecord:
        base = root or runs_root()
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
        path = base / f"{stamp}-{_safe(command)}"
        n = 1
        while path.exists():
            n += 1
            path = base / f"{stamp}-{_safe(command)}-{n}"
        path.mkdir(parents=True)
        rec = cls(path)
        meta: dict[str, Any] = {
            "id": path.name, "command": command, "argv": [redact(a) for a in sys.argv],
            "gpuctl_version": __version__, "started": now_iso(), "status": "running",
        }
        if inventory_path is not None:
            meta["inventory"] = {"path": str(inventory_path), "sha256": sha256_file(inventory_path)}
        if matrix_path is not None:
            meta["matrix"] = {"path": str(matrix_path), "sha256": sha256_file(matrix_path)}
        rec.write_json("run.json", meta)
        return rec

    @classmethod
    def open(cls, ref: str | Path = "latest", root: Path | None = None) -> RunRecord:
        """A run by folder path, by id under the runs root, or 'latest' (optionally 'latest-<command>')."""
        base = root or runs_root()
        ref = str(ref)
        if ref.startswith("latest"):
            suffix = ref[len("latest"):].lstrip("-")
            runs = sorted(p for p in base.glob("*") if (p / "run.json").is_file()
                          and (not suffix or cls(p).meta().get("command") == suffix))
            if not runs:
                raise InputError(f"no runs under {base}" + (f" for command {suffix}" if suffix else ""))
            return cls(runs[-1])
        p = Path(ref)
        if not (p / "run.json").is_file():
            p = base / ref
        if not (p / "run.json").is_file():
            raise InputError(f"{ref}: not a run folder (no run.json); runs live under {base}")
        return cls(p)

    def meta(self) -> dict[str, Any]:
        return json.loads((self.path / "run.json").read_text())

    def update_meta(self, **fields: Any) -> None:
        meta = self.meta()
        meta.update(fields)
        self.write_json("run.json", meta)

    def finish(self, status: str) -> None:
        self.update_meta(status=status, finished=now_iso())

    def write_json(self, rel: str, obj: Any) -> Path:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(_redact_obj(obj), indent=2, sort_keys=True, default=str) + "\n")
        tmp.replace(target)
        return target

    def write_text(self, rel: str, text: str) -> Path:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(redact(text))
        return target

    def raw(self, host: str, name: str, text: str) -> Path:
        """Keep one raw tool output: raw/<host>/<name>."""
        return self.write_text(f"raw/{_safe(host)}/{_safe(name)}", text)

    def stage(self, name: str, data: dict[str, Any]) -> Path:
        return self.write_json(f"stages/{_safe(name)}.json", data)

    def read_stage(self, name: str) -> dict[str, Any] | None:
        p = self.path / "stages" / f"{_safe(name)}.json"
        return json.loads(p.read_text()) if p.is_file() else None

    def stages(self) -> list[str]:
        return sorted(p.stem for p in (self.path / "stages").glob("*.json"))
