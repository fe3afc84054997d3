"""Kernel, boot, file and service state of a host, each read in one command.

- `LoadedModules`: `/proc/modules` parsed tolerantly. pyinfra 3.10's
  `server.KernelModules` crashes on a use count of ``-`` (``nvidia 14299136 - - Live
  0x0000000000000000 (O)``, seen on a real H200 node and on kernels without module
  unloading); this one keeps such a module with ``use_count=None``.
- `FileStates(paths)`: sha256 and mode of each managed file (or missing), so a role
  decides every file it writes from one command.
- `BootInfo`: does the host boot through GRUB (and which flavour), the running kernel,
  the kernel it will boot next, and (RHEL) the default entry's arguments.
- `ServiceStates(names)`: `systemctl is-enabled` / `is-active` per unit.
- `CommandPaths(names)`: which of some programs exist (absolute paths allowed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyinfra.api import FactBase

from gpuctl.checks.probe import sysctl_path
from gpuctl.facts import marker, one_line
from gpuctl.parsers.boot import BOOT_SCRIPT, BootState, parse_boot
from gpuctl.shellcmd import sh

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ /proc/modules

@dataclass(frozen=True)
class LoadedModule:
    name: str
    size: int
    use_count: int | None  # None when the kernel prints "-"
    used_by: tuple[str, ...]
    state: str  # Live / Loading / Unloading


def parse_proc_modules(lines: list[str]) -> dict[str, LoadedModule]:
    """`/proc/modules` lines, e.g. ``nvidia 14299136 - - Live 0x0000000000000000 (O)``
    or ``nvidia_uvm 1798144 2 - Live 0x0000000000000000 (O)`` or
    ``ib_core 462848 8 rdma_rxe,ib_uverbs,rdma_ucm, Live 0xffffffffc0a2b000``."""
    out: dict[str, LoadedModule] = {}
    for line in lines:
        f = line.split()
        if len(f) < 5:
            continue
        name = f[0]
        try:
            size = int(f[1])
        except ValueError:
            continue
        use = int(f[2]) if f[2].isdigit() else None
        used_by = tuple(u for u in f[3].split(",") if u and u != "-")
        out[name] = LoadedModule(name, size, use, used_by, f[4])
    return out


class LoadedModules(FactBase[dict[str, LoadedModule]]):
    """Loaded kernel modules by name (underscored, as the kernel names them)."""

    def command(self) -> str:
        return marker("modules") + " cat /proc/modules 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, LoadedModule]:
        return {}

    def process(self, output: list[str]) -> dict[str, LoadedModule]:
        return parse_proc_modules(output)


# ------------------------------------------------------------------ managed files

@dataclass(frozen=True)
class FileState:
    path: str
    sha256: str | None  # None: missing
    mode: str | None    # octal string as stat prints it ("644")

    @property
    def exists(self) -> bool:
        return self.sha256 is not None


def parse_file_states(lines: list[str]) -> dict[str, FileState]:
    """Lines ``<sha256> <mode> <path>`` or ``missing - <path>``."""
    out: dict[str, FileState] = {}
    for line in lines:
        parts = line.split(" ", 2)
        if len(parts) != 3:
            continue
        sha, mode, path = parts
        if sha == "missing":
            out[path] = FileState(path, None, None)
        else:
            out[path] = FileState(path, sha, mode)
    return out


class FileStates(FactBase[dict[str, FileState]]):
    """sha256 and mode of each path (regular files only; anything else counts as missing)."""

    def command(self, paths: tuple[str, ...]) -> str:
        quoted = sh(*paths)
        return (marker("files") + f" for f in {quoted}; do if [ -f \"$f\" ]; then "
                "printf '%s %s %s\\n' \"$(sha256sum < \"$f\" | cut -d' ' -f1)\" \"$(stat -c %a \"$f\")\" \"$f\"; "
                "else printf 'missing - %s\\n' \"$f\"; fi; done")

    @staticmethod
    def default() -> dict[str, FileState]:
        return {}

    def process(self, output: list[str]) -> dict[str, FileState]:
        return parse_file_states(output)


# ------------------------------------------------------------------ sysctl

def parse_sysctl_values(lines: list[str]) -> dict[str, str]:
    """Lines ``<key>=<value>`` (the value as /proc/sys prints it, whitespace folded); a key
    whose file could not be read has an empty value and is left out."""
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and value.split():
            out[key.strip()] = " ".join(value.split())
    return out


class SysctlValues(FactBase[dict[str, str]]):
    """The running kernel's value of each sysctl key (read from /proc/sys)."""

    def command(self, keys: tuple[str, ...]) -> str:
        pairs = sh(*(f"{k}={sysctl_path(k)}" for k in keys))
        return (marker("sysctl") + f" for kv in {pairs}; do printf '%s=%s\\n' \"${{kv%%=*}}\" "
                "\"$(cat \"${kv#*=}\" 2>/dev/null)\"; done")

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_sysctl_values(output)


# ------------------------------------------------------------------ boot

class BootInfo(FactBase[BootState]):
    """GRUB or not, running kernel, next boot's kernel (see BOOT_SCRIPT)."""

    def command(self) -> str:
        return marker("boot") + " " + one_line(BOOT_SCRIPT)

    @staticmethod
    def default() -> BootState:
        return BootState(None, "", "", "", "")

    def process(self, output: list[str]) -> BootState:
        return parse_boot(output)


# ------------------------------------------------------------------ services

@dataclass(frozen=True)
class ServiceState:
    name: str
    enabled: str  # systemctl is-enabled output ("enabled", "disabled", "masked", "" if no unit)
    active: str   # systemctl is-active output ("active", "inactive", "failed", …)

    @property
    def exists(self) -> bool:
        return bool(self.enabled) and self.enabled != "not-found"


def parse_services(lines: list[str]) -> dict[str, ServiceState]:
    """Lines ``<unit>|<is-enabled>|<is-active>``."""
    out: dict[str, ServiceState] = {}
    for line in lines:
        parts = line.split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        out[parts[0]] = ServiceState(parts[0], parts[1].strip(), parts[2].strip())
    return out


class ServiceStates(FactBase[dict[str, ServiceState]]):
    def command(self, names: tuple[str, ...]) -> str:
        quoted = sh(*names)
        return (marker("services") + f" for u in {quoted}; do printf '%s|%s|%s\\n' \"$u\" "
                "\"$(systemctl is-enabled \"$u\" 2>/dev/null)\" \"$(systemctl is-active \"$u\" 2>/dev/null)\"; done")

    @staticmethod
    def default() -> dict[str, ServiceState]:
        return {}

    def process(self, output: list[str]) -> dict[str, ServiceState]:
        return parse_services(output)


# ------------------------------------------------------------------ programs

def parse_command_paths(lines: list[str]) -> dict[str, str | None]:
    """Lines ``<name>=<path or empty>``."""
    out: dict[str, str | None] = {}
    for line in lines:
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v or None
    return out


class CommandPaths(FactBase[dict[str, str | None]]):
    """Where each program is (`command -v`; an absolute path is tested with -x)."""

    def command(self, names: tuple[str, ...]) -> str:
        quoted = sh(*names)
        return (marker("commands") + f" for c in {quoted}; do case \"$c\" in /*) "
                "if [ -x \"$c\" ]; then p=$c; else p=''; fi ;; *) p=$(command -v \"$c\" 2>/dev/null) ;; esac; "
                "echo \"$c=$p\"; done")

    @staticmethod
    def default() -> dict[str, str | None]:
        return {}

    def process(self, output: list[str]) -> dict[str, str | None]:
        return parse_command_paths(output)


# ------------------------------------------------------------------ vendor repository

@dataclass(frozen=True)
class RepoState:
    keyring_matches: bool  # the keyring is exactly the (dearmored) downloaded key
    lists_present: bool    # apt has package lists for the repository (always True for dnf)


def apt_lists_prefix(url: str) -> str:
    """How apt names a repository's list files under /var/lib/apt/lists/:
    'http://10.0.2.2:8080/x_y/' → '10.0.2.2:8080_x%5fy'."""
    rest = url.split("://", 1)[-1].rstrip("/")
    return rest.replace("_", "%5f").replace("/", "_")


class RepoFacts(FactBase[RepoState]):
    """Does `keyring` hold the downloaded `armored` key, and does apt have lists for the repo."""

    def command(self, armored: str, keyring: str, lists_prefix: str = "") -> str:
        a, k = sh(armored), sh(keyring)
        lists = (f" ls /var/lib/apt/lists/{sh(lists_prefix)}*Packages* >/dev/null 2>&1 && echo lists;"
                 if lists_prefix else " echo lists;")
        return (marker("repo") + f" if [ -f {a} ] && [ -f {k} ]; then if grep -q 'BEGIN PGP PUBLIC KEY BLOCK' {a};"
                f" then gpg --dearmor < {a} 2>/dev/null | cmp -s - {k} && echo match;"
                f" else cmp -s {a} {k} && echo match; fi; fi;{lists} true")

    @staticmethod
    def default() -> RepoState:
        return RepoState(False, False)

    def process(self, output: list[str]) -> RepoState:
        words = {line.strip() for line in output}
        return RepoState("match" in words, "lists" in words)
