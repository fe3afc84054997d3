"""The lock file: what is installed on every node, read from the nodes, and drift from it.

`gpuctl lock INVENTORY` reads every node with one shell script (in parallel, through
`gpuctl.bench.remote`) and writes `<inventory stem>.lock.yaml` beside the inventory:

    lock_version: 1
    generated: 2025-01-01T00:00:00+00:00
    gpuctl_version: 0.1.0
    cluster: lab
    inventory: {path: inventories/lab.yaml, sha256: …}
    matrix: {name: r580-cuda13.0, path: matrices/r580-cuda13.0.yaml, sha256: …}
    nodes:
      gpu-01:
        read_at: …
        os: debian 12
        kernel: 6.1.0-27-amd64
        nvidia_module: 580.95.05        # /sys/module/nvidia/version; null when not loaded
        packages:                       # per matrix component: the INSTALLED version
          cuda: {cuda-toolkit-13-0: {version: 13.0.2-1, held: true}}
        firmware: {hca/mlx5_0: 28.39.1002, vbios/0: 96.00.89.00.01}
        files: {/etc/nccl.conf: <sha256>, /etc/sysctl.d/90-gpuctl.conf: null}   # null = absent
        train_env: {torch: 2.8.0, nvidia-nccl-cu12: 2.27.3, …}   # the training venv's distributions

Versions are exactly what dpkg (`${Version}`, epoch included) or rpm (`[E:]V-R`) print,
so they can be used as pins again (`pin_from_lock`). The list of configuration files
lives in one place: `managed_files(spec)`.

`diff(...)` is the pure drift logic: per node against its lock entry, per node against
the majority of its peers (files with node-specific content — addresses, array UUIDs —
are compared with the lock only), nodes missing from the read or from the lock.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuctl import __version__
from gpuctl.components import ManagedFile, defaults
from gpuctl.components import managed_files as declared_files
from gpuctl.errors import ExecutionError, InputError
from gpuctl.fileio import read_text
from gpuctl.inventory import LoadedInventory
from gpuctl.matrix import Package
from gpuctl.runrecord import RunRecord, inventory_sha256, redact, sha256_file
from gpuctl.shellcmd import sh
from gpuctl.spec import NodeSpec
from gpuctl.yamlsrc import parse_yaml

log = logging.getLogger(__name__)

LOCK_VERSION = 1
READ_TIMEOUT_S = 120
_MARK = "##gpuctl-lock "
_SAFE_PATTERN = re.compile(r"^/[A-Za-z0-9_./*+-]+$")


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


# ------------------------------------------------------------------- managed files


#: The rendered configuration files (order = report order) are declared by each component
#: (`Component.files` in roles/<component>/__init__.py); `declared_files()` lists them all.


def _resolve_path(mf: ManagedFile, package_manager: str) -> str:
    if mf.knob is None:
        return mf.path
    value = defaults(mf.role).get(mf.knob)
    if isinstance(value, dict):
        value = value.get(package_manager)
    return str(value) if isinstance(value, str) and value.startswith("/") else mf.path


def _applies(mf: ManagedFile, spec: NodeSpec) -> bool:
    return {
        "always": True,
        "apt": spec.package_manager == "apt",
        "dnf": spec.package_manager == "dnf",
        "raid": spec.raid is not None,
        "network": spec.fabric.type != "none" or bool(spec.vlans),
        "train_env": spec.train_env is not None and spec.roles.get("train_env") == "",
    }[mf.when]


def managed_files(spec: NodeSpec) -> list[str]:
    """Paths (or globs) of the configuration files the roles render on this node."""
    out: list[str] = []
    for mf in declared_files():
        if _applies(mf, spec):
            path = _resolve_path(mf, spec.package_manager)
            if path not in out:
                out.append(path)
    return out


def per_node_file(path: str, package_manager: str = "apt") -> bool:
    """True when `path` (a file found on a node) has node-specific content."""
    return any(mf.per_node and fnmatch.fnmatchcase(path, _resolve_path(mf, package_manager))
               for mf in declared_files())


# ------------------------------------------------------------------ reading nodes


def component_packages(spec: NodeSpec) -> dict[str, tuple[Package, ...]]:
    """Enabled components → their packages (what the lock records)."""
    return {name: c.packages for name, c in spec.components.items() if c.enabled and c.packages}


def train_env_python(spec: NodeSpec) -> str | None:
    """The training environment's python on this node (roles/train_env's `train_env_path`,
    from the inventory's role_vars or the role's default), or None where the role does not run."""
    from gpuctl.spec import train_env_knob

    if spec.train_env is None or spec.roles.get("train_env") != "":
        return None
    path = train_env_knob(spec, "train_env_path")
    if not isinstance(path, str) or not _SAFE_PATTERN.match(path) or "*" in path:
        raise InputError(f"train_env_path {path!r} has characters gpuctl does not put in a shell")
    return f"{path}/bin/python"


def read_script(spec: NodeSpec) -> str:
    """One bash script that prints everything the lock records, in marked sections."""
    names = sorted({p.name for pkgs in component_packages(spec).values() for p in pkgs})
    quoted = sh(*names)
    patterns = managed_files(spec)
    for p in patterns:
        if not _SAFE_PATTERN.fullmatch(p):
            raise InputError(f"managed file pattern {p!r} has characters gpuctl does not put in a shell")
    if spec.package_manager == "dnf":
        pkgs = (f"rpm -q --qf '%{{NAME}}\\t%|EPOCH?{{%{{EPOCH}}:}}:{{}}|%{{VERSION}}-%{{RELEASE}}\\n' {quoted}"
                " 2>/dev/null | grep -P '\\t' || true\n"
                f"echo '{_MARK}locks'\ndnf -q versionlock list 2>/dev/null || true")
    else:
        pkgs = (f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{Status}}\\n' {quoted} 2>/dev/null || true")
    return "\n".join([
        "export LC_ALL=C; shopt -s nullglob",
        f"echo '{_MARK}os'; ( . /etc/os-release && echo \"$ID $VERSION_ID\" )",
        f"echo '{_MARK}kernel'; uname -r",
        f"echo '{_MARK}module'; cat /sys/module/nvidia/version 2>/dev/null || true",
        f"echo '{_MARK}packages'",
        pkgs,
        f"echo '{_MARK}hca'",
        "for f in /sys/class/infiniband/*/fw_ver; do d=${f%/fw_ver};"
        " printf '%s\\t%s\\n' \"${d##*/}\" \"$(cat \"$f\")\"; done",
        f"echo '{_MARK}vbios'",
        "if command -v nvidia-smi >/dev/null 2>&1; then"
        " nvidia-smi --query-gpu=index,vbios_version --format=csv,noheader 2>&1 || true; fi",
        f"echo '{_MARK}files'",
        f"for f in {' '.join(patterns)}; do if [ -f \"$f\" ]; then sha256sum \"$f\"; else echo \"-  $f\"; fi; done",
        *_train_env_lines(spec),
        f"echo '{_MARK}end'",
    ])


def _train_env_lines(spec: NodeSpec) -> list[str]:
    python = train_env_python(spec)
    if python is None:
        return []
    from gpuctl.parsers.train_env import DIST_LISTING

    py = sh(python)
    return [f"echo '{_MARK}train_env'",
            f"if [ -x {py} ]; then {py} -c {sh(DIST_LISTING)} 2>/dev/null || true; fi"]


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith(_MARK):
            current = line[len(_MARK):].strip()
            out[current] = []
        elif current is not None and line.strip():
            out[current].append(line.rstrip("\n"))
    return out


def parse_read(text: str, spec: NodeSpec, read_at: str = "") -> NodeLock:
    """The read script's output → NodeLock. ExecutionError when the output is truncated."""
    sec = _sections(text)
    if "end" not in sec:
        raise ExecutionError(f"{spec.node}: the lock read script's output is incomplete "
                             f"(sections: {', '.join(sec) or 'none'})")
    installed: dict[str, tuple[str, bool]] = {}
    if spec.package_manager == "dnf":
        locks = set()
        for line in sec.get("locks", []):
            entry = line.strip().removesuffix(".*")
            if " " not in entry and ":" in entry:
                head, _, _ = entry.partition(":")
                locks.add(head.rpartition("-")[0])
        for line in sec.get("packages", []):
            parts = line.split("\t")
            if len(parts) == 2:
                installed[parts[0]] = (parts[1], parts[0] in locks)
    else:
        for line in sec.get("packages", []):
            parts = line.split("\t")
            if len(parts) != 3:
                continue
            words = parts[2].split()
            if len(words) == 3 and words[2] == "installed":
                installed[parts[0].split(":", 1)[0]] = (parts[1], words[0] == "hold")
    packages: dict[str, dict[str, LockedPackage]] = {}
    for comp, pkgs in component_packages(spec).items():
        packages[comp] = {}
        for p in pkgs:
            version, held = installed.get(p.name, (None, False))
            packages[comp][p.name] = LockedPackage(version=version, held=held)
    firmware: dict[str, str] = {}
    for line in sec.get("hca", []):
        dev, _, ver = line.partition("\t")
        if dev and ver.strip():
            firmware[f"hca/{dev}"] = ver.strip()
    for line in sec.get("vbios", []):
        idx, sep, ver = line.partition(",")
        if sep and idx.strip().isdigit() and ver.strip() and ver.strip() not in ("N/A", "[N/A]"):
            firmware[f"vbios/{int(idx)}"] = ver.strip()
    files: dict[str, str | None] = {}
    for line in sec.get("files", []):
        digest, _, path = line.partition("  ")
        path = path.strip()
        if not path:
            continue
        files[path] = digest if re.fullmatch(r"[0-9a-f]{64}", digest) else None
    module = (sec.get("module") or [None])[0]
    from gpuctl.parsers.train_env import parse_distributions

    return NodeLock(
        read_at=read_at, os=(sec.get("os") or [None])[0], kernel=(sec.get("kernel") or [None])[0],
        nvidia_module=module.strip() if module else None,
        packages=packages, firmware=firmware, files=files,
        train_env=parse_distributions(sec.get("train_env", [])),
    )


@dataclass
class ReadResult:
    """Per node: what was read, or why it could not be."""

    nodes: dict[str, NodeLock] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def read_nodes(loaded: LoadedInventory, specs: Sequence[NodeSpec], record: RunRecord | None = None,
               timeout_s: float = READ_TIMEOUT_S) -> ReadResult:
    """Run the read script on every node at once (one SSH session per node)."""
    from gpuctl.bench.remote import run_parallel, targets_for

    targets = targets_for(loaded, specs)
    jobs = {s.node: (targets[s.node], read_script(s)) for s in specs}
    results = run_parallel(jobs, timeout_s)
    out = ReadResult()
    by_name = {s.node: s for s in specs}
    for node, res in results.items():
        if record is not None:
            record.raw(node, "lock-read.txt", res.transcript())
        if res.unreachable:
            why = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else "ssh failed"
            out.errors[node] = f"unreachable: {redact(why)}"
            continue
        if res.timed_out:
            out.errors[node] = f"the read script timed out after {timeout_s:g} s"
            continue
        try:
            out.nodes[node] = parse_read(res.stdout, by_name[node], now_iso())
        except ExecutionError as exc:
            out.errors[node] = str(exc)
    return out


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


# ---------------------------------------------------------------------------- drift


@dataclass(frozen=True)
class Drift:
    """One difference. kind: lock (node vs its lock entry) | peers (node vs the majority
    of its peers) | missing (locked node not read) | unlocked (node read, not in the lock)."""

    node: str
    kind: str
    key: str
    expected: str | None
    found: str | None
    note: str = ""

    def message(self) -> str:
        if self.kind == "missing":
            return f"{self.node}: locked but not read ({self.found})"
        if self.kind == "unlocked":
            return f"{self.node}: not in the lock file (run `gpuctl lock` to add it)"
        against = "lock" if self.kind == "lock" else "peers"
        extra = f" ({self.note})" if self.note else ""
        return f"{self.node}: {self.key}: {against} {_show(self.expected)}, found {_show(self.found)}{extra}"

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "kind": self.kind, "key": self.key, "expected": self.expected,
                "found": self.found, "note": self.note, "message": self.message()}


def _show(v: str | None) -> str:
    return "absent" if v is None else v


@dataclass
class DriftReport:
    items: list[Drift]
    nodes: list[str]

    @property
    def clean(self) -> bool:
        return not self.items

    def for_node(self, node: str) -> list[Drift]:
        return [d for d in self.items if d.node == node]

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "clean" if self.clean else "drift",
            "nodes": {n: [d.as_dict() for d in self.for_node(n)] for n in self.nodes},
            "drift_count": len(self.items),
        }


def flatten(entry: NodeLock) -> dict[str, str | None]:
    """A node's lock entry as comparable keys: 'package NAME', 'hold NAME', 'kernel', …"""
    out: dict[str, str | None] = {"os": entry.os, "kernel": entry.kernel, "nvidia module": entry.nvidia_module}
    for comp in entry.packages.values():
        for name, p in comp.items():
            out[f"package {name}"] = p.version
            if p.version is not None:
                out[f"hold {name}"] = "held" if p.held else "not held"
    for k, v in entry.firmware.items():
        out[f"firmware {k}"] = v
    for path, digest in entry.files.items():
        out[f"file {path}"] = digest
    for name, version in entry.train_env.items():
        out[f"train_env {name}"] = version
    return out


def _peer_comparable(key: str, package_manager: str) -> bool:
    return not (key.startswith("file ") and per_node_file(key[5:], package_manager))


def diff_entry(node: str, locked: NodeLock, found: NodeLock) -> list[Drift]:
    """Differences between one node's lock entry and what it has now."""
    a, b = flatten(locked), flatten(found)
    out = []
    for key in list(dict.fromkeys([*a, *b])):
        if a.get(key) != b.get(key):
            out.append(Drift(node, "lock", key, a.get(key), b.get(key)))
    return out


def diff_peers(found: Mapping[str, NodeLock], package_manager: str = "apt") -> list[Drift]:
    """Nodes that differ from the majority of their peers, key by key.

    A value held by more than half of the nodes is the majority; every other node is
    reported against it. Without a majority (e.g. two nodes that disagree) every node
    is reported, with the note "no majority"."""
    if len(found) < 2:
        return []
    flat = {n: flatten(e) for n, e in found.items()}
    keys = list(dict.fromkeys(k for f in flat.values() for k in f))
    out: list[Drift] = []
    for key in keys:
        if not _peer_comparable(key, package_manager):
            continue
        values = {n: f.get(key) for n, f in flat.items()}
        counts = Counter(values.values())
        if len(counts) == 1:
            continue
        value, count = counts.most_common(1)[0]
        if count * 2 > len(values):
            for n, v in values.items():
                if v != value:
                    out.append(Drift(n, "peers", key, value, v, f"{count} of {len(values)} nodes"))
        else:
            spread = ", ".join(f"{_show(v)} on {c}" for v, c in counts.most_common())
            for n, v in values.items():
                out.append(Drift(n, "peers", key, None, v, f"no majority: {spread}"))
    return out


def diff(lock: LockFile, found: Mapping[str, NodeLock], errors: Mapping[str, str] | None = None,
         nodes: Iterable[str] | None = None, package_manager: str = "apt") -> DriftReport:
    """Drift of `found` against `lock` and between the nodes found.

    `nodes`: the nodes that were meant to be read (default: the lock's and the found ones);
    `errors`: why a node could not be read."""
    errors = errors or {}
    wanted = list(nodes) if nodes is not None else list(dict.fromkeys([*lock.nodes, *found]))
    items: list[Drift] = []
    for node in wanted:
        if node not in found:
            if node in lock.nodes:
                items.append(Drift(node, "missing", "node", "locked", errors.get(node, "not read")))
            continue
        if node not in lock.nodes:
            items.append(Drift(node, "unlocked", "node", None, "read"))
            continue
        items.extend(diff_entry(node, lock.nodes[node], found[node]))
    items.extend(diff_peers({n: e for n, e in found.items() if n in wanted}, package_manager))
    return DriftReport(items, wanted)


# -------------------------------------------------------------------------- pins


def consensus_entry(lock: LockFile, exclude: str | None = None) -> NodeLock:
    """The peers' majority entry: per package the version most nodes have (ties: first node
    in lock order). Used to rebuild a node whose own entry is missing or to be replaced."""
    peers = [e for n, e in lock.nodes.items() if n != exclude]
    if not peers:
        raise InputError(f"the lock has no node other than {exclude} to take pins from")
    packages: dict[str, dict[str, LockedPackage]] = {}
    for comp in dict.fromkeys(c for e in peers for c in e.packages):
        names = dict.fromkeys(name for e in peers for name in e.packages.get(comp, {}))
        packages[comp] = {}
        for name in names:
            versions = Counter(e.packages[comp][name].version for e in peers if name in e.packages.get(comp, {}))
            best = versions.most_common(1)[0][0]
            packages[comp][name] = LockedPackage(version=best, held=True)

    def majority(values: list[Any]) -> Any:
        return Counter(values).most_common(1)[0][0] if values else None

    return NodeLock(
        read_at="consensus", os=majority([e.os for e in peers]), kernel=majority([e.kernel for e in peers]),
        nvidia_module=majority([e.nvidia_module for e in peers]), packages=packages,
        firmware={k: majority([e.firmware.get(k) for e in peers if k in e.firmware])
                  for k in dict.fromkeys(k for e in peers for k in e.firmware)},
        files={},
    )


def pin_from_lock(spec: NodeSpec, entry: NodeLock) -> NodeSpec:
    """`spec` with every component package version replaced by the version in `entry`.

    The roles install `spec.components[*].packages` exactly, so this is how lock pins
    reach them (no role changes). A package the lock does not know, or recorded as not
    installed, keeps the matrix version. Raises InputError for a version the package
    model rejects (a lock edited by hand)."""
    locked = entry.package_versions()
    components = {}
    for name, comp in spec.components.items():
        pkgs = []
        for p in comp.packages:
            v = locked.get(p.name)
            if v is not None and v != p.version:
                try:
                    p = Package(name=p.name, version=v)
                except ValidationError as exc:
                    raise InputError(f"lock: {p.name} version {v!r} is not an exact version") from exc
            pkgs.append(p)
        components[name] = comp.model_copy(update={"packages": tuple(pkgs)})
    return spec.model_copy(update={"components": components})


def pins_changed(spec: NodeSpec, pinned: NodeSpec) -> list[str]:
    """'name: matrix → lock' for every package whose pin the lock changed."""
    before = {p.name: p.version for p in spec.all_packages()}
    return [f"{p.name}: {before[p.name]} → {p.version}" for p in pinned.all_packages()
            if before.get(p.name) != p.version]


# ----------------------------------------------------------------- commands (API)


@dataclass
class LockOutcome:
    lock: LockFile
    path: Path
    errors: dict[str, str]
    run_id: str | None = None


def lock(loaded: LoadedInventory, limit: Sequence[str] = (), record: RunRecord | None = None,
         path: str | Path | None = None) -> LockOutcome:
    """Read the selected nodes and write the lock file (nodes outside --limit keep their
    entries). ExecutionError when any selected node cannot be read: a lock must be whole."""
    from gpuctl.spec import resolve

    specs = resolve(loaded, tuple(limit))
    target = Path(path) if path else lock_path(loaded.path)
    previous = load_lock(target) if limit and target.is_file() else None
    read = read_nodes(loaded, specs, record)
    if read.errors:
        raise ExecutionError(
            f"could not read {len(read.errors)} node(s); {target} not written: "
            + "; ".join(f"{n}: {e}" for n, e in sorted(read.errors.items())))
    lockfile = build_lock(loaded, read.nodes, previous)
    write_lock(lockfile, target)
    if record is not None:
        record.stage("lock", {"path": str(target), "nodes": sorted(read.nodes),
                              "lock": lockfile.model_dump(mode="json")})
    return LockOutcome(lockfile, target, read.errors, record.id if record else None)


def drift(loaded: LoadedInventory, limit: Sequence[str] = (), record: RunRecord | None = None,
          path: str | Path | None = None) -> DriftReport:
    """Read the selected nodes now and compare them with the lock and with each other."""
    from gpuctl.spec import resolve

    lockfile = load_lock(Path(path) if path else lock_path(loaded.path))
    specs = resolve(loaded, tuple(limit))
    read = read_nodes(loaded, specs, record)
    report = diff(lockfile, read.nodes, read.errors, nodes=[s.node for s in specs],
                  package_manager=specs[0].package_manager)
    if record is not None:
        record.stage("drift", report.as_dict())
    return report


@dataclass
class RebuildOutcome:
    node: str
    pins: list[str]
    provision: dict[str, Any]
    drift: DriftReport
    verify: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.provision.get("status") == "ok" and self.drift.clean
                and (self.verify is None or self.verify.get("status") == "pass")
                and (self.bench is None or self.bench.get("status") in ("pass", "warn")))

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "status": "ok" if self.ok else "failed", "pins_from_lock": self.pins,
                "provision": self.provision, "drift": self.drift.as_dict(), "verify": self.verify,
                "bench": self.bench, "notes": self.notes}


def rebuild(loaded: LoadedInventory, host: str, record: RunRecord | None = None, *,
            path: str | Path | None = None, verify: bool = True, bench: str | None = "quick",
            options: Any = None) -> RebuildOutcome:
    """Bring a replaced node to the lock: provision it with package pins from the lock,
    read it, compare with the lock and its peers, then verify and bench it.

    Pins come from the node's own lock entry when it has one, else from its peers'
    majority (`consensus_entry`). Node-specific files (mdadm.conf of a new array, …)
    are re-recorded in the lock for this node after a clean rebuild; everything else
    must equal the lock."""
    from gpuctl.rolerun import run_deploy
    from gpuctl.runner.roles import select_roles
    from gpuctl.runner.run import load_provision_deploy
    from gpuctl.spec import resolve

    target_path = Path(path) if path else lock_path(loaded.path)
    lockfile = load_lock(target_path)
    loaded.inventory.node(host)  # InputError for an unknown node
    specs = {s.node: s for s in resolve(loaded)}
    spec = specs[host]
    peers = [n for n in lockfile.nodes if n != host]
    entry = consensus_entry(lockfile, exclude=host) if peers else lockfile.nodes.get(host)
    if entry is None:
        raise InputError(f"the lock file {target_path} has no entry to rebuild {host} from")
    pinned = pin_from_lock(spec, entry)
    pins = pins_changed(spec, pinned)
    choices = select_roles([pinned])
    deploy = load_provision_deploy()
    prov = run_deploy(loaded, [pinned], deploy.provision, command="rebuild-provision", args=(choices,),
                      record=record, options=options, compose=True)
    read = read_nodes(loaded, [pinned], record)
    found = dict(read.nodes)
    # compare the rebuilt node with the lock (shared keys) and with its peers' lock entries
    expected = lockfile.nodes.get(host) or entry
    items: list[Drift] = []
    if host not in found:
        items.append(Drift(host, "missing", "node", "locked", read.errors.get(host, "not read")))
    else:
        mine = found[host]
        for d in diff_entry(host, expected, mine):
            if d.key.startswith("file ") and per_node_file(d.key[5:], spec.package_manager):
                continue  # new hardware: a new array UUID is expected; re-recorded below
            items.append(d)
        peer_view = {n: e for n, e in lockfile.nodes.items() if n != host}
        peer_view[host] = mine
        items.extend(d for d in diff_peers(peer_view, spec.package_manager) if d.node == host)
    report = DriftReport(list(dict.fromkeys(items)), [host])
    out = RebuildOutcome(host, pins, prov.as_dict(), report)
    if report.clean and host in found and prov.ok:
        nodes = dict(lockfile.nodes)
        nodes[host] = found[host]
        write_lock(lockfile.model_copy(update={"nodes": nodes, "generated": now_iso()}), target_path)
        out.notes.append(f"lock entry of {host} re-recorded in {target_path}")
    if verify and prov.ok:
        out.verify = _verify(loaded, pinned, record, out.notes)
    if bench and prov.ok:
        out.bench = _bench(loaded, pinned, [s for n, s in specs.items() if n != host], bench, record, out.notes)
    if record is not None:
        record.stage("rebuild", out.as_dict())
    return out


def _verify(loaded: LoadedInventory, spec: NodeSpec, record: RunRecord | None,
            notes: list[str]) -> dict[str, Any] | None:
    try:
        from gpuctl.checks import run_verify
    except ImportError:
        notes.append("verify not run: gpuctl.checks.run_verify is not available")
        return None
    result = run_verify(loaded, [spec], record)
    return result.as_dict()


def _bench(loaded: LoadedInventory, spec: NodeSpec, peers: list[NodeSpec], suite_name: str,
           record: RunRecord | None, notes: list[str]) -> dict[str, Any] | None:
    """Bench the rebuilt node together with one peer (so the pairwise fabric tests run
    between them), judged on the SKU thresholds; per check, the node's and the peer's
    measured values side by side."""
    try:
        from gpuctl.bench.run import run_bench
        from gpuctl.bench.suites import SUITES
    except ImportError:
        notes.append("bench not run: gpuctl.bench.run.run_bench is not available")
        return None
    if record is None:
        notes.append("bench not run: no run record to keep its outputs")
        return None
    if suite_name not in SUITES:
        raise InputError(f"unknown bench suite {suite_name!r}; suites: {', '.join(SUITES)}")
    chosen = [spec, *peers[:1]]
    data = run_bench(loaded, chosen, SUITES[suite_name], record)
    values: dict[str, dict[str, Any]] = {}
    for node, h in data.get("hosts", {}).items():
        for r in h.get("results", []):
            if isinstance(r.get("value"), (int, float)):
                key = r.get("check", "") + (f" {r['subject']}" if isinstance(r.get("subject"), str) else "")
                values.setdefault(key, {})[node] = r["value"]
    return {"suite": suite_name, "status": data.get("status"), "nodes": [s.node for s in chosen],
            "hosts": {h: v.get("status") for h, v in data.get("hosts", {}).items()},
            "cluster": (data.get("cluster") or {}).get("status"), "values": values}
