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
import os
import re
import sys
from pathlib import Path
from typing import Any

from gpuctl import __version__
from gpuctl import fileio as _fileio
from gpuctl import redact as _redact
from gpuctl import runlock as _runlock
from gpuctl import runshape as _shape
from gpuctl.errors import InputError
from gpuctl.fileio import dumps_json, load_json, read_bytes

redact = _redact.redact
_redact_obj = _redact.redact_obj

#: Records created by this process and not yet finished; `interrupt_active` closes them on Ctrl-C.
_ACTIVE: list[RunRecord] = []


def interrupt_active(status: str = "interrupted") -> None:
    """Finish every run still open in this process with `status` (Ctrl-C, a crash)."""
    for rec in list(_ACTIVE):
        try:
            rec.finish(status)
        except (OSError, InputError):  # a corrupt run.json: nothing more to record
            if rec in _ACTIVE:
                _ACTIVE.remove(rec)
    _runlock.release_all()


private_dir = _fileio.private_dir
write_private = _fileio.write_private


def _load_json(path: Path) -> Any:
    try:
        return load_json(path, what="run record")
    except InputError as exc:
        raise InputError(f"{exc}; corrupt run record: remove or repair the file") from None


def _check_shape(path: Path, data: Any, shape: Any) -> None:
    found = _shape.problems(data, shape)
    if found:
        raise InputError(f"{path}: not a run record gpuctl can read ({len(found)} field(s) of the wrong shape); "
                         "remove or repair the file", found)


def runs_root() -> Path:
    """$GPUCTL_RUNS_DIR, else ./runs. InputError for an empty value or one naming something
    that is not a folder (a folder that exists is used as it is, never chmodded)."""
    value = os.environ.get("GPUCTL_RUNS_DIR")
    if value is None:
        return Path("runs")
    if not value.strip():
        raise InputError("GPUCTL_RUNS_DIR is set but empty; unset it (runs then go to ./runs) or name a folder")
    root = Path(value)
    if os.path.lexists(root) and not root.is_dir():
        raise InputError(f"GPUCTL_RUNS_DIR={value}: exists and is not a folder")
    return root


def sha256_file(path: str | Path) -> str:
    return hashlib.sha256(read_bytes(path)).hexdigest()


def inventory_sha256(loaded: Any) -> str:
    """The sha256 of the inventory text that was validated (read once), not of the file as
    it is now; the file's when the text is not kept."""
    text = getattr(loaded, "text", "")
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if text else sha256_file(loaded.path)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def safe_name(name: str) -> str:
    """A host or file name as one path component of a run record (other characters as `_`)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class RunRecord:
    """One run folder; create with `RunRecord.create`, reopen with `RunRecord.open`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._held: _runlock.Held | None = None

    @property
    def id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, command: str, inventory_path: str | Path | None = None,
               matrix_path: str | Path | None = None, root: Path | None = None,
               cluster: str | None = None, inventory_text: str | None = None) -> RunRecord:
        """A new run folder under the runs root; a mutating command with an inventory first
        takes its cluster's run lock (`cluster`: the inventory's cluster name, read from the
        file when not given). `inventory_text`: the text that was validated, hashed instead
        of reading the file again."""
        base = root or runs_root()
        _redact.known_from_files((inventory_path, matrix_path))
        held = None
        if inventory_path is not None and command in _runlock.MUTATING:
            held = _runlock.acquire(inventory_path, command, cluster)
            if held.note:
                print(f"note: {held.note}", file=sys.stderr)
        try:
            private_dir(base)  # a runs root that exists (a symlink to a folder too) is used as it is
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
            path = base / f"{stamp}-{safe_name(command)}"
            n = 1
            while True:  # mkdir is the atomic claim: a folder (or symlink) already there is never reused
                try:
                    _fileio.new_private_dir(path)
                    break
                except FileExistsError:
                    n += 1
                    path = base / f"{stamp}-{safe_name(command)}-{n}"
        except BaseException:
            if held is not None:
                _runlock.release(held)
            raise
        rec = cls(path)
        rec._held = held
        if held is not None:
            _runlock.set_run_id(held, path.name)
        _ACTIVE.append(rec)
        meta: dict[str, Any] = {
            "id": path.name, "command": command, "argv": _redact.redact_argv(sys.argv),
            "gpuctl_version": __version__, "started": now_iso(), "status": "running",
        }
        if inventory_path is not None:
            sha = (hashlib.sha256(inventory_text.encode("utf-8")).hexdigest() if inventory_text
                   else sha256_file(inventory_path))
            meta["inventory"] = {"path": str(inventory_path), "sha256": sha}
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

    def claim(self, command: str, inventory_path: str | Path, cluster: str | None = None) -> None:
        """Reopened to run again (turnkey --resume): take the cluster's run lock, as
        `create` does, and finish run.json on Ctrl-C."""
        _redact.known_from_files((inventory_path,))
        if command in _runlock.MUTATING and self._held is None:
            held = _runlock.acquire(inventory_path, command, cluster)
            if held.note:
                print(f"note: {held.note}", file=sys.stderr)
            self._held = held
            _runlock.set_run_id(held, self.id)
        if self not in _ACTIVE:
            _ACTIVE.append(self)

    def meta(self) -> dict[str, Any]:
        path = self.path / "run.json"
        data = _load_json(path)
        if not isinstance(data, dict):
            raise InputError(f"{path}: corrupt run record (not a JSON object)")
        _check_shape(path, data, _shape.RUN_JSON)
        return data

    def update_meta(self, **fields: Any) -> None:
        meta = self.meta()
        meta.update(fields)
        self.write_json("run.json", meta)

    def finish(self, status: str) -> None:
        try:
            self.update_meta(status=status, finished=now_iso())
        finally:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
            if self._held is not None:
                held, self._held = self._held, None
                _runlock.release(held)

    def write_json(self, rel: str, obj: Any) -> Path:
        target = self.path / rel
        private_dir(target.parent)
        tmp = target.with_suffix(target.suffix + ".tmp")
        write_private(tmp, dumps_json(_redact_obj(obj)) + "\n")
        tmp.replace(target)
        return target

    def write_text(self, rel: str, text: str) -> Path:
        target = self.path / rel
        private_dir(target.parent)
        write_private(target, redact(text))
        return target

    def raw(self, host: str, name: str, text: str) -> Path:
        """Keep one raw tool output: raw/<host>/<name>."""
        return self.write_text(f"raw/{safe_name(host)}/{safe_name(name)}", text)

    def stage(self, name: str, data: dict[str, Any]) -> Path:
        return self.write_json(f"stages/{safe_name(name)}.json", data)

    def read_stage(self, name: str) -> dict[str, Any] | None:
        p = self.path / "stages" / f"{safe_name(name)}.json"
        if not os.path.lexists(p):
            return None
        data = _load_json(p)
        if not isinstance(data, dict):
            raise InputError(f"{p}: corrupt run record (a stage is a JSON object, found {_shape.kind_of(data)})")
        _check_shape(p, data, _shape.STAGES.get(name, {}))
        return data

    def stages(self) -> list[str]:
        return sorted(p.stem for p in (self.path / "stages").glob("*.json"))
