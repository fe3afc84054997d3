"""One host-key policy for plan, provision, verify and bench.

- Trust source: the inventory's ``ssh.known_hosts`` when set (the only file: the
  inventory pins its own trust, as the lab does). Otherwise gpuctl's own file
  (``$GPUCTL_KNOWN_HOSTS`` or ``~/.local/state/gpuctl/known_hosts``), where new keys are
  recorded, plus the user's ``~/.ssh/known_hosts`` (``$GPUCTL_USER_KNOWN_HOSTS``), read only.
- A host with no entry anywhere: recorded on first use (trust-on-first-use); refused in
  strict mode. A host whose entries all differ from the offered key (another key of the
  same or another type) is refused with both fingerprints, never overwritten.
- Hashed entries (``|1|salt|hash``) and the ``[host]:port`` form are matched as OpenSSH does.

pyinfra reads one file (`ssh_known_hosts_file`): `seed` copies the user's entries for the
run's hosts into the record file first, and refuses a host whose files disagree.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeyEntry, HostKeys

log = logging.getLogger(__name__)
_LOCK = threading.Lock()


class HostKeyChanged(paramiko.SSHException):
    """The host offered a key that differs from the one(s) known for it."""


def default_record_file() -> str:
    return os.path.expanduser(os.environ.get("GPUCTL_KNOWN_HOSTS") or "~/.local/state/gpuctl/known_hosts")


def default_user_files() -> tuple[str, ...]:
    env = os.environ.get("GPUCTL_USER_KNOWN_HOSTS")
    return (os.path.expanduser(env),) if env else (os.path.expanduser("~/.ssh/known_hosts"),)


def host_name(address: str, port: int) -> str:
    """The known_hosts name OpenSSH and paramiko look up."""
    return address if int(port) == 22 else f"[{address}]:{port}"


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return f"{key.get_name()} SHA256:{base64.b64encode(digest).decode().rstrip('=')}"


def _entries(path: str, name: str) -> list[tuple[str, HostKeyEntry]]:
    """(raw line, entry) for every line of `path` naming `name` (hashed or plain)."""
    out: list[tuple[str, HostKeyEntry]] = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return out
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("@"):
            continue
        try:
            entry = HostKeyEntry.from_line(line)
        except Exception:  # an unparsable line (unknown key type) is skipped, as paramiko does
            entry = None
        if entry is None:
            continue
        for h in entry.hostnames:
            if h == name or (h.startswith("|1|") and HostKeys.hash_host(name, h) == h):
                out.append((raw, entry))
                break
    return out


@dataclass(frozen=True)
class Policy:
    """Where keys are looked up and recorded, and whether unknown hosts are refused."""

    record: str
    readonly: tuple[str, ...] = ()
    strict: bool = False

    @classmethod
    def for_inventory(cls, known_hosts: str | None, strict: bool) -> Policy:
        if known_hosts:
            return cls(os.path.expanduser(known_hosts), (), strict)
        return cls(default_record_file(), default_user_files(), strict)

    @property
    def files(self) -> tuple[str, ...]:
        return (self.record, *self.readonly)

    def known(self, name: str) -> list[tuple[str, str, HostKeyEntry]]:
        return [(f, raw, e) for f in self.files for raw, e in _entries(f, name)]

    def check(self, name: str, key: paramiko.PKey) -> None:
        """Accept `key` for `name`, record it if new; raise HostKeyChanged/SSHException."""
        known = self.known(name)
        if any(e.key == key for _, _, e in known):
            return
        if known:
            raise HostKeyChanged(changed_message(name, fingerprint(key), known))
        if self.strict:
            raise paramiko.SSHException(
                f"host key for {name} ({fingerprint(key)}) is not in {' or '.join(self.files)} "
                "and strict host key checking is on")
        self.append(name, key)
        log.info("recorded new host key for %s (%s) in %s", name, fingerprint(key), self.record)

    def append(self, name: str, key: paramiko.PKey) -> None:
        with _LOCK:
            Path(self.record).parent.mkdir(parents=True, exist_ok=True)
            with open(self.record, "a") as fh:
                fh.write(f"{name} {key.get_name()} {key.get_base64()}\n")
            os.chmod(self.record, 0o600)

    def seed(self, names: Iterable[str]) -> dict[str, str]:
        """Copy the read-only files' entries for `names` into the record file (for a client
        that reads one file). Returns {name: error} for hosts whose files disagree."""
        errors: dict[str, str] = {}
        if not self.readonly:
            return errors
        for name in names:
            mine = _entries(self.record, name)
            theirs = [(f, raw, e) for f in self.readonly for raw, e in _entries(f, name)]
            if not theirs:
                continue
            if not mine:
                with _LOCK:
                    Path(self.record).parent.mkdir(parents=True, exist_ok=True)
                    with open(self.record, "a") as fh:
                        fh.writelines(raw.strip() + "\n" for _, raw, _ in theirs)
                    os.chmod(self.record, 0o600)
            elif not any(e.key == m.key for _, _, e in theirs for _, m in mine):
                errors[name] = changed_message(
                    name, ", ".join(fingerprint(m.key) for _, m in mine) + f" (in {self.record})", theirs)
        return errors

    def paramiko_policy(self) -> MissingKeyPolicy:
        return MissingKeyPolicy(self)

    def ssh_options(self) -> list[str]:
        """OpenSSH -o options: the same files (new keys go to the first), same strictness."""
        files = " ".join(f'"{f}"' if " " in f else f for f in self.files)
        return ["-o", f"UserKnownHostsFile={files}",
                "-o", f"StrictHostKeyChecking={'yes' if self.strict else 'accept-new'}"]


def changed_message(name: str, offered: str, known: Sequence[tuple[str, str, HostKeyEntry]]) -> str:
    listed = "; ".join(f"{fingerprint(e.key)} in {f}" for f, _, e in known)
    files = sorted({f for f, _, _ in known})
    return (f"HOST KEY CHANGED for {name}: offered {offered}, known {listed}. Refusing to connect "
            f"(possible man-in-the-middle). If the change is expected, remove the old entry with "
            f"`ssh-keygen -R '{name}' -f {files[0]}`.")


@dataclass
class MissingKeyPolicy(paramiko.MissingHostKeyPolicy):
    """paramiko policy that applies `Policy.check` to every connection (load no keys
    into the client, so paramiko hands every key here)."""

    policy: Policy
    seen: list[str] = field(default_factory=list)

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self.policy.check(hostname, key)
