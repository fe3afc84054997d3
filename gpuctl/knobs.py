"""Role knobs, typed: what each key of roles/*/defaults.yaml may be overridden with.

A knob's default gives its shape (flag, number, string, list, per-OS map); its type (one of
the types here, declared beside the knob by its component in roles/<component>/__init__.py)
says which strings it takes, by construction rather than by a blacklist of characters:

- `Path`    an absolute path in normal form confined to the folder(s) its default lives in
            (or an explicit allowlist): `base_sysctl_file: /etc/passwd` is refused;
- `Choice`  one of known values: a command knob is a choice among known commands, each
            with its argv (`nvme_raid_initramfs_command: rm -rf /` is refused);
- `Flags`   a list of tokens, each from the tool's allowlist (nvcc, mkfs.xfs, mkfs.ext4);
            a string value is read as tokens separated by single spaces;
- `MountOptions` comma-separated mount options from an allowlist;
- `Word`    one token of a given character class (package, unit, module names ...).

Every string is first refused if it holds a control character (`gpuctl.boundary`). The
one judgement `knob_problems(key, value)` is used at inventory validation (file:line:
field, exit 2) and by `gpuctl.operations.role_knobs` for the values that do not come
from the inventory.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuctl import components
from gpuctl.boundary import NAME_MAX, PACKAGE_NAME, SYSTEM_DIRS, control_character, path_problem, under
from gpuctl.parsers.kernel import NVIDIA_MODULE_VERSION_FILE

Sub = tuple[str | int, ...]  # the part of the field path below role_vars.<key>


@dataclass(frozen=True)
class Word:
    """One token: full match of `pattern` (a character class, never a space)."""

    pattern: str
    what: str

    def problem(self, value: str) -> str | None:
        if len(value) > NAME_MAX:
            return f"a {self.what} of {len(value)} characters (at most {NAME_MAX})"
        if re.fullmatch(self.pattern, value):
            return None
        return f"{value!r} is not a {self.what}"


@dataclass(frozen=True)
class Path:
    """An absolute path confined to `folders` (strictly below one, or one of them when
    `is_dir`) or one of the exact `files`; `{}` allowed where the role formats `{version}`."""

    folders: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    is_dir: bool = False
    template: bool = False

    def problem(self, value: str) -> str | None:
        what = "folder" if self.is_dir else "path"
        if value in self.files:
            return None
        if self.template and any(c in value.replace("{version}", "") for c in "{}"):
            return f"{value!r}: the only placeholder this {what} may hold is {{version}}"
        basic = path_problem(value, allowed=("/",), what=what, extra_chars="{}" if self.template else "")
        if basic:
            return basic
        inside = [f for f in self.folders if under(value, f) and (self.is_dir or value != f)]
        if not inside:
            where = [*(f"{f}/..." for f in self.folders), *self.files]
            return f"{value!r} is outside what this {what} may name: {', '.join(where)}"
        # a system folder strictly inside the allowed one (/var/cache/apt inside /var/cache)
        for d in SYSTEM_DIRS:
            if d not in self.folders and any(under(d, f) and d != f for f in inside) and under(value, d):
                return f"{value!r} lies in the system folder {d}"
        return None


@dataclass(frozen=True)
class Choice:
    """One of `choices` (for a command knob: each with the argv the role runs)."""

    choices: dict[str, tuple[str, ...]] | tuple[str, ...]
    what: str

    def problem(self, value: str) -> str | None:
        if value in self.choices:
            return None
        return f"{value!r} is not a known {self.what}; one of: " + ", ".join(repr(c) for c in self.choices)

    def argv(self, value: str) -> list[str]:
        """The argv of a command choice (KeyError for anything not a choice)."""
        assert isinstance(self.choices, dict)
        return list(self.choices[value])


@dataclass(frozen=True)
class Flags:
    """Command-line tokens for one tool: each a full match of one allowed pattern; options in
    `with_arg` take the next token, which must fully match its pattern. `force` tokens (a
    combined short option holding one of its letters too) are refused with their reason."""

    tool: str
    alone: tuple[str, ...]
    with_arg: dict[str, str] = field(default_factory=dict)
    force_letters: str = ""

    def problem(self, value: str | list[str]) -> str | None:
        tokens = flag_tokens(value)
        if isinstance(tokens, str):
            return tokens
        i = 0
        while i < len(tokens):
            t = tokens[i]
            force = rf"-[A-Za-z]*[{self.force_letters}][A-Za-z]*"
            if self.force_letters and (t == "--force" or re.fullmatch(force, t)):
                return (f"{t!r} would let mkfs overwrite an existing filesystem; the role never does "
                        "(a wipe is an explicit --allow-wipe with storage.raid.wipe)")
            if t in self.with_arg:
                if i + 1 >= len(tokens) or not re.fullmatch(self.with_arg[t], tokens[i + 1]):
                    nxt = tokens[i + 1] if i + 1 < len(tokens) else "nothing"
                    return f"{t} takes a value matching {self.with_arg[t]}, not {nxt!r}"
                i += 2
                continue
            if not any(re.fullmatch(p, t) for p in self.alone):
                return (f"{t!r} is not an allowed {self.tool} option (allowed: "
                        + ", ".join([*self.alone, *(f"{k} VALUE" for k in self.with_arg)]) + ")")
            i += 1
        return None


def flag_tokens(value: str | list[str]) -> list[str] | str:
    """The tokens of a flags knob: a list as it is, a string cut at single spaces (after the
    control-character check, so a space is the only separator left); a problem string when
    the value has empty tokens (two spaces, a leading/trailing one) or is of another type."""
    if isinstance(value, list):
        tokens = value
    elif isinstance(value, str):
        tokens = value.split(" ") if value else []
    else:
        return f"{value!r} is not a string or a list of options"
    for t in tokens:
        if not isinstance(t, str) or not t:
            return f"{value!r}: options are separated by single spaces (or given as a list)"
    return list(tokens)


#: Mount options gpuctl writes to fstab (generic, XFS, ext4, Lustre, systemd); `name=value`
#: where the name is allowed with a value. `user`, `users`, `owner`, `exec`, `suid`, `dev`
#: are not: they hand a mount to unprivileged users or undo a hardening.
_MOUNT_FLAGS = frozenset({
    "defaults", "nofail", "noatime", "nodiratime", "relatime", "strictatime", "lazytime", "nolazytime",
    "discard", "nodiscard", "noexec", "nosuid", "nodev", "ro", "rw", "_netdev", "auto", "noauto", "async",
    "sync", "dirsync", "user_xattr", "acl", "noacl", "flock", "localflock", "noflock", "lazystatfs",
    "nolazystatfs", "inode64", "inode32", "largeio", "nolargeio", "swalloc", "noquota", "x-systemd.automount",
    "x-systemd.growfs", "x-systemd.makefs",
})
_MOUNT_WITH_VALUE = frozenset({
    "logbufs", "logbsize", "allocsize", "sunit", "swidth", "commit", "stripe", "data", "errors", "barrier",
    "x-systemd.requires", "x-systemd.after", "x-systemd.before", "x-systemd.wants", "x-systemd.requires-mounts-for",
    "x-systemd.mount-timeout", "x-systemd.device-timeout", "x-systemd.idle-timeout",
})
_MOUNT_VALUE = re.compile(r"[A-Za-z0-9_.:@/+-]+")


@dataclass(frozen=True)
class MountOptions:
    """A comma-separated list of mount options from the allowlist (fstab's fourth field)."""

    def problem(self, value: str) -> str | None:
        if not value:
            return "an empty mount option list"
        for opt in value.split(","):
            name, eq, val = opt.partition("=")
            if not eq and name in _MOUNT_FLAGS:
                continue
            if eq and name in _MOUNT_WITH_VALUE and _MOUNT_VALUE.fullmatch(val) and ".." not in val.split("/"):
                continue
            return (f"{opt!r} is not an allowed mount option (comma-separated, no spaces; allowed: "
                    f"{', '.join(sorted(_MOUNT_FLAGS))}; with =value: {', '.join(sorted(_MOUNT_WITH_VALUE))})")
        return None


@dataclass(frozen=True)
class Url:
    """An http(s) URL of URL characters only; `{version}` expands."""

    schemes: tuple[str, ...] = ("https", "http")
    words: tuple[str, ...] = ()

    def problem(self, value: str) -> str | None:
        if value in self.words:
            return None
        if any(c in value.replace("{version}", "") for c in "{}"):
            return f"{value!r}: the only placeholder a URL here may hold is {{version}}"
        if re.fullmatch(rf"(?:{'|'.join(self.schemes)})://[A-Za-z0-9._~:/?#\[\]@!%+,=*{{}}-]+", value):
            return None
        return f"{value!r} is not {' or '.join(map(repr, self.words)) + ' or ' if self.words else ''}an " \
               f"{'/'.join(self.schemes)} URL of URL characters only"


@dataclass(frozen=True)
class Address:
    def problem(self, value: str) -> str | None:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return f"{value!r} is not an IP address"
        return None


Type = Word | Path | Choice | Flags | MountOptions | Url | Address

PACKAGE = Word(PACKAGE_NAME.pattern, "package name")
UNIT = Word(r"[A-Za-z0-9][A-Za-z0-9_.@:-]*", "systemd unit name")
MODULE = Word(r"[A-Za-z0-9][A-Za-z0-9_-]*", "kernel module name")
PREFIX = Word(r"[A-Za-z0-9][A-Za-z0-9_-]*", "file-name prefix (letters, digits, _ -)")
VERSION = Word(r"[0-9][0-9A-Za-z.+~-]*", "version")
SHA256 = Word(r"[0-9a-f]{64}", "sha256 (64 lowercase hex digits)")
GROUP = Word(r"[a-z_][a-z0-9_-]{0,31}", "group name")
ORIGIN = Word(r"[A-Za-z0-9][A-Za-z0-9._-]*", "repository origin")
# a glob names a family of packages: at least three literal characters first (`*` alone
# would pin every distribution package to the NVIDIA repository and block the rest)
GLOB = Word(r"[A-Za-z0-9][A-Za-z0-9.+_-]{2,}[A-Za-z0-9.+_*?-]*", "package-name glob (3 letters or more, then * ?)")
CMDLINE_WORD = Word(r"[A-Za-z0-9_.-]+(=[A-Za-z0-9_.,:+@/-]+)?", "kernel command-line word (name or name=value)")
REPO_ID = Word(r"[A-Za-z0-9][A-Za-z0-9_.-]*", "repository id")

#: Commands a command knob may name, with the argv each runs.
INITRAMFS_COMMANDS: dict[str, tuple[str, ...]] = {
    "update-initramfs -u": ("update-initramfs", "-u"),
    "update-initramfs -u -k all": ("update-initramfs", "-u", "-k", "all"),
    "dracut -f": ("dracut", "-f"),
    "dracut -f --regenerate-all": ("dracut", "-f", "--regenerate-all"),
}
CONFIRM_COMMANDS: dict[str, tuple[str, ...]] = {
    f"cat {NVIDIA_MODULE_VERSION_FILE}": ("cat", NVIDIA_MODULE_VERSION_FILE),
}
LOGIN_PROBE_COMMANDS: dict[str, tuple[str, ...]] = {
    # run by the customer's login shell over SSH (a command line, by design): known lines only
    "sudo -n true && echo gpuctl-login-ok": (),
    "echo gpuctl-login-ok": (),
}

NVCC_FLAGS = Flags("nvcc", alone=(
    r"-O[0-3]", r"-std=c\+\+(11|14|17|20)", r"-g", r"-G", r"-lineinfo", r"--?use_fast_math",
    r"-arch=(sm|compute)_[0-9]{2,3}a?", r"-gencode=arch=compute_[0-9]{2,3}a?,code=(sm|compute)_[0-9]{2,3}a?",
    r"-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.]+)?", r"-Wno-deprecated-gpu-targets", r"--expt-relaxed-constexpr",
))
MKFS_XFS = Flags("mkfs.xfs", alone=(r"-q", r"-K"), force_letters="fF", with_arg={
    "-m": r"(crc|finobt|reflink|rmapbt|bigtime|inobtcount)=[01](,(crc|finobt|reflink|rmapbt|bigtime|inobtcount)=[01])*",
    "-i": r"(size|maxpct|sparse)=[0-9]+",
    "-l": r"(size=[0-9]+[kmg]?|lazy-count=[01]|version=2)(,(size=[0-9]+[kmg]?|lazy-count=[01]|version=2))*",
    "-d": r"(su|sw|agcount|agsize|sunit|swidth)=[0-9]+[kmgKMG]?(,(su|sw|agcount|agsize|sunit|swidth)=[0-9]+[kmgKMG]?)*",
    "-L": r"[A-Za-z0-9_-]{1,12}",
})
_EXT4_E = r"(lazy_itable_init=[01]|lazy_journal_init=[01]|stride=[0-9]+|stripe[-_]width=[0-9]+|nodiscard|discard)"
MKFS_EXT4 = Flags("mkfs.ext4", alone=(r"-q", r"-j", r"-m[0-9]{1,2}"), force_letters="fF", with_arg={
    "-E": rf"{_EXT4_E}(,{_EXT4_E})*",
    "-m": r"[0-9]{1,2}",
    "-L": r"[A-Za-z0-9_-]{1,16}",
    "-O": r"\^?[a-z0-9_]+(,\^?[a-z0-9_]+)*",
    "-T": r"(default|small|floppy|big|huge|largefile|largefile4|news)",
    "-i": r"[0-9]+",
    "-b": r"(1024|2048|4096)",
})

def knob_types() -> dict[str, Type | dict[str, Type]]:
    """The type of every string knob (a list knob: of its items; a map knob: of its entries,
    or per entry by a dict), as each component declares it (roles/<component>/__init__.py).
    tests/unit/test_input_boundary.py checks every string in every defaults.yaml has one and
    that the defaults pass it."""
    return components.knob_types()


def flag_knobs() -> frozenset[str]:
    """Knobs whose value is a list of tokens (a flags knob): its string default is not one word."""
    def flags(t: Type | dict[str, Type]) -> bool:
        return any(isinstance(x, Flags) for x in (t.values() if isinstance(t, dict) else (t,)))
    return frozenset(k for k, t in knob_types().items() if flags(t))


def __getattr__(name: str) -> Any:
    """`KNOBS` and `FLAG_KNOBS`, read from the component registry when first asked for."""
    if name == "KNOBS":
        return knob_types()
    if name == "FLAG_KNOBS":
        return flag_knobs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _type_of(key: str, entry: str | int | None) -> Type | None:
    t = knob_types().get(key)
    if isinstance(t, dict):
        return t.get(str(entry)) if entry is not None else None
    return t


def _judge(t: Type | None, value: Any, sub: Sub, out: list[tuple[Sub, str]], key: str) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _judge(_type_of(key, k) if isinstance(knob_types().get(key), dict) else t, v, (*sub, k), out, key)
        return
    if isinstance(value, list) and not isinstance(t, Flags):
        for i, v in enumerate(value):
            _judge(t, v, (*sub, i), out, key)
        return
    if isinstance(value, list):  # a flags knob given as a list
        bad = [(i, x) for i, x in enumerate(value) if not isinstance(x, str)]
        if bad:
            out.append(((*sub, bad[0][0]), f"{bad[0][1]!r} is not an option string"))
            return
        for i, x in enumerate(value):
            if control_character(x):
                out.append(((*sub, i), f"holds the control character {control_character(x)}"))
                return
    elif not isinstance(value, str):
        return  # numbers and flags: the shape check (inventory_semantics.knob_value_problem) judges them
    elif control_character(value):
        out.append((sub, f"holds the control character {control_character(value)}"))
        return
    if t is None:
        out.append((sub, f"{value!r}: this setting has no declared type (roles/<component>/__init__.py); refused"))
        return
    problem = t.problem(value)
    if problem:
        out.append((sub, problem))


def knob_problems(key: str, value: Any) -> list[tuple[Sub, str]]:
    """(sub-path, message) for each string of `value` that knob `key` does not take.
    Sub-paths are below role_vars.<key>: () for the value, ('apt',) for a map entry, (1,)
    for a list item. A string in a knob with no declared type is refused."""
    out: list[tuple[Sub, str]] = []  # a knob without a type takes no string at all
    _judge(_type_of(key, None), value, (), out, key)
    return out


def tokens(key: str, value: str | Sequence[str]) -> list[str]:
    """The argv tokens of a flags knob's (already validated) value."""
    got = flag_tokens(list(value) if not isinstance(value, str) else value)
    if isinstance(got, str):
        raise ValueError(f"{key}: {got}")
    return got


def command_argv(key: str, value: str) -> list[str] | None:
    """The argv of a command knob's value; None when the value is not a known command."""
    t = _type_of(key, None)
    if isinstance(t, Choice) and isinstance(t.choices, dict) and value in t.choices:
        return t.argv(value)
    return None
