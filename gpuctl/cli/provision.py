"""`gpuctl plan` and `gpuctl provision`: the CLI over gpuctl.runner.run.

Both validate the inventory and its matrix first (nothing is touched when that fails),
then drive pyinfra over SSH. gevent is monkey-patched at the start of each command,
before the runner (pyinfra, paramiko) is imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gpuctl.cli.common import console, emit_json, handle_errors, json_option, limit_option, on_terminal
from gpuctl.errors import ExitCode, InputError
from gpuctl.redact import redact

ROLES_HELP = "Comma-separated roles (repeatable); see ROLE_ORDER in gpuctl.spec."


def _roles_options(func):  # type: ignore[no-untyped-def]
    func = click.option("--skip", "skip", multiple=True, metavar="ROLES", help=f"Skip these roles. {ROLES_HELP}")(func)
    func = click.option("--only", "only", multiple=True, metavar="ROLES",
                        help=f"Run only these roles. {ROLES_HELP}")(func)
    return func


def _finish(summary, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    out = console()
    if not out.is_terminal:
        out.width = max(out.width, 160)  # logs and CI: keep one row per host
    code = summary.exit_code()
    if as_json:
        emit_json(summary.to_json())
    else:
        for line in summary.skipped_roles_lines():
            out.print(f"role {line}", markup=False, highlight=False)
        if summary.dry:
            _print_changes(summary)
        out.print(summary.table())
        if summary.verify is not None:
            out.print(f"verification: {summary.verify.get('status', 'recorded')} (run {summary.run_id})",
                      markup=False)
        out.print(f"run record: {summary.run_id}", markup=False, highlight=False)
    if code == ExitCode.EXECUTION:
        click.echo("error: no host could be reached or prepared; nothing was changed "
                   "(per-host reasons above; details in the run record)", err=True)
    sys.exit(int(code))


def _print_changes(summary) -> None:  # type: ignore[no-untyped-def]
    """Per host, the operations that would change (hosts with the same list grouped)."""
    out = console()
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for node, h in summary.hosts.items():
        if h.status != "ok":
            continue
        key = tuple((o.status, o.name) for o in h.ops if o.status in ("will change", "may change"))
        groups.setdefault(key, []).append(node)
    for key, nodes in groups.items():
        head = ", ".join(nodes)
        if not key:
            out.print(f"{head}: no changes", markup=False, highlight=False)
            continue
        out.print(f"{head}: {len(key)} operation(s) would change", markup=False, highlight=False)
        for status, name in key:
            mark = "~" if status == "may change" else "+"
            out.print(f"  {mark} {redact(name)}" + (" (decided at run time)" if mark == "~" else ""),
                      markup=False, highlight=False)


def _request(inventory: str, limit, only, skip, **kw):  # type: ignore[no-untyped-def]
    from gpuctl.runner.run import RunRequest

    return RunRequest(inventory=Path(inventory), limit=tuple(limit), only=tuple(only), skip=tuple(skip), **kw)


def register(main: click.Group) -> None:
    @main.command("plan")
    @click.argument("inventory", type=click.Path(dir_okay=False))
    @limit_option
    @_roles_options
    @click.option("--parallel", type=int, default=0, show_default=True, help="Hosts at once (0: automatic).")
    @click.option("--strict-host-keys", is_flag=True, help="Require host keys already in known_hosts.")
    @json_option
    @handle_errors
    def plan_cmd(inventory: str, limit: tuple[str, ...], only: tuple[str, ...], skip: tuple[str, ...],
                 parallel: int, strict_host_keys: bool, as_json: bool) -> None:
        """Show per host what provision would change; touch nothing.

        Validates the inventory and matrix, connects, gathers facts and runs pyinfra's
        change detection (a dry run). Exit 0 all hosts planned, 1 some host failed,
        3 no host could be reached.
        """
        from gpuctl.runner.bootstrap import ensure_patched

        ensure_patched()
        from gpuctl.runner.run import execute

        req = _request(inventory, limit, only, skip, parallel=parallel, strict_host_keys=strict_host_keys,
                       as_json=as_json)
        summary = execute(req, dry=True, console=console(stderr=True))
        _finish(summary, as_json)

    @main.command("provision")
    @click.argument("inventory", type=click.Path(dir_okay=False))
    @limit_option
    @_roles_options
    @click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (required when not on a TTY).")
    @click.option("--parallel", type=int, default=0, show_default=True, help="Hosts at once (0: automatic).")
    @click.option("--max-unavailable", type=int, default=None, metavar="N",
                  help="Most nodes rebooting at once (default: max(1, 10% of the nodes)).")
    @click.option("--reboot-timeout", "reboot_timeout_s", type=int, default=600, show_default=True,
                  help="Seconds a rebooting node may take to come back.")
    @click.option("--allow-wipe", is_flag=True, help="Allow roles to destroy data (e.g. re-create RAID).")
    @click.option("--strict-host-keys", is_flag=True, help="Require host keys already in known_hosts.")
    @click.option("--no-verify", is_flag=True, help="Do not run verification afterwards.")
    @json_option
    @handle_errors
    def provision_cmd(inventory: str, limit: tuple[str, ...], only: tuple[str, ...], skip: tuple[str, ...],
                      yes: bool, parallel: int, max_unavailable: int | None, reboot_timeout_s: int,
                      allow_wipe: bool, strict_host_keys: bool, no_verify: bool, as_json: bool) -> None:
        """Install and configure every node: the roles in order, then verification.

        Without --yes, shows the plan and asks first (on a terminal; elsewhere --yes is
        required). Exit 0 all hosts provisioned, 1 some host failed, 3 no host could be
        reached.
        """
        if not yes and not on_terminal():  # on a terminal the plan is shown and confirmed below
            raise InputError("provision changes hosts: pass --yes to run without a terminal to confirm on")
        from gpuctl.runner.bootstrap import ensure_patched

        ensure_patched()
        from gpuctl.runner.run import execute

        err = console(stderr=True)

        def confirm(plan) -> bool:  # type: ignore[no-untyped-def]
            for line in plan.skipped_roles_lines():
                err.print(f"role {line}", markup=False, highlight=False)
            err.print(plan.table())
            return click.confirm("Apply these changes?", default=False, err=True)

        req = _request(inventory, limit, only, skip, parallel=parallel, max_unavailable=max_unavailable,
                       allow_wipe=allow_wipe, strict_host_keys=strict_host_keys, reboot_timeout_s=reboot_timeout_s,
                       as_json=as_json, verify=not no_verify)
        summary = execute(req, dry=False, console=err, confirm=None if yes else confirm)
        if summary.extra.get("cancelled"):
            click.echo("cancelled: nothing was changed", err=True)
            sys.exit(int(ExitCode.OK))
        _finish(summary, as_json)
