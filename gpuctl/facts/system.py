"""Kernel, boot, file and service state of a host, each read in one command (parsed by
`gpuctl.parsers`).

- `LoadedModules`: `/proc/modules` parsed tolerantly (`gpuctl.parsers.kernel`, as verify
  reads it). pyinfra 3.10's `server.KernelModules` crashes on a use count of ``-``
  (``nvidia 14299136 - - Live 0x0000000000000000 (O)``, seen on a real H200 node and on
  kernels without module unloading); this one keeps such a module with ``use_count=None``.
- `FileStates(paths)`: sha256 and mode of each managed file (or missing), so a role
  decides every file it writes from one command.
- `BootInfo`: does the host boot through GRUB (and which flavour), the running kernel,
  the kernel it will boot next, and (RHEL) the default entry's arguments.
- `ServiceStates(names)`: `systemctl show` of the units (`gpuctl.parsers.systemd`, as verify).
- `CommandPaths(names)`: which of some programs exist (absolute paths allowed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyinfra.api import FactBase

from gpuctl.facts import marker, one_line
from gpuctl.parsers.boot import BOOT_SCRIPT, BootState, parse_boot
from gpuctl.parsers.files import FileState, parse_command_paths, parse_file_states
from gpuctl.parsers.kernel import LoadedModule, parse_proc_modules, parse_sysctl_values, sysctl_path
from gpuctl.parsers.systemd import UnitState, parse_systemctl_show, unit_show_command
from gpuctl.shellcmd import sh

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ /proc/modules

class LoadedModules(FactBase[dict[str, LoadedModule]]):
    """Loaded kernel modules by name (underscored, as the kernel names them)."""

    def command(self) -> str:
        return marker("modules") + " cat /proc/modules 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, LoadedModule]:
        return {}

    def process(self, output: list[str]) -> dict[str, LoadedModule]:
        return parse_proc_modules("\n".join(output))


# ------------------------------------------------------------------ managed files

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

class ServiceStates(FactBase[dict[str, UnitState]]):
    """Load, active and unit-file state of each unit: the `systemctl show` verify reads too."""

    def command(self, names: tuple[str, ...]) -> str:
        return marker("services") + " " + unit_show_command(names) + " 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, UnitState]:
        return {}

    def process(self, output: list[str]) -> dict[str, UnitState]:
        return parse_systemctl_show("\n".join(output))


# ------------------------------------------------------------------ programs

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
