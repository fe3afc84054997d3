"""handover: the customer's admin accounts, their keys and sudo; the provider key removed last.

Input: a `gpuctl.handover.HandoverPlan` (deploy argument `plan`), built from the
inventory's `handover:` block by `gpuctl.handover.plan_handover`.

Per account: the user (home, shell), ~/.ssh (0700) and authorized_keys (0600) holding
exactly the inventory's keys, and /etc/sudoers.d/gpuctl-<user> (0440) — uploaded under
a name sudo ignores, checked with `visudo -cf`, then moved into place (a bad rule never
reaches sudo) — or no such file for `sudo: false`.

With `remove_provider_key`: a login probe proves the first sudo account can log in over
SSH and use sudo (probe key added, login from the control machine, probe key removed,
host failed when the login did not work); only then is the provider key's line removed
from the SSH user's authorized_keys. A failed host runs no further operation, and the
removal is also gated on the probe's recorded result.
"""

from __future__ import annotations

import hashlib
import logging
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, FunctionCommand, deploy, operation
from pyinfra.facts.files import Sha256File
from pyinfra.facts.server import Command
from pyinfra.operations import files, server

from gpuctl.deploy_context import node_spec
from gpuctl.handover import LOGIN_OK, PROBE_MARK, HandoverPlan
from gpuctl.operations import OR_TRUE, QUIET, role_knobs, sh
from gpuctl.pubkey import key_blob

log = logging.getLogger(__name__)



def knobs() -> dict[str, Any]:
    """defaults.yaml, each key overridable (host data > --extra > inventory role_vars)."""
    return role_knobs("handover")


@operation()
def sudoers_file(path: str, content: str, current_sha256: str | None):
    """Put a sudoers drop-in in place only after `visudo -cf` accepts it."""
    if current_sha256 == hashlib.sha256(content.encode()).hexdigest():
        host.noop(f"{path} is up to date")
        return
    folder, name = path.rsplit("/", 1)
    tmp = f"{folder}/.{name}.gpuctl-new"  # sudo skips names with a '.'
    q, qt = sh(path), sh(tmp)
    yield FileUploadCommand(StringIO(content), tmp)
    yield (f"chown root:root {qt} && chmod 0440 {qt} && visudo -cf {qt} && mv -f {qt} {q}"
           f" || {{ rm -f {qt}; echo {sh(f'visudo rejected the sudoers rule for {name}')} >&2; exit 1; }}")


@operation(is_idempotent=False)
def prove_login(account: str, home: str, probe_public_key: str, address: str, port: int,
                check: Any, outcome: dict[str, Any]):
    """Add the probe key to `account`, log in as it from the control machine, remove the
    probe key again, then fail this host unless the login worked."""
    ak = sh(f"{home}/.ssh/authorized_keys")
    line = f"restrict {probe_public_key} {PROBE_MARK}"
    yield sh("printf", "%s\\n", line) + " >> " + ak

    def _probe(state: Any, host: Any) -> bool:  # pyinfra passes state, host by name
        try:
            outcome["result"] = check(address, port, account) if check else (False, "no login check configured")
        except Exception as exc:  # the cleanup below must still run
            outcome["result"] = (False, f"login probe raised {type(exc).__name__}: {exc}")
        return True

    yield FunctionCommand(_probe, (), {})
    yield f"sed -i '/ {PROBE_MARK}$/d' {ak}"

    def _judge(state: Any, host: Any) -> bool:
        ok, detail = outcome.get("result", (False, "login probe did not run"))
        (log.info if ok else log.error)("%s: %s", host.name, detail)
        if not ok:
            host.log_styled(f"refused to remove the provider key: {detail}", fg="red",
                             log_func=logging.getLogger("pyinfra").error)
        return bool(ok)

    yield FunctionCommand(_judge, (), {})


@operation()
def remove_authorized_key(path: str, blob: str, present: bool):
    """Remove every line holding key `blob` from `path` (keeping owner and mode)."""
    if not present:
        host.noop(f"the provider key is not in {path}")
        return
    q, tmp, b = sh(path), sh(path + ".gpuctl-tmp"), sh(blob)
    yield f"{{ grep -vF -- {b} {q} || true; }} > {tmp} && cat {tmp} > {q} && rm -f {tmp}"


@deploy("handover")
def install(plan: HandoverPlan) -> None:
    spec = node_spec()
    k = knobs()
    sudo_dir, prefix = str(k["handover_sudoers_dir"]), str(k["handover_sudoers_prefix"])
    groups = list(k["handover_groups"] or [])
    for a in plan.accounts:
        server.user(name=f"Create customer account {a.name}", user=a.name, home=a.home,
                    shell=str(k["handover_shell"]), create_home=True, ensure_home=True,
                    groups=groups or None, append=bool(groups))
        files.directory(name=f"Create {a.home}/.ssh for {a.name}", path=f"{a.home}/.ssh", user=a.name,
                        group=a.name, mode="700")
        files.put(name=f"Install {len(a.keys)} public key(s) of {a.name}", src=StringIO(a.authorized_keys()),
                  dest=f"{a.home}/.ssh/authorized_keys", user=a.name, group=a.name, mode="600")
        path = f"{sudo_dir}/{prefix}{a.name}"
        if a.sudo:
            current = host.get_fact(Sha256File, path=path)
            sudoers_file(name=f"Give {a.name} sudo ({path}, checked with visudo)", path=path,
                         content=a.sudoers(str(k["handover_sudo_rule"])), current_sha256=current)
        else:
            files.file(name=f"No sudo for {a.name} (remove {path})", path=path, present=False)

    if not plan.remove_provider_key:
        return
    if not (plan.provider_public_key and plan.probe_account and plan.probe_public_key):
        raise RuntimeError("handover plan: removing the provider key needs the provider key, a probe account "
                           "and a probe key (gpuctl.handover.handover builds them)")
    probe = next(a for a in plan.accounts if a.name == plan.probe_account)
    blob = key_blob(plan.provider_public_key)
    count = host.get_fact(Command, command=sh("grep", "-cF", "--", blob, plan.provider_authorized_keys)
                          + QUIET + OR_TRUE)
    present = str(count or "0").strip() not in ("", "0")
    outcome: dict[str, Any] = {}
    # every host gets the same operations (pyinfra matches them by position): gate with _if
    prove_login(name=f"Prove {probe.name} can log in over SSH and use sudo before removing the provider key",
                account=probe.name, home=probe.home, probe_public_key=plan.probe_public_key,
                address=spec.address, port=spec.ssh_port, check=plan.login_check, outcome=outcome,
                _if=lambda: present)
    remove_authorized_key(name=f"Remove the provider key from {plan.provider_authorized_keys}",
                          path=plan.provider_authorized_keys, blob=blob, present=present,
                          _if=lambda: bool(outcome.get("result", (False,))[0]))

__all__ = ["LOGIN_OK", "install"]
