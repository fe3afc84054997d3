"""The lock file's model and its reading and writing: `LockFile` (one `NodeLock` per node),
`lock_path`, `build_lock`, `dump_lock`/`write_lock`, `parse_lock`/`load_lock`.
"""


from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuctl import __version__
from gpuctl.errors import InputError
from gpuctl.fileio import read_text
from gpuctl.inventory import LoadedInventory
from gpuctl.runrecord import inventory_sha256, sha256_file
from gpuctl.yamlsrc import parse_yaml

log = logging.getLogger(__name__)


LOCK_VERSION = 1


# ---------------------------------------------------------------------------- model


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LockedPackage(_Strict):
    version: str | None = Field(description="installed version; null when not installed")
    held: bool = False


class NodeLock(_Strict):
    """What one node has, as read from it."""

    read_at: str = ""
    os: str | None = None
    kernel: str | None = None
    nvidia_module: str | None = None
    packages: dict[str, dict[str, LockedPackage]] = Field(default_factory=dict)
    firmware: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str | None] = Field(default_factory=dict)
    #: the training environment's distributions (roles/train_env): {canonical name: version}
    train_env: dict[str, str] = Field(default_factory=dict)

    def package_versions(self) -> dict[str, str | None]:
        return {name: p.version for comp in self.packages.values() for name, p in comp.items()}


class FileRef(_Strict):
    path: str
    sha256: str


class MatrixRef(FileRef):
    name: str


class LockFile(_Strict):
    lock_version: int = LOCK_VERSION
    generated: str
    gpuctl_version: str
    cluster: str
    inventory: FileRef
    matrix: MatrixRef
    nodes: dict[str, NodeLock]


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# ------------------------------------------------------------------------ lock file


def lock_path(inventory_path: str | Path) -> Path:
    """`inventories/lab.yaml` → `inventories/lab.lock.yaml`."""
    p = Path(inventory_path)
    return p.with_name(p.stem + ".lock.yaml")


def build_lock(loaded: LoadedInventory, nodes: Mapping[str, NodeLock], previous: LockFile | None = None) -> LockFile:
    """A lock with `nodes` read now; nodes only in `previous` keep their entries (--limit)."""
    merged = dict(previous.nodes) if previous else {}
    merged.update(nodes)
    order = [n.name for n in loaded.inventory.nodes]
    ordered = {n: merged[n] for n in order if n in merged}
    return LockFile(
        generated=now_iso(), gpuctl_version=__version__, cluster=loaded.inventory.cluster.name,
        inventory=FileRef(path=str(loaded.path), sha256=inventory_sha256(loaded)),
        matrix=MatrixRef(name=loaded.matrix.matrix.name, path=str(loaded.matrix.path),
                         sha256=sha256_file(loaded.matrix.path)),
        nodes=ordered,
    )


_HEADER = ("# gpuctl lock file: the versions, firmware and configuration hashes found on every node.\n"
           "# Written by `gpuctl lock`; compared by `gpuctl drift`; pins for `gpuctl rebuild`. Do not edit.\n")


def dump_lock(lock: LockFile) -> str:
    return _HEADER + yaml.safe_dump(lock.model_dump(mode="json"), sort_keys=False, width=120)


def write_lock(lock: LockFile, path: str | Path) -> Path:
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(dump_lock(lock))
    tmp.replace(p)
    return p


def parse_lock(text: str, name: str = "<lock>") -> LockFile:
    data, _ = parse_yaml(text, name)  # bounded: depth, size, huge or non-finite numbers -> file:line
    if not isinstance(data, dict):
        raise InputError(f"{name}: not a gpuctl lock file (expected a mapping)")
    if data.get("lock_version") != LOCK_VERSION:
        raise InputError(f"{name}: lock_version {data.get('lock_version')!r} is not {LOCK_VERSION}; "
                         "run `gpuctl lock` again")
    try:
        return LockFile.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise InputError(f"{name}: not a valid gpuctl lock file", problems) from exc


def load_lock(path: str | Path) -> LockFile:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no lock file; run `gpuctl lock` first")
    return parse_lock(read_text(p, what="lock file"), str(p))


def lock_firmware(loaded: LoadedInventory) -> dict[str, dict[str, str]] | None:
    """The firmware recorded per node in the inventory's lock file ({node: {"vbios/0": …}}), or
    None when there is no lock file (what `gpuctl health` and verify's firmware checks judge against)."""
    path = lock_path(loaded.path)
    if not path.is_file():
        return None
    return {n: dict(e.firmware) for n, e in load_lock(path).nodes.items()}
