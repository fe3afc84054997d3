"""gpuctl's own pyinfra operations: pinned installs, holds, managed files, services,
kernel modules, initramfs/GRUB refreshes, a verified keyring and a host-failing guard.

Every operation here takes the fact snapshot its role read once at the top of the deploy
(`gpuctl.facts.*`) instead of reading facts itself, so a role's no-op run costs one
command per fact, not one per package or file. Each yields only the missing commands and
calls `host.noop(...)` with the reason when there is nothing to do, so a converged host
gets no commands. A command is built from an argv list and joined in one place, `sh()`
(`shlex.join`, in gpuctl.shellcmd, re-exported here with `pipe`/`and_then`); file
contents come from templates rendered by `template_env()`, whose
every interpolated value is refused if it holds a control character (a value can never
add a line to a file), and go to the host with file operations, never through a shell.

Why not `apt.packages`: it compares ``name=version`` against dpkg's version string and
reads its own fact per call; here the comparison is the same exact string (epoch
included, see `PackageSnapshot.has`) against one snapshot per role.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from io import StringIO

import jinja2
from pyinfra import host
from pyinfra.api import FileUploadCommand, FunctionCommand, operation
from pyinfra.api.operation import OperationMeta

from gpuctl.boundary import control_character
from gpuctl.components import defaults, merge_override, spec_knobs
from gpuctl.deploy_context import node_spec, run_options
from gpuctl.errors import InputError
from gpuctl.knobs import knob_problems
from gpuctl.matrix import Package
from gpuctl.parsers.boot import BootState
from gpuctl.parsers.files import FileState
from gpuctl.parsers.kernel import LoadedModule
from gpuctl.parsers.packages import PackageSnapshot, normalize_evr
from gpuctl.parsers.systemd import UnitState
from gpuctl.paths import templates_dir
from gpuctl.redact import holds_secret

# the one quoting place and its composers (re-exported: roles import them from here)
from gpuctl.shellcmd import OR_TRUE as OR_TRUE
from gpuctl.shellcmd import QUIET as QUIET
from gpuctl.shellcmd import and_then, pipe, sh
from gpuctl.shellcmd import or_else as or_else
from gpuctl.yamlsrc import parse_yaml

log = logging.getLogger(__name__)

APT_ENV = "DEBIAN_FRONTEND=noninteractive"
APT_INSTALL = (
    f"{APT_ENV} apt-get install -y -q --no-install-recommends --allow-downgrades --allow-change-held-packages"
    " -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
)
DNF_INSTALL = "dnf install -y --disableplugin=versionlock"


# ------------------------------------------------------------------ commands

def fstab_fields(*fields: object) -> str:
    """One /etc/fstab line from its fields; ValueError when a field is empty or holds a blank
    or control character (it would shift the fields or add a line)."""
    out = [str(f) for f in fields]
    for f in out:
        if not f or any(c.isspace() for c in f) or control_character(f):
            raise ValueError(f"refusing the fstab field {f!r}: empty, or holds a blank or control character")
    return " ".join(out)


# ------------------------------------------------------------------ templates

class UnsafeValue(ValueError):
    """A value holding a control character met a template: it would add a line to the file."""


_WHOLE = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?")


def whole_number(value: object, field: str) -> int:
    """A count or port knob's value as an int (a YAML number or a string of digits); anything else
    (a flag, text, a control character) is refused with `field` named, never int()'s bare ValueError."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        return int(value)
    raise UnsafeValue(f"refusing {field} = {value!r}: not a whole number")


def decimal_number(value: object, field: str) -> float:
    """A seconds (or other decimal) knob's value as a float, refused like `whole_number`."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        return float(value)
    raise UnsafeValue(f"refusing {field} = {value!r}: not a number")


def one_line_value(value: object) -> object:
    """A Jinja `finalize`: every interpolated string must hold no control character."""
    if isinstance(value, str):
        bad = control_character(value)
        if bad:
            raise UnsafeValue(f"refusing to write {value!r} into a file: it holds the control character {bad}")
    return value


def template_env(folder: str, *, trim: bool = True) -> jinja2.Environment:
    """The Jinja environment every node file is rendered with: templates/<folder>/,
    StrictUndefined, no autoescape (these are config files, not HTML) and a finalize that
    refuses any interpolated string holding a control character.

    One environment per folder and process, so each template is compiled once, not once per
    host and render (~1 ms each: 6-7 per host in a no-op provision, issue 18); Jinja still
    recompiles a template whose file changed."""
    return _template_env(str(templates_dir() / folder), trim)


@functools.cache
def _template_env(folder: str, trim: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=trim,
        lstrip_blocks=trim,
        autoescape=False,
        finalize=one_line_value,
    )
    env.filters["q"] = sh  # a word of a shell script template
    env.filters["word"] = shell_word  # a value a shell or systemd line takes as it is, or a refusal
    return env


_SHELL_WORD = re.compile(r"[A-Za-z0-9_.,:+@=/-]+")


def shell_word(value: object) -> str:
    """`value` when it is one word no shell or systemd line reads specially (letters, digits,
    `_ . , : + @ = / -`); UnsafeValue otherwise. For templates whose layout cannot take a
    quoted word (inside double quotes, a unit's ExecStart)."""
    text = str(value)
    if not _SHELL_WORD.fullmatch(text):
        raise UnsafeValue(f"refusing to write {text!r} into a script or unit: not a plain word")
    return text


def render(role: str, template: str, **values: object) -> str:
    """Render templates/<role>/<template> with StrictUndefined (a missing value is an error)."""
    return template_env(role).get_template(template).render(**values)


def read_template_file(role: str, name: str) -> str:
    """A file shipped under templates/<role>/ verbatim (no rendering)."""
    return (templates_dir() / role / name).read_text()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------ failing a host

def _refuse(host, reason: str) -> bool:
    lines = reason.splitlines() or [""]
    log = logging.getLogger("pyinfra").error
    for i, line in enumerate(lines):
        host.log_styled(f"refused: {line}" if i == 0 else line, fg="red", log_func=log)
    return False


# The two callbacks differ only in name: `gpuctl plan` prints it ("python: _fail"), and the plan
# of every example inventory is held unchanged (tests/deploy/test_plan_golden.py).
def _fail(state, host, reason: str) -> bool:  # pyinfra passes (state, host) by these names
    return _refuse(host, reason)


def _fail_now(state, host, reason: str) -> bool:
    return _refuse(host, reason)


def fail_commands(reason: str):
    """The commands that fail this host with `reason`, also from an operation that decides at
    execute time (`yield from fail_commands(...)`): on a real host the remote command's stderr
    carries the reason (so it reaches the run summary) and exits 1; the Python callback fails
    the host whatever the connector, and logs it."""
    yield sh("printf", "%s\\n", reason) + " >&2; exit 1"
    yield FunctionCommand(_fail_now, (reason,), {})


@operation(is_idempotent=False)
def fail_host(reason: str, remote: bool = False):
    """Fail this host (only) with `reason`; the other hosts carry on; changes nothing.

    Raising in a deploy at prepare time would stop every host, so a refusal is an
    operation whose command returns False when executed. `remote=True`: through
    `fail_commands`, so the reason is also the remote command's stderr.
    """
    if remote:
        yield from fail_commands(reason)
        return
    yield FunctionCommand(_fail, (reason,), {})


@operation()
def report(message: str):
    """Tell the operator something (a note, "not applicable on rxe0") without changing anything:
    plan and summary show it; nothing runs on the host."""
    host.noop(message)
    yield from ()


# ------------------------------------------------------------------ packages

@dataclass(frozen=True)
class Want:
    """A package to install: exact version, or any version (distro prerequisites)."""

    name: str
    version: str | None = None

    @classmethod
    def of(cls, item: Package | str | Want) -> Want:
        if isinstance(item, Want):
            return item
        if isinstance(item, Package):
            return cls(item.name, item.version)
        return cls(item)

    def satisfied(self, snap: PackageSnapshot) -> bool:
        if self.version is None:
            return self.name in snap.packages
        return snap.has(self.name, self.version)

    def argument(self, manager: str) -> str:
        if self.version is None:
            return self.name
        if manager == "dnf":
            return f"{self.name}-{self.version}"
        return f"{self.name}={self.version}"


def _wants(items: Iterable[Package | str | Want]) -> list[Want]:
    return [Want.of(i) for i in items]


def missing_packages(items: Iterable[Package | str | Want], snap: PackageSnapshot) -> list[Want]:
    return [w for w in _wants(items) if not w.satisfied(snap)]


@operation()
def install_packages(packages: Sequence[Package | str | Want], snapshot: PackageSnapshot, label: str = ""):
    """Install each package at exactly its version (apt: ``name=version``, dnf: ``name-[E:]V-R``)
    in one transaction; held/locked packages are allowed to move to the pinned version.

    + packages: `Package` (exact pin), a bare name (any version) or `Want`
    + snapshot: the role's `read_packages()` result
    + label: what the noop message calls this set ("NVIDIA driver 580.95.05")
    """
    todo = missing_packages(packages, snapshot)
    if not todo:
        host.noop(f"{label or 'packages'} already installed at the pinned versions")
        return
    args = sh(*(w.argument(snapshot.manager) for w in todo))
    if snapshot.manager == "dnf":
        yield f"{DNF_INSTALL} {args}"
        return
    if snapshot.interrupted:
        # A node that lost power or was killed mid-install: apt refuses everything until
        # dpkg has finished (or backed out) what it was doing.
        yield f"{APT_ENV} dpkg --force-confdef --force-confold --configure -a"
    pinned = [w.argument("apt") for w in todo if w.version is not None]
    if pinned:
        yield apt_index_guard(pinned)
    yield f"{APT_INSTALL} {args}"


def apt_index_guard(pinned: Sequence[str]) -> str:
    """One shell command: `apt-get update` unless apt's index already knows every
    ``name=version`` in `pinned`. Runs only when something is to be installed (a converged
    host never gets it); it catches a matrix moved to a release published after the node's
    last index refresh — the repository's source did not change, so nvidia_repo did not
    update, and apt would answer "Version … was not found"."""
    checks = sh(*pinned)
    return (f"for p in {checks}; do apt-cache show \"$p\" 2>/dev/null | grep -q '^Package:' || "
            f"{{ {APT_ENV} apt-get update -q; break; }}; done")


@operation()
def hold_packages(packages: Sequence[Package], snapshot: PackageSnapshot):
    """Hold packages at their pinned version: `apt-mark hold` (apt) or `dnf versionlock`
    (replacing a lock at another version). No-op for those already held."""
    pkgs = list(packages)
    if snapshot.manager == "dnf":
        todo = [p for p in pkgs if not snapshot.held(p.name, p.version)]
        if not todo:
            host.noop("already version-locked: " + ", ".join(p.name for p in pkgs))
            return
        stale = sorted({p.name for p in todo} & snapshot.locked_names())
        if stale:
            yield sh("dnf", "versionlock", "delete", *stale)
        yield sh("dnf", "versionlock", "add", *(f"{p.name}-{normalize_evr(p.version)}" for p in todo))
        return
    todo = [p for p in pkgs if not snapshot.held(p.name, p.version)]
    if not todo:
        host.noop("already held: " + ", ".join(p.name for p in pkgs))
        return
    yield sh("apt-mark", "hold", *(p.name for p in todo))


@operation(is_idempotent=False)
def apt_update():
    """`apt-get update` (callers gate it with `_if=` on the source/key/pin changes)."""
    yield f"{APT_ENV} apt-get update -q"


@operation(is_idempotent=False)
def dnf_makecache():
    yield "dnf makecache -y"


@operation()
def dnf_module_enable(module: str, stream: str, enabled_streams: dict[str, str]):
    """`dnf module enable module:stream` unless already enabled (from /etc/dnf/modules.d)."""
    if enabled_streams.get(module) == stream:
        host.noop(f"dnf module {module}:{stream} already enabled")
        return
    if module in enabled_streams:
        yield sh("dnf", "-y", "module", "reset", module)
    yield sh("dnf", "-y", "module", "enable", f"{module}:{stream}")


# ------------------------------------------------------------------ files

@operation()
def write_file(path: str, content: str | None, states: dict[str, FileState], mode: str = "644",
               skip_reason: str = ""):
    """Make `path` hold exactly `content` with `mode` (root-owned), or be absent if
    content is None. Content that holds a secret (`gpuctl.redact.holds_secret`: a mirror or
    proxy URL with a password, a token) makes the file root's alone: group and other bits of
    `mode` dropped (0644 -> 0600). Decided from the role's `FileStates` snapshot. A
    `skip_reason` makes it a reported no-op (the operation stays in every host's sequence)."""
    if skip_reason:
        host.noop(skip_reason)
        return
    if content is not None and holds_secret(content):
        mode = f"{int(mode, 8) & 0o700:o}"
    cur = states.get(path)
    if content is None:
        if cur is not None and cur.exists:
            yield sh("rm", "-f", path)
        else:
            host.noop(f"{path} already absent")
        return
    want = sha256_text(content)
    if cur is not None and cur.sha256 == want:
        if cur.mode != mode:
            yield sh("chmod", mode, path)
        else:
            host.noop(f"{path} already up to date")
        return
    parent = path.rsplit("/", 1)[0] or "/"
    yield sh("mkdir", "-p", parent)
    yield FileUploadCommand(StringIO(content), path, remote_temp_filename=host.get_temp_filename(path))
    yield f"{sh('chown', 'root:root', path)} && {sh('chmod', mode, path)}"


# ------------------------------------------------------------------ services

@operation()
def ensure_services(names: Sequence[str], states: dict[str, UnitState], enabled: bool = True,
                    running: bool = True):
    """`systemctl enable` / `start` each unit that is not already so (one command)."""
    to_enable = [n for n in names if enabled and states.get(n, UnitState(n, "", "", "", "")).enabled != "enabled"]
    to_start = [n for n in names if running and states.get(n, UnitState(n, "", "", "", "")).active != "active"]
    if not to_enable and not to_start:
        host.noop(", ".join(names) + " already enabled and running")
        return
    both = [n for n in to_enable if n in to_start]
    if both:
        yield sh("systemctl", "enable", "--now", *both)
    only_enable = [n for n in to_enable if n not in both]
    if only_enable:
        yield sh("systemctl", "enable", *only_enable)
    only_start = [n for n in to_start if n not in both]
    if only_start:
        yield sh("systemctl", "start", *only_start)


@operation(is_idempotent=False)
def restart_services(names: Sequence[str]):
    """Restart units (callers gate it with `_if=` on what changed)."""
    yield sh("systemctl", "restart", *names)


# ------------------------------------------------------------------ kernel

@operation()
def load_modules(names: Sequence[str], loaded: dict[str, LoadedModule]):
    """`modprobe` each module not in the `LoadedModules` snapshot (names as modprobe takes them)."""
    todo = [n for n in names if n.replace("-", "_") not in loaded]
    if not todo:
        host.noop(", ".join(names) + " already loaded")
        return
    for n in todo:
        yield sh("modprobe", n)


@operation(is_idempotent=False)
def refresh_initramfs(package_manager: str):
    """Rebuild the initramfs of every installed kernel (gate with `_if=` on the change)."""
    if package_manager == "dnf":
        yield "dracut -f --regenerate-all"
    else:
        yield "update-initramfs -u -k all"


@operation()
def refresh_grub(boot: BootState):
    """`update-grub` on Debian/Ubuntu GRUB hosts (gate with `_if=` on the drop-in change).

    Hosts that do not boot through GRUB get a noop saying so; nothing is pretended.
    """
    if boot.grub != "debian":
        host.noop("not applicable: host does not boot through GRUB" if boot.grub is None
                  else f"GRUB flavour {boot.grub} is configured with grubby")
        return
    yield "update-grub"


@operation()
def grubby_args(args: Sequence[str], boot: BootState):
    """RHEL: add kernel arguments to every GRUB entry with grubby, unless the default
    entry already carries them all."""
    if boot.grub != "rhel":
        host.noop("not applicable: host does not boot through GRUB" if boot.grub is None
                  else f"GRUB flavour {boot.grub} is configured with a drop-in")
        return
    have = set(boot.default_args.split())
    todo = [a for a in args if a not in have]
    if not todo:
        host.noop("kernel command line already has " + " ".join(args))
        return
    yield sh("grubby", "--update-kernel=ALL") + " --args=" + sh(" ".join(todo))


@operation(is_idempotent=False)
def sysctl_apply(path: str):
    """Load one sysctl drop-in now (gate with `_if=` on the file's change)."""
    yield sh("sysctl", "-q", "-p", path)


# ------------------------------------------------------------------ downloads

@operation()
def fetch_verified(url: str, dest: str, sha256: str, states: dict[str, FileState], proxy: str | None = None):
    """Download `url` to `dest` only if `dest` does not already have `sha256`; the download
    goes to a temporary file, is checked with `sha256sum -c` and only then moved in place."""
    cur = states.get(dest)
    if cur is not None and cur.sha256 == sha256:
        host.noop(f"{dest} already present with sha256 {sha256[:12]}…")
        return
    tmp = dest + ".gpuctl-download"
    proxy_arg = ["--proxy", proxy] if proxy else []
    parent = dest.rsplit("/", 1)[0] or "/"
    fetch = and_then(sh("mkdir", "-p", parent), sh("curl", "-fsSL", *proxy_arg, "-o", tmp, url),
                     pipe(sh("echo", f"{sha256}  {tmp}"), sh("sha256sum", "-c", "--quiet")), sh("mv", tmp, dest))
    yield f"{fetch} || {{ {sh('rm', '-f', tmp)}; exit 1; }}"


@operation()
def dearmor_keyring(armored: str, keyring: str, armored_sha256: str, keyring_matches: bool):
    """Write `keyring` (binary OpenPGP) from the verified `armored` key unless it already
    matches it. `keyring_matches` comes from `nvidia_repo`'s keyring fact; the sha256 is
    re-checked right before gpg reads the file."""
    if keyring_matches:
        host.noop(f"{keyring} already holds the verified key")
        return
    a = sh(armored)
    check = pipe(sh("echo", f"{armored_sha256}  {armored}"), sh("sha256sum", "-c", "--quiet"))
    yield (f"{check} && if {sh('grep', '-q', 'BEGIN PGP PUBLIC KEY BLOCK', armored)};"
           f" then {sh('gpg', '--dearmor', '--yes', '-o', keyring)} < {a};"
           f" else {sh('cp', armored, keyring)}; fi && {sh('chmod', '644', keyring)}")


# ------------------------------------------------------------------ role knobs

def role_knobs(role: str) -> dict[str, object]:
    """roles/<role>/defaults.yaml, each key overridable per host.

    Every knob is prefixed with the role's component name. An override comes from the
    host's pyinfra data (same key), else from `RunOptions.extra` (a YAML scalar/list in a
    string, e.g. ``{"nvidia_driver_reboot_delay_s": "0"}``), else from the inventory's
    `role_vars`. A per-OS / per-filesystem map override changes only the entries it names.
    The inventory's values were judged at load (file:line, exit 2); host data and --extra
    values are judged here by the same typed rule (`gpuctl.knobs.knob_problems`), and a
    value it refuses raises InputError (the host fails before any command).
    """
    data = defaults(role)
    extra = run_options().extra
    out: dict[str, object] = {}
    for key, value in data.items():
        override = host.data.get(key)
        if override is None and key in extra:
            override = parse_yaml(extra[key], f"--var {key}")[0]
        if override is not None and key in spec_knobs():
            raise InputError(f"{key}: names what install, verify and the lock read from the NodeSpec; set it in the "
                             "inventory's role_vars, not in host data or --extra (refused)")
        if override is not None:
            bad = knob_problems(key, override)
            if bad:
                sub, message = bad[0]
                where = ".".join([key, *map(str, sub)])
                raise InputError(f"{where}: {message} (from host data or --extra; refused)")
        if override is None:
            override = node_spec().role_vars.get(key)
        out[key] = value if override is None else merge_override(value, override)
    return out


# ------------------------------------------------------------------ role helper

def install_and_hold(label: str, packages: Sequence[Package], snapshot: PackageSnapshot) -> OperationMeta:
    """The common pair: install `packages` at their pins, then hold them.
    Returns the install operation's meta (for `_if=install.did_change`)."""
    installed = install_packages(name=f"Install {label}", packages=list(packages), snapshot=snapshot, label=label)
    hold_packages(name=f"Hold {label}", packages=list(packages), snapshot=snapshot)
    return installed
