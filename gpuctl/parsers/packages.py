"""Package managers' listings: dpkg-query (with the hold selection), rpm -qa, dnf versionlock, dnf module streams.

One `PackageSnapshot` for every reader: the provisioning facts (`gpuctl.facts.packages`) and
verify's probe run the same listing (`DPKG_QUERY` / `RPM_QUERY`), the lock's read script
(`gpuctl.lock.read`) the same dpkg format for its packages only. Versions are exactly what the
package manager prints (dpkg's `${Version}` includes the epoch, `1:4.5.2-1`; rpm's is rendered
`EPOCH:VERSION-RELEASE`), so a NodeSpec pin compares by plain string equality. Pure functions:
text in, data out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuctl.boundary import NAME_MAX, PACKAGE_NAME, control_character

RPM_LOCKS_MARK = "##gpuctl-versionlock"
#: Printed by the dpkg fact when /var/lib/dpkg/updates holds files: dpkg was interrupted
#: (a node lost power or was killed mid-install) and refuses every install until
#: `dpkg --configure -a` has finished the job.
DPKG_INTERRUPTED_MARK = "##gpuctl-dpkg-interrupted"
#: The package listings, read by the provisioning facts (`gpuctl.facts.packages`) and by
#: verify's probe alike, and parsed by `parse_dpkg` / `parse_rpm`.
DPKG_QUERY = ("dpkg-query -W -f='${Package}\\t${Version}\\t${Status}\\n' 2>/dev/null;"
              " [ -z \"$(ls -A /var/lib/dpkg/updates 2>/dev/null)\" ] || echo '" + DPKG_INTERRUPTED_MARK + "'; true")
RPM_QUERY = ("rpm -qa --qf '%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n' 2>/dev/null;"
             f" echo '{RPM_LOCKS_MARK}'; dnf -q versionlock list 2>/dev/null || true")
#: dpkg states of a package whose install or removal did not finish.
DPKG_UNFINISHED_STATES = frozenset({"half-installed", "unpacked", "half-configured", "triggers-awaited",
                                    "triggers-pending"})


@dataclass(frozen=True)
class InstalledPackage:
    name: str
    version: str
    held: bool = False


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


def _plausible(name: str, version: str) -> bool:
    """A listing line's name and version as a package manager prints them: a hostile or garbled
    line (a blank or control character, a name no package manager allows) is no package."""
    return (len(name) <= NAME_MAX and PACKAGE_NAME.fullmatch(name) is not None and bool(version)
            and not control_character(version) and not any(c.isspace() for c in version))


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
            unfinished.append(name if _plausible(name, "0") else "<an unreadable dpkg line>")
        if words[2] != "installed" or not _plausible(name, version):
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
            if len(parts) == 2 and _plausible(*parts):
                pkgs[parts[0]] = InstalledPackage(parts[0], parts[1])
            continue
        entry = line[:-2] if line.endswith(".*") else line
        if " " in entry or ":" not in entry or entry.startswith("#"):
            continue  # dnf chatter, not a lock entry
        name, evr = split_lock(entry)
        if name and _plausible(name, evr):
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
