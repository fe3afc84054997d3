"""Package managers' listings: dpkg-query, rpm -qa, apt-mark showhold, dnf versionlock, dnf module streams.

One `InstalledPackage` type for every reader: the provisioning facts (`gpuctl.facts.packages`,
a `PackageSnapshot` with holds), verify's probe (`parse_dpkg_query` / `parse_rpm_query` /
`parse_holds`) and the lock's read script (`gpuctl.lock`). Versions are exactly what the
package manager prints (dpkg's `${Version}` includes the epoch, `1:4.5.2-1`; rpm's is rendered
`EPOCH:VERSION-RELEASE`), so a NodeSpec pin compares by plain string equality. Pure functions:
text in, data out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuctl.errors import ParseError

RPM_LOCKS_MARK = "##gpuctl-versionlock"
#: Printed by the dpkg fact when /var/lib/dpkg/updates holds files: dpkg was interrupted
#: (a node lost power or was killed mid-install) and refuses every install until
#: `dpkg --configure -a` has finished the job.
DPKG_INTERRUPTED_MARK = "##gpuctl-dpkg-interrupted"
#: dpkg states of a package whose install or removal did not finish.
DPKG_UNFINISHED_STATES = frozenset({"half-installed", "unpacked", "half-configured", "triggers-awaited",
                                    "triggers-pending"})


@dataclass(frozen=True)
class InstalledPackage:
    name: str
    version: str
    held: bool = False
    installed: bool = True  # False: dpkg knows it but it is not installed ("rc": config files left)
    status: str = "installed"  # dpkg's status abbreviation ("ii ", "rc ", "hi ") where read from it


@dataclass(frozen=True)
class PackageSnapshot:
    """What one host has installed, and which packages are held / version-locked."""

    manager: str  # "apt" | "dnf"
    packages: dict[str, InstalledPackage] = field(default_factory=dict)
    # dnf only: versionlock entries as "name-E:V-R" (epoch always present, no ".*")
    locks: frozenset[str] = frozenset()
    # apt only: packages whose dpkg run did not finish (and the journal mark as "<dpkg journal>")
    unfinished: tuple[str, ...] = ()

    @property
    def interrupted(self) -> bool:
        """dpkg was interrupted: installs fail until `dpkg --configure -a` has run."""
        return bool(self.unfinished)

    def version(self, name: str) -> str | None:
        p = self.packages.get(name)
        return p.version if p else None

    def has(self, name: str, version: str) -> bool:
        """Installed at exactly `version` (rpm: a missing epoch means epoch 0)."""
        got = self.version(name)
        if got is None:
            return False
        if self.manager == "dnf":
            return normalize_evr(got) == normalize_evr(version)
        return got == version

    def held(self, name: str, version: str) -> bool:
        """Held at exactly `version`: apt — `apt-mark hold` set on the package installed at
        that version (apt drops a hold when it moves a held package, so a package held at
        another version must be held again after the install); dnf — versionlocked at it."""
        if self.manager == "dnf":
            return f"{name}-{normalize_evr(version)}" in self.locks
        p = self.packages.get(name)
        return bool(p and p.held and p.version == version)

    def locked_names(self) -> set[str]:
        """dnf: names that carry a versionlock entry (at any version)."""
        return {split_lock(lock)[0] for lock in self.locks}


def normalize_evr(version: str) -> str:
    """'580.95.05-1' → '0:580.95.05-1'; '3:580.95.05-1.el9' unchanged."""
    return version if ":" in version else f"0:{version}"


def split_lock(lock: str) -> tuple[str, str]:
    """'nvidia-open-3:580.95.05-1.el9' → ('nvidia-open', '3:580.95.05-1.el9')."""
    head, _, tail = lock.partition(":")
    name, _, epoch = head.rpartition("-")
    return name, f"{epoch}:{tail}"


def parse_dpkg(lines: list[str]) -> PackageSnapshot:
    """Lines of `dpkg-query -W -f='${Package}\\t${Version}\\t${Status}\\n'`.

    Example line: ``nvidia-driver-580-open\\t580.95.05-0ubuntu1\\thold ok installed``.
    Status is "<want> <error> <state>"; only state "installed" counts as installed
    (config-files, half-installed … do not), want "hold" is an apt-mark hold. Packages
    left half-way (unpacked, half-configured, "reinstreq" …) and the `DPKG_INTERRUPTED_MARK`
    line make the snapshot `interrupted`.
    """
    pkgs: dict[str, InstalledPackage] = {}
    unfinished: list[str] = []
    for line in lines:
        if line.strip() == DPKG_INTERRUPTED_MARK:
            unfinished.append("<dpkg journal>")
            continue
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3 or not parts[0]:
            continue
        name, version, status = parts
        name = name.split(":", 1)[0]
        words = status.split()
        if len(words) != 3:
            continue
        if words[2] in DPKG_UNFINISHED_STATES or words[1] == "reinstreq":
            unfinished.append(name)
        if words[2] != "installed":
            continue
        pkgs[name] = InstalledPackage(name, version, held=words[0] == "hold")
    return PackageSnapshot("apt", pkgs, unfinished=tuple(unfinished))


def parse_rpm(lines: list[str]) -> PackageSnapshot:
    """`rpm -qa --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'`, a marker line, then
    `dnf versionlock list` (``nvidia-open-3:580.95.05-1.el9.*``; headers such as
    ``Last metadata expiration check: …`` are skipped)."""
    pkgs: dict[str, InstalledPackage] = {}
    locks: set[str] = set()
    in_locks = False
    for line in lines:
        line = line.strip()
        if line == RPM_LOCKS_MARK:
            in_locks = True
            continue
        if not line:
            continue
        if not in_locks:
            parts = line.split("\t")
            if len(parts) == 2:
                pkgs[parts[0]] = InstalledPackage(parts[0], parts[1])
            continue
        entry = line[:-2] if line.endswith(".*") else line
        if " " in entry or ":" not in entry or entry.startswith("#"):
            continue  # dnf chatter, not a lock entry
        name, evr = split_lock(entry)
        if name:
            locks.add(f"{name}-{evr}")
    return PackageSnapshot("dnf", pkgs, frozenset(locks))


def parse_dnf_modules(lines: list[str]) -> dict[str, str]:
    """/etc/dnf/modules.d/*.module (INI: ``[nvidia-driver]`` ``stream=580-open``
    ``state=enabled``) → {module: stream} for enabled modules."""
    out: dict[str, str] = {}
    name, stream, state = "", "", ""

    def flush() -> None:
        if name and state == "enabled" and stream:
            out[name] = stream

    for raw in lines:
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            flush()
            name, stream, state = line[1:-1], "", ""
        elif line.startswith("stream="):
            stream = line.split("=", 1)[1].strip()
        elif line.startswith("state="):
            state = line.split("=", 1)[1].strip()
    flush()
    return out


def parse_dpkg_query(text: str) -> dict[str, InstalledPackage]:
    """`dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'` → name → package.

    Status "ii " is installed; "rc " (removed, config left) and "hi " (held, installed) too."""
    out = {}
    for line in text.splitlines():
        # "libnccl2\t2.27.7-1+cuda13.0\tii "
        parts = line.split("\t")
        if len(parts) < 3 or not parts[0]:
            continue
        name, version, status = parts[0].split(":")[0], parts[1], parts[2].strip()
        out[name] = InstalledPackage(name, version, installed=len(status) >= 2 and status[1] == "i", status=status)
    if not out and text.strip():
        raise ParseError(f"dpkg-query: no 'name<TAB>version<TAB>status' lines in {text.splitlines()[0]!r}")
    return out


def parse_rpm_query(text: str) -> dict[str, InstalledPackage]:
    """`rpm -qa --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'` → name → package."""
    out = {}
    for line in text.splitlines():
        # "nvidia-driver\t3:570.133.20-1.el9"
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0]:
            version = parts[1].strip()
            version = version[2:] if version.startswith("0:") else version
            out[parts[0]] = InstalledPackage(parts[0], version)
    return out


def parse_holds(text: str, manager: str) -> set[str]:
    """`apt-mark showhold` (one name a line) or `dnf versionlock list` ('name-1:2.3-1.el9.*')."""
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("Last metadata", "#")):
            continue
        if manager == "apt":
            names.add(line.split(":")[0])
        else:
            # "nvidia-driver-3:570.133.20-1.el9.*" → "nvidia-driver"
            m = re.match(r"^(.+?)-(\d+:)?\d[^-]*-[^-]+$", line)
            names.add(m.group(1) if m else line)
    return names

