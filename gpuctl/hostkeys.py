"""One host-key policy for plan, provision, verify and bench.

- Trust source: the inventory's ``ssh.known_hosts`` when set (the only file: the
  inventory pins its own trust, as the lab does). Otherwise gpuctl's own file
  (``$GPUCTL_KNOWN_HOSTS`` or ``~/.local/state/gpuctl/known_hosts``), where new keys are
  recorded, plus the user's ``~/.ssh/known_hosts`` (``$GPUCTL_USER_KNOWN_HOSTS``), read only.
- A host with no entry anywhere: recorded on first use (trust-on-first-use); refused in
  strict mode. A host whose entries all differ from the offered key (another key of the
  same or another type) is refused with both fingerprints, never overwritten.
- known_hosts is read as OpenSSH reads it (`read_known_hosts`, `host_matches`): comma
  lists of `*`/`?` patterns, `!` negation, hashed names (``|1|salt|hash``), the
  ``[host]:port`` form, names compared case-insensitively. A key under ``@revoked`` is
  refused; a host covered only by ``@cert-authority`` is refused (gpuctl checks no host
  certificates); a line whose key cannot be read counts as a known key that never matches.

pyinfra reads one file (`ssh_known_hosts_file`) through paramiko, which compares names
exactly and knows no markers: `seed` writes the keys OpenSSH semantics trust for each of the
run's hosts into the record file as exact lines first, and refuses (before any connection)
a host whose files disagree or for which that client would decide otherwise.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
import hmac
import logging
import os
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeys

from gpuctl.fileio import read_bytes

log = logging.getLogger(__name__)
_LOCK = threading.Lock()


class HostKeyRefused(paramiko.SSHException):
    """known_hosts refuses the offered key or the host (revoked, certificate authority only)."""


class HostKeyChanged(HostKeyRefused):
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


# Host key algorithms paramiko's client asks for (paramiko 4.0 Transport._preferred_keys), and
# those a known_hosts key type is offered under (an RSA key signs with SHA-2 too, RFC 8332).
_CLIENT_ALGORITHMS = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                      "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")
_ALGORITHMS = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")}
_MARKERS = {"@revoked": "revoked", "@cert-authority": "cert-authority"}
_WARNED: set[tuple[str, int]] = set()


@dataclass(frozen=True)
class KnownLine:
    """One key line of a known_hosts file, read as OpenSSH reads it (sshd(8), "SSH_KNOWN_HOSTS
    FILE FORMAT"): an optional marker, a comma-separated list of host patterns (or one hashed
    name), a key type and the key. `key` is None when the key cannot be read (a type paramiko
    does not know, bad base64): such a line still says the host is known, with a key that
    never equals the offered one."""

    path: str
    lineno: int
    raw: str
    marker: str | None  # None, "revoked" or "cert-authority"
    hosts: str
    keytype: str
    keydata: str

    @functools.cached_property
    def key(self) -> paramiko.PKey | None:
        """Parsed on first use: only the lines naming a host are (a key parse costs ~50 µs)."""
        return _parse_key(self.keytype, self.keydata)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.lineno}"

    @functools.cached_property
    def _hashed(self) -> tuple[bytes, bytes] | None:
        return _hash_parts(self.hosts)

    def matches(self, name: str) -> bool:
        if self.hosts.startswith("|"):  # decoded once per line, not once per name
            return self._hashed is not None and _hmac_matches(self._hashed, name.lower())
        return host_matches(self.hosts, name)

    def exact(self, name: str) -> bool:
        """Whether paramiko (pyinfra) reads this line as naming `name`: one of the comma
        list equal to it, or a hashed name of it as given (no patterns, case kept)."""
        return any(h == name or (h.startswith("|") and (parts := _hash_parts(h)) is not None
                                 and _hmac_matches(parts, name)) for h in self.hosts.split(","))

    def describe(self) -> str:
        what = fingerprint(self.key) if self.key is not None else f"{self.keytype} (a key gpuctl cannot read)"
        return f"{what} in {self.where}"


@functools.lru_cache(maxsize=4096)
def _pattern_re(pattern: str) -> re.Pattern[str]:
    """OpenSSH's match_pattern: `*` any run of characters, `?` one character, nothing else
    special (so `[host]:port` is literal, unlike fnmatch)."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL)


def _hash_parts(field_: str) -> tuple[bytes, bytes] | None:
    """(salt, HMAC) of `|1|base64(salt)|base64(HMAC-SHA1(salt, name))`, OpenSSH's
    HashKnownHosts form; None for anything else."""
    parts = field_.split("|")
    if len(parts) != 4 or parts[0] or parts[1] != "1":
        return None
    try:
        return base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True)
    except (ValueError, binascii.Error):
        return None


def _hmac_matches(parts: tuple[bytes, bytes], name: str) -> bool:
    return hmac.compare_digest(hmac.digest(parts[0], name.encode(), "sha1"), parts[1])


def host_matches(hosts: str, name: str) -> bool:
    """Whether a known_hosts host field names `name` (`host` or `[host]:port`), as OpenSSH
    decides: a hashed name compared by HMAC, else a comma-separated pattern list in which
    `!pattern` excludes the line; names compared case-insensitively."""
    name = name.lower()
    if hosts.startswith("|"):
        parts = _hash_parts(hosts)
        return parts is not None and _hmac_matches(parts, name)
    hit = False
    for pattern in hosts.lower().split(","):
        negated = pattern.startswith("!")
        if negated:
            pattern = pattern[1:]
        if pattern and _pattern_re(pattern).fullmatch(name):
            if negated:
                return False
            hit = True
    return hit


def _parse_key(keytype: str, data: str) -> paramiko.PKey | None:
    try:
        return paramiko.PKey.from_type_string(keytype, base64.b64decode(data, validate=True))
    except Exception:  # unknown type, bad base64, bad key data: unreadable, never equal
        return None


def read_known_hosts(path: str) -> list[KnownLine]:
    """Every key line of `path` (none when it does not exist). Comments, blank lines and
    lines too short to hold a key are skipped, as OpenSSH does; a line with an unknown
    `@marker` is skipped with a warning (OpenSSH ignores it too). Read through the bounded
    reader: a FIFO, device or oversized file is an InputError (it never hangs, and a file
    that cannot be read is never taken for an empty one, which would trust any key)."""
    if not os.path.lexists(path):
        return []
    text = read_bytes(path, what="known_hosts file").decode("utf-8", errors="replace")
    out: list[KnownLine] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = None
        if fields[0].startswith("@"):
            marker = _MARKERS.get(fields[0].lower())
            if marker is None:
                if (path, lineno) not in _WARNED:  # once, not once per host looked up
                    _WARNED.add((path, lineno))
                    log.warning("%s:%d: unknown known_hosts marker %s: line ignored", path, lineno, fields[0])
                continue
            fields = fields[1:]
        if len(fields) < 3:
            continue
        out.append(KnownLine(path, lineno, raw, marker, fields[0], fields[1], fields[2]))
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

    def known(self, name: str) -> list[KnownLine]:
        """Every line of this policy's files that names `name`."""
        return [kl for f in self.files for kl in read_known_hosts(f) if kl.matches(name)]

    def disabled_key_algorithms(self, name: str) -> list[str]:
        """Host key algorithms a client should not ask `name` for: those of no key known_hosts
        trusts for it, so the server offers a key that can be compared (OpenSSH orders its
        HostKeyAlgorithms by the known types the same way). Empty when no readable key is
        known (first use, a certificate authority only)."""
        types = {kl.keytype for kl in self.known(name) if kl.marker is None and kl.key is not None}
        if not types:
            return []
        allowed = {a for t in types for a in _ALGORITHMS.get(t, (t,))}
        return [a for a in _CLIENT_ALGORITHMS if a not in allowed]

    def judge(self, name: str, key: paramiko.PKey) -> bool:
        """True when `key` is trusted for `name`, False when nothing is known of `name`;
        raises HostKeyRefused (revoked key, host covered by a @cert-authority only) or
        HostKeyChanged (the host is known with other keys)."""
        lines = self.known(name)
        revoked = [kl for kl in lines if kl.marker == "revoked" and kl.key is not None and kl.key == key]
        if revoked:
            raise HostKeyRefused(
                f"host key {fingerprint(key)} offered by {name} is REVOKED (@revoked in "
                f"{', '.join(kl.where for kl in revoked)}). Refusing to connect.")
        plain = [kl for kl in lines if kl.marker is None]
        if any(kl.key is not None and kl.key == key for kl in plain):
            return True
        if plain:
            raise HostKeyChanged(changed_message(name, fingerprint(key), plain))
        ca = [kl for kl in lines if kl.marker == "cert-authority"]
        if ca:
            raise HostKeyRefused(_ca_message(name, ca))
        return False

    def check(self, name: str, key: paramiko.PKey) -> None:
        """Accept `key` for `name`, record it if new; raise HostKeyRefused/SSHException."""
        if self.judge(name, key):
            return
        if self.strict:
            raise paramiko.SSHException(
                f"host key for {name} ({fingerprint(key)}) is not in {' or '.join(self.files)} "
                "and strict host key checking is on")
        self.append(name, [key])
        log.info("recorded new host key for %s (%s) in %s", name, fingerprint(key), self.record)

    def append(self, name: str, keys: Sequence[paramiko.PKey]) -> None:
        with _LOCK:
            Path(self.record).parent.mkdir(parents=True, exist_ok=True)
            with open(self.record, "a") as fh:
                fh.writelines(f"{name} {k.get_name()} {k.get_base64()}\n" for k in keys)
            os.chmod(self.record, 0o600)

    def seed(self, names: Iterable[str]) -> dict[str, str]:
        """Make the record file, for a client that reads that one file and compares host
        names exactly (pyinfra through paramiko), say what OpenSSH would decide over all the
        files: the keys trusted for each of `names` (matched by pattern, hash or another
        case, in any file, less revoked ones) are written as exact `name type key` lines.
        Returns {name: error} for each host that must not be connected: files that disagree,
        a host known only through @cert-authority, @revoked or unreadable lines (where a
        first-use key would be accepted by that client), or a record line that client would
        trust and OpenSSH would not (negated or revoked)."""
        errors: dict[str, str] = {}
        record = read_known_hosts(self.record)  # each file read once for all the names
        readonly = [kl for f in self.readonly for kl in read_known_hosts(f)]
        seen = _paramiko_keys(self.record)
        for name in dict.fromkeys(names):
            mine = [kl for kl in record if kl.matches(name)]
            theirs = [kl for kl in readonly if kl.matches(name)]
            mine_plain = [kl for kl in mine if kl.marker is None]
            theirs_plain = [kl for kl in theirs if kl.marker is None]
            if mine_plain and theirs_plain and not any(
                    a.key is not None and a.key == b.key for a in mine_plain for b in theirs_plain):
                errors[name] = changed_message(
                    name, ", ".join(kl.describe() for kl in mine_plain), theirs_plain)
                continue
            lines = mine + theirs
            revoked = [kl.key for kl in lines if kl.marker == "revoked" and kl.key is not None]
            trusted: list[paramiko.PKey] = []
            for kl in lines:
                if (kl.marker is None and kl.key is not None and not any(kl.key == r for r in revoked)
                        and not any(kl.key == t for t in trusted)):
                    trusted.append(kl.key)
            found = seen.lookup(name)
            view = list(found.values()) if found is not None else []
            blockers = [kl for kl in lines if kl.marker is not None or kl.key is None]
            if not trusted and not view:
                if blockers:
                    errors[name] = (
                        f"no trusted host key for {name}, and known_hosts covers it with "
                        f"{'; '.join(_line_kind(kl) for kl in blockers)}: gpuctl will not trust a "
                        f"first-use key for it. Add the host's current key (checked out of band) "
                        f"to {self.record}.")
                continue
            stray = [k for k in view if not any(k == t for t in trusted)]
            if stray:
                errors[name] = (
                    f"{self.record} holds {', '.join(fingerprint(k) for k in stray)} for {name} as a "
                    f"plain entry, but known_hosts does not trust it for {name} (revoked or excluded by "
                    f"a !pattern). Remove that entry with `ssh-keygen -R '{name}' -f {self.record}`.")
                continue
            exact = [kl.key for kl in record if kl.marker is None and kl.key is not None and kl.exact(name)]
            missing = [k for k in trusted if not any(k == v for v in (*view, *exact))]
            if missing:
                self.append(name, missing)
        return errors

    def paramiko_policy(self) -> MissingKeyPolicy:
        return MissingKeyPolicy(self)

    def ssh_options(self) -> list[str]:
        """OpenSSH -o options: the same files (new keys go to the first), same strictness."""
        files = " ".join(f'"{f}"' if " " in f else f for f in self.files)
        return ["-o", f"UserKnownHostsFile={files}",
                "-o", f"StrictHostKeyChecking={'yes' if self.strict else 'accept-new'}"]


def changed_message(name: str, offered: str, known: Sequence[KnownLine]) -> str:
    listed = "; ".join(kl.describe() for kl in known)
    files = sorted({kl.path for kl in known})
    return (f"HOST KEY CHANGED for {name}: offered {offered}, known {listed}. Refusing to connect "
            f"(possible man-in-the-middle). If the change is expected, remove the old entry with "
            f"`ssh-keygen -R '{name}' -f {files[0]}`.")


def _ca_message(name: str, ca: Sequence[KnownLine]) -> str:
    return (f"{name} is covered only by @cert-authority lines ({', '.join(kl.where for kl in ca)}); "
            f"gpuctl does not verify host certificates, and will not trust the host's key on first "
            f"use instead. Add the host's own key to known_hosts (checked out of band).")


def _line_kind(kl: KnownLine) -> str:
    kind = f"@{kl.marker}" if kl.marker else "an unreadable key line"
    return f"{kind} ({kl.describe()})"


def _paramiko_keys(path: str) -> HostKeys:
    """`path` as a paramiko client loads it (as pyinfra does, tolerating a bad line): its
    lookup trusts exact names and hashed matches only."""
    keys = HostKeys()
    with contextlib.suppress(Exception):  # pyinfra's get_host_keys does the same
        keys.load(path)
    return keys


@dataclass
class MissingKeyPolicy(paramiko.MissingHostKeyPolicy):
    """paramiko policy that applies `Policy.check` to every connection (load no keys
    into the client, so paramiko hands every key here)."""

    policy: Policy
    seen: list[str] = field(default_factory=list)

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self.policy.check(hostname, key)
