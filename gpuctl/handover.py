"""Handover: the customer's admin accounts, and the provider's key taken away safely.

`plan_handover(loaded)` turns the inventory's `handover:` block into a `HandoverPlan`
(validated public keys, rendered authorized_keys and sudoers files, the provider's
public key); `handover(loaded)` runs `roles/handover` on the nodes with it.

Never locking everyone out:
- removing the provider key needs at least one customer account with sudo and keys
  (InputError otherwise), and a provider key that is not also one of the customer's;
- in the same run, before the removal, a login probe proves that the first sudo
  account can log in over SSH with key authentication and run `sudo -n true`: a
  throw-away key pair is made on this machine, its public half added to the account
  (marked, `restrict`), an SSH login made from here, the probe key removed again, and
  only then — if the login worked — the provider key is removed; a failed probe fails
  the host and every later operation (the removal) is skipped;
- the private probe key lives in a 0700 temporary folder and is deleted afterwards;
  no private key is ever read into a log or the run record.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl.errors import ExecutionError, InputError
from gpuctl.fileio import read_text
from gpuctl.inventory import LoadedInventory
from gpuctl.pubkey import key_blob, parse_public_key
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve

log = logging.getLogger(__name__)

PROBE_MARK = "gpuctl-login-probe"
LOGIN_OK = "gpuctl-login-ok"

# (address, port, user) -> (ok, detail)
LoginCheck = Callable[[str, int, str], tuple[bool, str]]


def render(template: str, **values: Any) -> str:
    """templates/handover/<template> with StrictUndefined."""
    from gpuctl.operations import render as render_template

    return render_template("handover", template, **values)


@dataclass(frozen=True)
class AccountPlan:
    name: str
    keys: tuple[str, ...]
    sudo: bool
    home: str

    def authorized_keys(self) -> str:
        return render("authorized_keys.j2", user=self.name, keys=list(self.keys))

    def sudoers(self, rule: str) -> str:
        return render("sudoers.j2", user=self.name, rule=rule)


@dataclass(frozen=True)
class HandoverPlan:
    """Everything the handover role needs (passed as its deploy argument)."""

    accounts: tuple[AccountPlan, ...]
    remove_provider_key: bool = False
    provider_public_key: str | None = None
    provider_user: str = "root"
    provider_authorized_keys: str = "/root/.ssh/authorized_keys"
    probe_account: str | None = None
    probe_public_key: str | None = None
    login_check: LoginCheck | None = field(default=None, compare=False)


def home_of(user: str) -> str:
    return "/root" if user == "root" else f"/home/{user}"


def provider_public_key(loaded: LoadedInventory) -> str:
    """The public half of the inventory's `ssh.key`: `<key>.pub`, else `ssh-keygen -y`."""
    from gpuctl.runner.inventory import SshSettings

    key = SshSettings.from_loaded(loaded).key
    if not key:
        raise InputError("handover.remove_provider_key: the inventory names no ssh.key whose public half to remove")
    pub = Path(key + ".pub")
    if pub.is_file():
        return parse_public_key(read_text(pub, what="public key file"), str(pub))
    if not Path(key).is_file():
        raise InputError(f"handover.remove_provider_key: {key} not found")
    proc = subprocess.run(["ssh-keygen", "-y", "-f", key], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)
    if proc.returncode != 0:
        raise InputError(f"handover.remove_provider_key: no {pub} and `ssh-keygen -y -f {key}` failed "
                         "(a passphrase-protected key needs its .pub beside it)")
    return parse_public_key(proc.stdout, f"ssh-keygen -y -f {key}")


def plan_handover(loaded: LoadedInventory, *, provider_key: str | None = None,
                  probe_public_key: str | None = None, login_check: LoginCheck | None = None) -> HandoverPlan:
    """Validate the handover block and build the plan. `provider_key` overrides reading
    the key file (tests); the probe key and check are added by `handover()`."""
    h = loaded.inventory.handover
    problems: list[str] = []
    accounts = []
    ssh_user = loaded.inventory.ssh.user
    for i, a in enumerate(h.accounts):
        keys = []
        for j, k in enumerate(a.ssh_keys):
            try:
                keys.append(parse_public_key(k, f"handover.accounts[{i}].ssh_keys[{j}]"))
            except InputError as exc:
                problems.append(str(exc))
        if a.name == "root":
            problems.append(f"handover.accounts[{i}]: root is not a customer account")
        accounts.append(AccountPlan(a.name, tuple(keys), a.sudo, home_of(a.name)))
    names = [a.name for a in accounts]
    if len(set(names)) != len(names):
        problems.append("handover.accounts: an account name is listed twice")
    pub = None
    probe_account = None
    if h.remove_provider_key:
        admins = [a for a in accounts if a.sudo and a.keys]
        if not admins:
            problems.append("handover.remove_provider_key needs at least one account with sudo: true and a key; "
                            "removing the provider key would lock everyone out")
        else:
            probe_account = admins[0].name
        try:
            pub = parse_public_key(provider_key, "provider key") if provider_key else provider_public_key(loaded)
        except InputError as exc:
            problems.append(str(exc))
        if pub and any(key_blob(pub) == key_blob(k) for a in accounts for k in a.keys):
            problems.append("handover: the provider's key is also listed as a customer key; removing it would "
                            "remove the customer's access too")
    if problems:
        raise InputError(f"{loaded.path}: handover cannot run", problems)
    return HandoverPlan(
        accounts=tuple(accounts), remove_provider_key=h.remove_provider_key, provider_public_key=pub,
        provider_user=ssh_user, provider_authorized_keys=f"{home_of(ssh_user)}/.ssh/authorized_keys",
        probe_account=probe_account, probe_public_key=probe_public_key, login_check=login_check,
    )


# ------------------------------------------------------------------ login probe


def make_probe_key(folder: Path) -> tuple[Path, str]:
    """A throw-away ed25519 key pair in `folder` (0700): (private key path, public key line)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    key = folder / "probe"
    proc = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", PROBE_MARK, "-f", str(key)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    if proc.returncode != 0:
        raise ExecutionError(f"ssh-keygen could not make the login probe key: {proc.stderr.strip()}")
    public = " ".join(Path(str(key) + ".pub").read_text().split()[:2])
    return key, public


def ssh_login_check(loaded: LoadedInventory, probe_key: Path, command: str = f"sudo -n true && echo {LOGIN_OK}",
                    timeout_s: float = 30) -> LoginCheck:
    """A LoginCheck that logs in from this machine as the account with the probe key."""
    from gpuctl.bench.remote import SshTarget, run
    from gpuctl.runner.inventory import SshSettings

    ssh = SshSettings.from_loaded(loaded)

    def check(address: str, port: int, user: str) -> tuple[bool, str]:
        target = SshTarget(name=f"{user}@{address}:{port}", address=address, port=port, user=user,
                           key=str(probe_key), known_hosts=ssh.known_hosts, strict_host_keys=ssh.strict_host_keys,
                           connect_timeout_s=ssh.connect_timeout_s)
        res = run(target, command, timeout_s)
        if LOGIN_OK in res.stdout:
            return True, f"{user} logged in over SSH with key authentication and ran sudo -n true"
        detail = (res.stderr.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
        return False, f"{user} could not log in or use sudo: {detail}"

    return check


# ----------------------------------------------------------------------- command


@dataclass
class HandoverOutcome:
    plan: HandoverPlan
    run: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.run.get("status") == "ok"

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.ok else "failed",
            "accounts": [{"name": a.name, "sudo": a.sudo, "keys": len(a.keys)} for a in self.plan.accounts],
            "remove_provider_key": self.plan.remove_provider_key,
            "login_probe_account": self.plan.probe_account,
            "run": self.run,
        }


def handover(loaded: LoadedInventory, limit: Sequence[str] = (), record: RunRecord | None = None,
             *, login_check: LoginCheck | None = None) -> HandoverOutcome:
    """Run roles/handover on the selected nodes (accounts, keys, sudo, provider key)."""
    from gpuctl.rolerun import load_delivery_role, run_deploy

    specs = resolve(loaded, tuple(limit))
    if not loaded.inventory.handover.accounts:
        raise InputError(f"{loaded.path}: handover.accounts is empty; nothing to hand over")
    tmp = Path(tempfile.mkdtemp(prefix="gpuctl-handover-"))
    try:
        plan = plan_handover(loaded)
        if plan.remove_provider_key:
            key, public = make_probe_key(tmp)
            plan = HandoverPlan(**{**plan.__dict__, "probe_public_key": public,
                                   "login_check": login_check or ssh_login_check(loaded, key)})
        role = load_delivery_role("handover")
        res = run_deploy(loaded, specs, role.install, command="handover", kwargs={"plan": plan}, record=record)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = HandoverOutcome(plan, res.as_dict())
    if record is not None:
        record.stage("handover", out.as_dict())
    return out
