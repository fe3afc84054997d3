"""Role knobs, typed: what each key of roles/*/defaults.yaml may be overridden with.

A knob's default gives its shape (flag, number, string, list, per-OS map); its type here
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

from gpuctl.boundary import NAME_MAX, SYSTEM_DIRS, control_character, path_problem, under
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

PACKAGE = Word(r"[A-Za-z0-9][A-Za-z0-9.+_~-]*", "package name")
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

_NVCC = Flags("nvcc", alone=(
    r"-O[0-3]", r"-std=c\+\+(11|14|17|20)", r"-g", r"-G", r"-lineinfo", r"--?use_fast_math",
    r"-arch=(sm|compute)_[0-9]{2,3}a?", r"-gencode=arch=compute_[0-9]{2,3}a?,code=(sm|compute)_[0-9]{2,3}a?",
    r"-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.]+)?", r"-Wno-deprecated-gpu-targets", r"--expt-relaxed-constexpr",
))
_MKFS_XFS = Flags("mkfs.xfs", alone=(r"-q", r"-K"), force_letters="fF", with_arg={
    "-m": r"(crc|finobt|reflink|rmapbt|bigtime|inobtcount)=[01](,(crc|finobt|reflink|rmapbt|bigtime|inobtcount)=[01])*",
    "-i": r"(size|maxpct|sparse)=[0-9]+",
    "-l": r"(size=[0-9]+[kmg]?|lazy-count=[01]|version=2)(,(size=[0-9]+[kmg]?|lazy-count=[01]|version=2))*",
    "-d": r"(su|sw|agcount|agsize|sunit|swidth)=[0-9]+[kmgKMG]?(,(su|sw|agcount|agsize|sunit|swidth)=[0-9]+[kmgKMG]?)*",
    "-L": r"[A-Za-z0-9_-]{1,12}",
})
_EXT4_E = r"(lazy_itable_init=[01]|lazy_journal_init=[01]|stride=[0-9]+|stripe[-_]width=[0-9]+|nodiscard|discard)"
_MKFS_EXT4 = Flags("mkfs.ext4", alone=(r"-q", r"-j", r"-m[0-9]{1,2}"), force_letters="fF", with_arg={
    "-E": rf"{_EXT4_E}(,{_EXT4_E})*",
    "-m": r"[0-9]{1,2}",
    "-L": r"[A-Za-z0-9_-]{1,16}",
    "-O": r"\^?[a-z0-9_]+(,\^?[a-z0-9_]+)*",
    "-T": r"(default|small|floppy|big|huge|largefile|largefile4|news)",
    "-i": r"[0-9]+",
    "-b": r"(1024|2048|4096)",
})

#: /etc files that gpuctl-owned alternatives may also live in.
_GPUCTL_ETC = "/etc/gpuctl"

#: The type of every string knob (a list knob: of its items; a map knob: of its entries,
#: or per entry by a dict). tests/unit/test_input_boundary.py checks every string in every
#: defaults.yaml has one and that the defaults pass it.
KNOBS: dict[str, Type | dict[str, Type]] = {
    # base
    "base_kernel_cmdline_extra": CMDLINE_WORD,
    "base_grub_dropin": Path(("/etc/default/grub.d",)),
    "base_blacklist_file": Path(("/etc/modprobe.d",)),
    "base_sysctl_file": Path(("/etc/sysctl.d",)),
    "base_limits_file": Path(("/etc/security/limits.d",)),
    "base_unattended_upgrades_file": Path(("/etc/apt/apt.conf.d",)),
    "base_packages_apt": PACKAGE,
    "base_packages_dnf": PACKAGE,
    # bench_tools
    "bench_tools_packages_apt": PACKAGE,
    "bench_tools_packages_dnf": PACKAGE,
    "bench_tools_mpi_home_apt": Path(("/usr/lib", "/usr/lib64", "/usr/local", "/opt"), is_dir=True),
    "bench_tools_mpi_home_dnf": Path(("/usr/lib", "/usr/lib64", "/usr/local", "/opt"), is_dir=True),
    "bench_tools_nccl_tests_version": VERSION,
    "bench_tools_nccl_tests_sha256": SHA256,
    "bench_tools_nccl_tests_source": Url(schemes=("https", "http", "file"), words=("auto", "github", "mirror")),
    "bench_tools_nccl_tests_github_url": Url(schemes=("https",)),
    "bench_tools_nccl_tests_dir": Path(("/opt/gpuctl",), template=True),
    "bench_tools_bin_dir": Path(("/usr/local/bin", "/usr/local/sbin", "/opt/gpuctl"), is_dir=True),
    "bench_tools_nccl_tests_package": PACKAGE,
    "bench_tools_bwprobe_source_path": Path(("/opt/gpuctl",)),
    "bench_tools_bwprobe_binary": Path(("/usr/local/bin", "/usr/local/sbin", "/opt/gpuctl")),
    "bench_tools_bwprobe_nvcc_flags": _NVCC,
    "bench_tools_bwprobe_package": PACKAGE,
    # cuda, dcgm, fabricmanager
    "cuda_profile_file": Path(("/etc/profile.d",)),
    "cuda_home_pattern": Path(("/usr/local", "/opt"), template=True),
    "dcgm_service": UNIT,
    "fabricmanager_service": UNIT,
    # gds
    "gds_cufile_path": Path((_GPUCTL_ETC,), files=("/etc/cufile.json",)),
    "gds_modules_load_file": Path(("/etc/modules-load.d",)),
    "gds_module": MODULE,
    "gds_logging_dir": Path(("/var/log",), is_dir=True),
    "gds_logging_level": Choice(("ERROR", "WARN", "INFO", "DEBUG", "TRACE"), "cuFile log level"),
    # handover
    "handover_shell": Path(("/bin", "/usr/bin", "/usr/local/bin")),
    "handover_sudoers_dir": Path(files=("/etc/sudoers.d",)),
    "handover_sudoers_prefix": PREFIX,
    "handover_sudo_rule": Choice(("ALL=(ALL:ALL) NOPASSWD: ALL", "ALL=(ALL) NOPASSWD: ALL"),
                                 "sudo rule (the accounts have no password: NOPASSWD rules only)"),
    "handover_groups": GROUP,
    "handover_login_probe_command": Choice(LOGIN_PROBE_COMMANDS, "login probe command"),
    # lustre_client
    "lustre_client_modprobe_conf": Path(("/etc/modprobe.d",)),
    "lustre_client_module": MODULE,
    "lustre_client_mount_options_extra": MountOptions(),
    # network
    "network_renderer": Choice(("ifupdown", "netplan", "networkmanager"), "network renderer"),
    "network_ifupdown_dir": Path(files=("/etc/network/interfaces.d",)),
    "network_ifupdown_prefix": PREFIX,
    "network_netplan_file": Path(("/etc/netplan",)),
    "network_nm_dir": Path(files=("/etc/NetworkManager/system-connections",)),
    "network_nccl_conf": Path((_GPUCTL_ETC,), files=("/etc/nccl.conf",)),
    "network_modules_file": Path(("/etc/modules-load.d",)),
    "network_roce_qos_script": Path(("/usr/local/sbin", "/usr/local/bin")),
    "network_roce_qos_unit": Word(r"[A-Za-z0-9][A-Za-z0-9_.@:-]*\.service", "systemd service name (….service)"),
    "network_soft_roce_unit_prefix": PREFIX,
    "network_packages": PACKAGE,
    # nvidia_driver
    "nvidia_driver_confirm_command": Choice(CONFIRM_COMMANDS, "confirm command"),
    "nvidia_driver_dnf_stream_suffix_open": Word(r"(-[a-z0-9]+)?", "dnf stream suffix (like -open)"),
    "nvidia_driver_dnf_stream_suffix_proprietary": Word(r"(-[a-z0-9]+)?", "dnf stream suffix (like -dkms)"),
    "nvidia_driver_persistenced_service": UNIT,
    # nvidia_repo
    "nvidia_repo_key_file_apt": Path(("/etc/apt/keyrings", "/usr/share/keyrings")),
    "nvidia_repo_key_file_dnf": Path(("/etc/pki/rpm-gpg",)),
    "nvidia_repo_sources_file": Path(("/etc/apt/sources.list.d",)),
    "nvidia_repo_preferences_file": Path(("/etc/apt/preferences.d",)),
    "nvidia_repo_pin_globs": GLOB,
    "nvidia_repo_distro_origins": ORIGIN,
    "nvidia_repo_apt_proxy_file": Path(("/etc/apt/apt.conf.d",)),
    "nvidia_repo_dnf_repo_file": Path(("/etc/yum.repos.d",)),
    "nvidia_repo_dnf_repo_id": REPO_ID,
    # nvme_raid
    "nvme_raid_metadata": Choice(("1.2", "1.1", "1.0"), "mdadm superblock format"),
    "nvme_raid_mount_options": MountOptions(),
    "nvme_raid_mkfs_options": {"xfs": _MKFS_XFS, "ext4": _MKFS_EXT4},
    "nvme_raid_mdadm_conf": Path(files=("/etc/mdadm/mdadm.conf", "/etc/mdadm.conf")),
    "nvme_raid_initramfs_command": Choice(INITRAMFS_COMMANDS, "initramfs command"),
    "nvme_raid_packages": PACKAGE,
    # package_mirror
    "package_mirror_bind_address": Address(),
    "package_mirror_conf_file": Path(("/etc/apt-cacher-ng",)),
    "package_mirror_cache_dir": Path(("/var/cache/apt-cacher-ng", "/srv", "/data"), is_dir=True),
    "package_mirror_packages": PACKAGE,
    "package_mirror_user_ports": Word(r"[1-9][0-9]{0,4}", "port number"),
    "package_mirror_service": UNIT,
    # peermem
    "peermem_modules_load_file": Path(("/etc/modules-load.d",)),
    "peermem_module": MODULE,
    # the training environment and its wheelhouse (roles/train_env, package_mirror_wheels*):
    # typed here ahead of the branch that adds them (i16-trainenv), so they are not refused
    # as untyped once both are merged
    "package_mirror_wheels_dir": Path(("/var/cache/gpuctl-wheels", "/srv", "/data"), is_dir=True),
    "train_env_build": Choice(("cuda", "cpu"), "training environment build"),
    "train_env_path": Path(("/opt/gpuctl",)),
    "train_env_lock_file": Path(("/opt/gpuctl",)),
    "train_env_probe_file": Path(("/opt/gpuctl",)),
    "train_env_profile_file": Path(("/etc/profile.d",)),
    "train_env_index_url": Url(schemes=("https", "http", "file"), words=("",)),
    "train_env_python_package": Word(r"[A-Za-z0-9][A-Za-z0-9.+_~-]*(\{python\}[A-Za-z0-9.+_~-]*)?",
                                     "package name ({python} allowed)"),
}

#: Knobs whose value is a list of tokens (a flags knob): its string default is not one word.
FLAG_KNOBS = frozenset({"bench_tools_bwprobe_nvcc_flags", "nvme_raid_mkfs_options"})


def _type_of(key: str, entry: str | int | None) -> Type | None:
    t = KNOBS.get(key)
    if isinstance(t, dict):
        return t.get(str(entry)) if entry is not None else None
    return t


def _judge(t: Type | None, value: Any, sub: Sub, out: list[tuple[Sub, str]], key: str) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _judge(_type_of(key, k) if isinstance(KNOBS.get(key), dict) else t, v, (*sub, k), out, key)
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
        out.append((sub, f"{value!r}: this setting has no declared type (gpuctl.knobs.KNOBS); refused"))
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
