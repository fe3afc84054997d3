"""Ephemeral SSH trust for the multi-node MPI run: one key per run, gone afterwards.

Open MPI's mpirun starts its daemons on the other nodes over SSH from the head node (the
first live one), and nothing else lets the nodes log in to one another. For the run only:

1. the controller makes a fresh ed25519 keypair (`ssh-keygen` in a private temporary
   folder, read into memory and the folder removed at once — `generate_key`);
2. the head node gets the private key on stdin into `<scratch>/<run>/mpi-ssh-<random>/`
   (0700 folder, 0600 file, refusing a folder that exists) and reports the addresses its
   SSH connections to the hostfile hosts come from (`head_setup_script`);
3. every live node appends one line to `~/.ssh/authorized_keys` of the SSH user gpuctl
   logs in as (`authorize_script`): `restrict,from="<hostfile addresses and the head's
   source addresses>",expiry-time="<node-local time after the run's budget>"`, the public
   key and the marker comment `gpuctl-bench-<run id>`;
4. mpirun uses it through `plm_rsh_args` (`rsh_args`): that key only, batch mode, a
   known_hosts file of the run's own; daemons are launched from the head only (no tree
   spawn), so no other node ever needs the private key;
5. afterwards, whatever happened (`revoke_script`, run from a `finally`): the exact line is
   removed with `sed -i` (other lines untouched, the file's mode kept; a file gpuctl created
   is removed again if nothing else was added), and the head's key folder is deleted.

The private key travels only as stdin: no script text, log line or run record holds it
(and `gpuctl.runrecord.redact` removes any PEM/OpenSSH private key block as a second line
of defence). The `restrict`, `from=` and `expiry-time=` options need OpenSSH ≥ 7.7 on the
nodes (every supported OS ships 8.0 or later).
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuctl.bench import suites
from gpuctl.errors import ExecutionError
from gpuctl.shellcmd import sh

MARKER_PREFIX = "gpuctl-bench-"
KEY_NAME = "id_ed25519"
#: How long the authorized_keys line stays valid beyond the run's own budget, should
#: the cleanup never run (the controller killed, a node lost): the setup steps, the
#: connection timeouts and the cleanup itself.
EXPIRY_MARGIN_S = 600
FROM_PREFIX = "gpuctl-from "
CREATED_PREFIX = "gpuctl-created "
#: The login user's authorized_keys, as the node's shell names it (sshd's default file).
AUTHORIZED_KEYS = '"$HOME/.ssh/authorized_keys"'
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class TrustError(ExecutionError):
    """The run's key could not be made on the controller."""


@dataclass(frozen=True)
class RunKey:
    """One run's keypair and where the head node keeps it. `private` never goes into a
    script, a log or a record. `token` (random) keeps two runs with the same id apart."""

    run_id: str
    token: str
    public: str  # "ssh-ed25519 AAAA… gpuctl-bench-<run>"
    private: str = field(repr=False)

    @property
    def marker(self) -> str:
        return marker(self.run_id)

    @property
    def key_type(self) -> str:
        return self.public.split()[0]

    @property
    def blob(self) -> str:
        return self.public.split()[1]

    @property
    def key_dir(self) -> str:
        """The head node's folder for the private key and the run's known_hosts."""
        return f"{suites.SCRATCH}/{_SAFE.sub('_', self.run_id)}/mpi-ssh-{self.token}"

    @property
    def key_path(self) -> str:
        return f"{self.key_dir}/{KEY_NAME}"

    @property
    def known_hosts_path(self) -> str:
        return f"{self.key_dir}/known_hosts"


def marker(run_id: str) -> str:
    """The comment that names the run on every authorized_keys line it adds."""
    return MARKER_PREFIX + _SAFE.sub("_", run_id)


def generate_key(run_id: str, keygen: str = "ssh-keygen") -> RunKey:
    """A fresh ed25519 keypair made on the controller. The files live in a 0700 temporary
    folder only while ssh-keygen writes them and are removed before this returns."""
    tmp = Path(tempfile.mkdtemp(prefix="gpuctl-mpi-ssh-"))  # mode 0700
    try:
        path = tmp / KEY_NAME
        try:
            proc = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", marker(run_id), "-f", str(path)],
                                  capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TrustError(f"cannot run {keygen}: {exc}") from exc
        if proc.returncode != 0 or not path.is_file():
            reason = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            raise TrustError(f"{keygen} failed: {reason}")
        path.chmod(0o600)
        return RunKey(run_id, secrets.token_hex(4), path.with_suffix(".pub").read_text().strip(), path.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rsh_args(key: RunKey) -> str:
    """Open MPI's `plm_rsh_args`: the run's key only, no prompts, the run's known_hosts.
    Open MPI splits the value on blanks, so the paths must have none (they cannot)."""
    return (f"-i {key.key_path} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=accept-new "
            f"-o UserKnownHostsFile={key.known_hosts_path} -o ConnectTimeout=10 -o LogLevel=ERROR")


def head_setup_script(key: RunKey, hosts: Sequence[str]) -> str:
    """On the head node: the private key (stdin) into a new 0700 folder (refused if the
    folder exists), then one `gpuctl-from ADDRESS` line per address the head's connections
    to `hosts` come from (each host's address and the route's source address)."""
    d, path = sh(key.key_dir), sh(key.key_path)
    lines = [
        suites.preamble() + f"mkdir -p {sh(str(Path(key.key_dir).parent))}",
        "umask 077",
        f"mkdir -m 700 {d} || {{ echo \"gpuctl: {key.key_dir} exists; not touching it\" >&2; "
        f"exit {suites.EXIT_SCRATCH_EXISTS}; }}",
        f"(set -C; cat > {path}) || exit 1",
        f"chmod 600 {path}",
        f"test -s {path} || {{ echo 'gpuctl: no key arrived on stdin' >&2; exit 1; }}",
    ]
    for host in hosts:
        h = sh(host)
        lines.append(f"a=$(getent ahosts {h} | awk 'NR==1 {{print $1}}'); "
                     f"if [ -n \"$a\" ]; then echo \"{FROM_PREFIX}$a\"; "
                     f"ip -o route get \"$a\" 2>/dev/null | sed -n 's/.* src \\([^ ]*\\).*/{FROM_PREFIX}\\1/p'; fi")
    return "\n".join(lines) + "\n"


def from_addresses(hosts: Iterable[str], head_output: str) -> list[str]:
    """The `from=` list: every IP literal among the hostfile hosts and the head's
    `gpuctl-from` lines (source addresses, resolved names), sorted, no duplicates."""
    found = list(hosts) + [line[len(FROM_PREFIX):].strip() for line in head_output.splitlines()
                           if line.startswith(FROM_PREFIX)]
    out: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for text in found:
        try:
            out.add(ipaddress.ip_address(text))
        except ValueError:
            continue  # a name: sshd matches names only with UseDNS, so names are left out
    return [str(a) for a in sorted(out, key=lambda a: (a.version, int(a)))]


def authorized_line(key: RunKey, addresses: Sequence[str], expiry: str = "$until") -> str:
    """The line added to authorized_keys (`expiry` is filled in on the node)."""
    opts = ["restrict"]
    if addresses:
        opts.append(f'from="{",".join(addresses)}"')
    opts.append(f'expiry-time="{expiry}"')
    return f"{','.join(opts)} {key.key_type} {key.blob} {key.marker}"


def authorize_script(key: RunKey, addresses: Sequence[str], valid_s: int) -> str:
    """On every node: append the run's line to the login user's ~/.ssh/authorized_keys
    (creating ~/.ssh 0700 and the file 0600 if missing; `gpuctl-created PATH` says so).
    The expiry is the node's own local time + `valid_s` (sshd reads it in local time)."""
    f = AUTHORIZED_KEYS
    line = authorized_line(key, addresses)
    if any(c in line for c in "\\`\n"):
        raise ValueError("unexpected characters in the authorized_keys line")
    return (
        suites.preamble() + "umask 077\n"
        '[ -n "${HOME:-}" ] && [ -d "$HOME" ] || { echo "gpuctl: no home folder for $(id -un)" >&2; exit 1; }\n'
        'mkdir -p "$HOME/.ssh" || exit 1\n'
        f'if [ ! -e {f} ]; then : > {f} || exit 1; echo "{CREATED_PREFIX}$HOME/.ssh/authorized_keys"; fi\n'
        f"until=$(env -u TZ date -d '+{int(valid_s)} seconds' +%Y%m%d%H%M%S) || "
        "{ echo 'gpuctl: GNU date is needed for the key expiry' >&2; exit 1; }\n"
        # a last line without its newline would be joined to ours
        f'if [ -s {f} ] && [ -n "$(tail -c 1 {f})" ]; then echo >> {f} || exit 1; fi\n'
        f'printf \'%s\\n\' "{line.replace(chr(34), chr(92) + chr(34))}" >> {f} || exit 1\n'
        f"grep -q -F -e {sh(_needle(key))} {f} || "
        "{ echo 'gpuctl: the key line did not reach authorized_keys' >&2; exit 1; }\n"
    )


def _needle(key: RunKey) -> str:
    return f" {key.key_type} {key.blob} {key.marker}"


def _bre(text: str, delim: str) -> str:
    """`text` as a literal in a sed basic regular expression delimited by `delim`."""
    return re.sub(r"([\\.*\[\]^$" + re.escape(delim) + "])", r"\\\1", text)


def revoke_script(key: RunKey, remove_if_created: bool = False, head: bool = False) -> str:
    """Remove the run's line (by its key and marker, nothing else) from authorized_keys,
    keeping the file's other lines and mode; remove the file if gpuctl created it and it
    is empty again; on the head, also delete the key folder. Exit 1 if the line
    is still there."""
    f = AUTHORIZED_KEYS
    pattern = sh("\\#" + _bre(_needle(key), "#") + "$#d")
    out = [
        suites.preamble().rstrip("\n"),
        f"if [ -f {f} ]; then sed -i --follow-symlinks -e {pattern} {f} || exit 1; fi",
    ]
    if remove_if_created:
        out.append(f"if [ -f {f} ] && [ ! -s {f} ]; then rm -f {f}; fi")
    if head:
        out.append(sh("rm", "-rf", "--", key.key_dir))
    out.append(f"if [ -f {f} ] && grep -q -F -e {sh(_needle(key))} {f}; then "
               "echo 'gpuctl: the key line is still in authorized_keys' >&2; exit 1; fi")
    return "\n".join(out) + "\n"


def created(output: str) -> bool:
    """Whether an `authorize_script` run created authorized_keys."""
    return any(line.startswith(CREATED_PREFIX) for line in output.splitlines())
