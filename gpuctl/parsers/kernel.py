"""Kernel state read from /proc and /sys: loaded modules, the loaded NVIDIA module's version,
memory, mounts, sysctl values, modprobe blacklists.

One reading of each for every caller: the provisioning facts (`gpuctl.facts.system`,
`gpuctl.facts.nvidia`), verify's probe (`gpuctl.checks.probe`) and the lock
(`gpuctl.lock`). Pure functions: text in, data out; unusable input raises ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError

# ---------------------------------------------------------------- /proc/modules


@dataclass(frozen=True)
class LoadedModule:
    name: str
    size: int
    use_count: int | None  # None where the kernel prints '-'
    used_by: tuple[str, ...] = ()
    state: str = ""  # Live / Loading / Unloading


def parse_proc_modules(text: str) -> dict[str, LoadedModule]:
    """/proc/modules → name (underscored, as the kernel names it) → module. A '-' use count
    (kernels without module unloading, and ``nvidia 14299136 - - Live 0x0000000000000000 (O)``
    on an H200 machine) is None; pyinfra 3.10's `server.KernelModules` crashes on it.
    ``ib_core 462848 8 rdma_rxe,ib_uverbs,rdma_ucm, Live 0xffffffffc0a2b000`` lists its users."""
    out = {}
    for line in text.splitlines():
        # "nvidia_uvm 2076672 0 - Live 0xffffffffc0a00000 (PO)"
        parts = line.split()
        if len(parts) < 5:
            continue
        name, size, used, deps, state = parts[:5]
        out[name] = LoadedModule(name, int(size) if size.isdigit() else 0, int(used) if used.isdigit() else None,
                                 tuple(u for u in deps.split(",") if u and u != "-"), state)
    if not out and text.strip():
        raise ParseError(f"/proc/modules: no module lines in {text.splitlines()[0]!r}")
    return out


# ---------------------------------------------------------------- the loaded NVIDIA module

#: The loaded nvidia module's version (absent when none is loaded): what provisioning, the
#: reboot's confirmation, verify and the lock read.
NVIDIA_MODULE_VERSION_FILE = "/sys/module/nvidia/version"
#: The driver's own banner; read where the /sys file is missing (verify's fallback).
NVIDIA_DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"

# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16-I3-B03-4-3)"
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:15 UTC 2024"
_NVRM = re.compile(r"NVRM version: .*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\s")


def parse_proc_driver_version(text: str) -> str | None:
    """The kernel module version from /proc/driver/nvidia/version, or None."""
    m = _NVRM.search(text + " ")
    return m.group(1) if m else None


def loaded_nvidia_version(sys_text: str | None, proc_text: str | None = None) -> tuple[str | None, str]:
    """The loaded nvidia module's version and the file it was read from: the /sys file's
    text, else the version in the /proc banner, else (None, the /sys file)."""
    if sys_text and sys_text.strip():
        return sys_text.strip(), NVIDIA_MODULE_VERSION_FILE
    if proc_text:
        return parse_proc_driver_version(proc_text), NVIDIA_DRIVER_VERSION_FILE
    return None, NVIDIA_MODULE_VERSION_FILE


# ---------------------------------------------------------------- /proc/meminfo, /proc/mounts, /proc/cmdline

def parse_meminfo_kib(text: str, key: str = "MemTotal") -> int:
    """'MemTotal:       24570312 kB' → 24570312."""
    m = re.search(rf"^{re.escape(key)}:\s+(\d+)\s*kB", text, re.M)
    if not m:
        raise ParseError(f"/proc/meminfo: no {key} line")
    return int(m.group(1))




# ---------------------------------------------------------------- sysctl, modprobe.d


def sysctl_path(key: str) -> str:
    """'net.core.rmem_max' → '/proc/sys/net/core/rmem_max'."""
    return "/proc/sys/" + key.replace(".", "/")


def parse_sysctl_values(lines: list[str]) -> dict[str, str]:
    """Lines ``<key>=<value>`` (the value as /proc/sys prints it, whitespace folded); a key
    whose file could not be read has an empty value and is left out."""
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and value.split():
            out[key.strip()] = " ".join(value.split())
    return out


def parse_modprobe_blacklist(files: dict[str, str]) -> dict[str, str]:
    """Modules named by `blacklist NAME` in modprobe.d files → the file that names them."""
    out = {}
    for path, text in files.items():
        for line in text.splitlines():
            parts = line.split("#", 1)[0].split()
            if len(parts) == 2 and parts[0] == "blacklist":
                out.setdefault(parts[1], path)
    return out
