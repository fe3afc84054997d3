"""nvme_raid: an mdadm array over the node's NVMe namespaces, mounted by UUID, assembled at boot.

The decision (use / assemble / create / refuse / report degraded) is made by the pure
`gpuctl.storage_safety.plan_raid` from facts read before anything changes; this module
only turns the plan into operations. A refused or degraded plan fails the host with the
plan's reasons (device and signature named) and changes nothing. mkfs runs only right
after this run created the array and re-checks at execution time that the new array
carries no signature.
"""

from __future__ import annotations

import logging
from typing import Any

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.operations import apt, dnf, server

from gpuctl.deploy_context import node_spec, run_options
from gpuctl.facts.storage import FsUuid, MdDetailBrief, MountSource, TextFile, read_storage_facts
from gpuctl.knobs import command_argv, tokens
from gpuctl.operations import fail_commands, fail_host, fstab_fields, report, role_knobs, sh
from gpuctl.storage_safety import RaidPlan, describe, plan_raid

log = logging.getLogger(__name__)


def defaults() -> dict[str, Any]:
    """defaults.yaml with overrides (host data > --extra > inventory role_vars)."""

    return role_knobs("nvme_raid")


@operation()
def mdadm_conf(array: str, conf: str) -> Any:
    """The array's ARRAY line in mdadm.conf (replacing older lines for the same device or UUID)."""
    detail = host.get_fact(MdDetailBrief, array=array)
    lines = host.get_fact(TextFile, path=conf)
    uuid = detail.get("UUID")
    if uuid and any(line.startswith("ARRAY ") and f"UUID={uuid}" in line for line in lines):
        host.noop(f"{conf} already names {array} (UUID {uuid})")
        return
    a, c = sh(array), sh(conf)
    yield (
        f"line=$(mdadm --detail --brief {a}) && [ -n \"$line\" ] || "
        f"{{ echo {sh(f'gpuctl: {array} is not running')} >&2; exit 1; }}; "
        f"uuid=$(printf '%s\\n' \"$line\" | sed -n 's/.*UUID=\\([^ ]*\\).*/\\1/p'); "
        f"mkdir -p $(dirname {c}) && touch {c} && "
        f"awk -v dev={a} -v u=\"UUID=$uuid\" '!($1 == \"ARRAY\" && ($2 == dev || index($0, u)))' {c} > {c}.gpuctl && "
        f"printf '%s\\n' \"$line\" >> {c}.gpuctl && mv {c}.gpuctl {c}"
    )


@operation()
def fstab_entry(array: str, mount: str, fs: str, options: str, passno: int) -> Any:
    """`UUID=<fs uuid> MOUNT FS OPTIONS 0 PASS` in /etc/fstab (replacing other lines for MOUNT)."""
    uuid = host.get_fact(FsUuid, device=array)
    lines = host.get_fact(TextFile, path="/etc/fstab")
    want = ["UUID=" + uuid, mount, fs, options, "0", str(passno)]
    if uuid and any(line.split() == want for line in lines):
        host.noop(f"/etc/fstab already mounts UUID={uuid} at {mount}")
        return
    a, m = sh(array), sh(mount)
    rest = sh(" " + fstab_fields(mount, fs, options, "0", passno))  # ValueError on a blank/control char
    yield (
        f"uuid=$(blkid -s UUID -o value {a}) && [ -n \"$uuid\" ] || "
        f"{{ echo {sh(f'gpuctl: {array} carries no filesystem UUID')} >&2; exit 1; }}; "
        f"awk -v m={m} '$1 ~ /^#/ || $2 != m' /etc/fstab > /etc/fstab.gpuctl && "
        f"printf 'UUID=%s%s\\n' \"$uuid\" {rest} >> /etc/fstab.gpuctl && mv /etc/fstab.gpuctl /etc/fstab && "
        "(systemctl daemon-reload 2>/dev/null || true)"
    )


@operation()
def mounted(array: str, mount: str) -> Any:
    """MOUNT mounted from its fstab line; refuses when something else is mounted there."""
    now = host.get_fact(MountSource, path=mount)
    if now.get("source") == array:
        host.noop(f"{array} is mounted at {mount}")
        return
    if now:
        yield from fail_commands(f"gpuctl: {mount} is mounted from {now.get('source')}, not {array}")
        return
    yield f"{sh('mkdir', '-p', mount)} && {sh('mount', mount)}"


def _create_command(plan: RaidPlan, chunk_kib: int, name: str, metadata: str) -> str:
    """mdadm --create, preceded by an execution-time re-check that every member is blank."""
    checks = sh(*plan.devices)
    opts = [f"--level={plan.level}", f"--raid-devices={len(plan.devices)}", f"--metadata={metadata}",
            f"--name={name}", "--run"]
    if plan.level != 1:
        opts.append(f"--chunk={chunk_kib}K")
    if len(plan.devices) == 1:
        opts.append("--force")
    return (
        f"for d in {checks}; do s=$(wipefs -i -O TYPE,OFFSET \"$d\") || exit 1; "
        "if [ -n \"$s\" ]; then echo \"gpuctl: refusing mdadm --create: $d now carries $s\" >&2; exit 1; fi; done; "
        + sh("mdadm", "--create", plan.array, *opts, *plan.devices)
    )


def _mkfs_command(array: str, fs: str, options: str | list[str]) -> str:
    """mkfs.<fs> with the knob's option tokens (each quoted), after a re-check for signatures."""
    a = sh(array)
    return (
        f"s=$(wipefs -i -O TYPE,OFFSET {a}) || exit 1; "
        f"if [ -n \"$s\" ]; then printf 'gpuctl: refusing mkfs: %s already carries %s\\n' {a} \"$s\" >&2; exit 1; fi; "
        + sh(f"mkfs.{fs}", *tokens("nvme_raid_mkfs_options", options), array)
    )


@deploy("nvme_raid: install")
def install() -> None:
    """The NodeSpec's RAID: used if present, assembled if stopped, created only over blank devices."""
    spec = node_spec()
    raid = spec.raid
    if raid is None:
        return
    d = defaults()
    pm = spec.package_manager
    pk = d["nvme_raid_packages"][pm]
    pkgs = [*pk["base"], *pk[raid.fs]]
    if pm == "apt":
        apt.packages(name=f"Install {', '.join(pkgs)}", packages=pkgs)
    else:
        dnf.packages(name=f"Install {', '.join(pkgs)}", packages=pkgs)

    explicit = None if raid.devices == "auto" else list(raid.devices)
    facts = read_storage_facts(explicit)
    plan = plan_raid(raid, facts, run_options().allow_wipe)
    log.info("%s: %s", host.name, describe(plan))
    for note in plan.notes:
        report(name=f"Note on {plan.array}: {note}", message=note)

    if plan.action in ("refuse", "degraded"):
        fail_host(name=f"Refuse to build {plan.array}" if plan.action == "refuse" else f"Report degraded {plan.array}",
                  reason=describe(plan), remote=True)
        return
    if plan.action == "present" and not host.get_fact(FsUuid, device=plan.array):
        fail_host(name=f"Refuse to make a filesystem on existing {plan.array}",
                  reason=f"{plan.array} exists (over {', '.join(plan.devices)}) but carries no filesystem; "
                         "gpuctl makes filesystems only on arrays it has just created — check it and run mkfs by hand",
                  remote=True)
        return

    made = None
    if plan.action == "create":
        if plan.wipe:
            server.shell(
                name=f"Erase signatures on {', '.join(plan.wipe)} (storage.raid.wipe with --allow-wipe)",
                commands=[sh("wipefs", "-a", w) for w in plan.wipe],
            )
        made = server.shell(
            name=f"Create {plan.array} RAID{plan.level} over {', '.join(plan.devices)}",
            commands=[_create_command(plan, raid.chunk_kib, raid.name, d["nvme_raid_metadata"])],
        )
        server.shell(
            name=f"Make {raid.fs} on the new {plan.array}",
            commands=[_mkfs_command(plan.array, raid.fs, d["nvme_raid_mkfs_options"][raid.fs])],
            _if=made.did_change,
        )
    elif plan.action == "assemble":
        server.shell(
            name=f"Assemble {plan.array} (UUID {plan.uuid}) from {', '.join(plan.devices)}",
            commands=[sh("mdadm", "--assemble", plan.array, f"--uuid={plan.uuid or ''}", *plan.devices)],
        )

    conf = mdadm_conf(name=f"Record {plan.array} in {d['nvme_raid_mdadm_conf'][pm]}", array=plan.array,
                      conf=d["nvme_raid_mdadm_conf"][pm])
    initramfs = str(d["nvme_raid_initramfs_command"][pm])
    argv = command_argv("nvme_raid_initramfs_command", initramfs)
    if argv is None:  # a command knob is a choice among known commands (gpuctl.knobs), never free text
        fail_host(name="Refuse an unknown initramfs command",
                  reason=f"nvme_raid_initramfs_command {initramfs!r} is not a known command "
                         "(gpuctl.knobs.INITRAMFS_COMMANDS)", remote=True)
        return
    server.shell(name="Rebuild the initramfs so the array assembles at boot",
                 commands=[sh(*argv)], _if=conf.did_change)
    fstab_entry(name=f"Mount {plan.array} at {raid.mount} from /etc/fstab (nofail)", array=plan.array,
                mount=raid.mount, fs=raid.fs, options=d["nvme_raid_mount_options"], passno=d["nvme_raid_fsck_pass"])
    mounted(name=f"Mount {raid.mount}", array=plan.array, mount=raid.mount)
