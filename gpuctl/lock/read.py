"""Reading nodes for the lock: one bash script per node (`read_script`) prints everything the
lock records in marked sections; `parse_read` turns it into a `NodeLock` through
`gpuctl.parsers`; `read_nodes` runs it on every node at once.
"""


from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuctl.errors import ExecutionError, InputError
from gpuctl.inventory import LoadedInventory
from gpuctl.lock.managed import managed_files
from gpuctl.lock.model import LockedPackage, NodeLock, now_iso
from gpuctl.matrix import Package
from gpuctl.parsers.files import parse_sha256sum
from gpuctl.parsers.firmware import parse_fw_ver_lines, parse_vbios_xml
from gpuctl.parsers.kernel import NVIDIA_MODULE_VERSION_FILE, loaded_nvidia_version
from gpuctl.parsers.nvidia_smi.q_xml import COMMAND as NVIDIA_SMI_XML
from gpuctl.parsers.os_release import os_name, parse_os_release
from gpuctl.parsers.packages import RPM_LOCKS_MARK, parse_dpkg, parse_rpm
from gpuctl.parsers.train_env import DIST_LISTING, parse_distributions
from gpuctl.runrecord import RunRecord, redact
from gpuctl.shellcmd import sh
from gpuctl.spec import NodeSpec, train_env_knob

log = logging.getLogger(__name__)


READ_TIMEOUT_S = 120
_MARK = "##gpuctl-lock "
_SAFE_PATTERN = re.compile(r"^/[A-Za-z0-9_./*+-]+$")


# ------------------------------------------------------------------ reading nodes


def component_packages(spec: NodeSpec) -> dict[str, tuple[Package, ...]]:
    """Enabled components → their packages (what the lock records)."""
    return {name: c.packages for name, c in spec.components.items() if c.enabled and c.packages}


def train_env_python(spec: NodeSpec) -> str | None:
    """The training environment's python on this node (roles/train_env's `train_env_path`,
    from the inventory's role_vars or the role's default), or None where the role does not run."""

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
        f"echo '{_MARK}os'; cat /etc/os-release 2>/dev/null || true",
        f"echo '{_MARK}kernel'; uname -r",
        f"echo '{_MARK}module'; cat {NVIDIA_MODULE_VERSION_FILE} 2>/dev/null || true",
        f"echo '{_MARK}packages'",
        pkgs,
        f"echo '{_MARK}hca'",
        "for f in /sys/class/infiniband/*/fw_ver; do d=${f%/fw_ver};"
        " printf '%s\\t%s\\n' \"${d##*/}\" \"$(cat \"$f\")\"; done",
        f"echo '{_MARK}vbios'",
        f"if command -v nvidia-smi >/dev/null 2>&1; then {NVIDIA_SMI_XML} 2>&1 || true; fi",
        f"echo '{_MARK}files'",
        f"for f in {' '.join(patterns)}; do if [ -f \"$f\" ]; then sha256sum \"$f\"; else echo \"-  $f\"; fi; done",
        *_train_env_lines(spec),
        f"echo '{_MARK}end'",
    ])


def _train_env_lines(spec: NodeSpec) -> list[str]:
    python = train_env_python(spec)
    if python is None:
        return []
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
    if spec.package_manager == "dnf":
        snap = parse_rpm([*sec.get("packages", []), RPM_LOCKS_MARK, *sec.get("locks", [])])
        locked = snap.locked_names()
        installed = {n: (p.version, n in locked) for n, p in snap.packages.items()}
    else:
        snap = parse_dpkg(sec.get("packages", []))
        installed = {n: (p.version, p.held) for n, p in snap.packages.items()}
    packages: dict[str, dict[str, LockedPackage]] = {}
    for comp, pkgs in component_packages(spec).items():
        packages[comp] = {}
        for p in pkgs:
            version, held = installed.get(p.name, (None, False))
            packages[comp][p.name] = LockedPackage(version=version, held=held)
    return NodeLock(
        read_at=read_at, os=os_name(parse_os_release(sec.get("os", []))), kernel=(sec.get("kernel") or [None])[0],
        nvidia_module=loaded_nvidia_version((sec.get("module") or [None])[0])[0],
        packages=packages,
        firmware={**parse_fw_ver_lines(sec.get("hca", [])), **parse_vbios_xml("\n".join(sec.get("vbios", [])))},
        files=parse_sha256sum(sec.get("files", [])),
        train_env=parse_distributions(sec.get("train_env", [])),
    )


@dataclass
class ReadResult:
    """Per node: what was read, or why it could not be."""

    nodes: dict[str, NodeLock] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


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
