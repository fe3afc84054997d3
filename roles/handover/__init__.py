"""handover: the customer's admin accounts, keys and sudo; the provider key removed last
(a delivery role: `gpuctl handover`, never provision)."""

from gpuctl.components import Component
from gpuctl.knobs import GROUP, LOGIN_PROBE_COMMANDS, PREFIX, Choice, Path

from .validate import handover_problems

COMPONENT = Component(
    name="handover", order=0, delivery=True,
    summary="customer accounts and keys",
    validate=(handover_problems,),
    knobs={
        "handover_shell": Path(("/bin", "/usr/bin", "/usr/local/bin")),
        "handover_sudoers_dir": Path(files=("/etc/sudoers.d",)),
        "handover_sudoers_prefix": PREFIX,
        "handover_sudo_rule": Choice(("ALL=(ALL:ALL) NOPASSWD: ALL", "ALL=(ALL) NOPASSWD: ALL"),
                                     "sudo rule (the accounts have no password: NOPASSWD rules only)"),
        "handover_groups": GROUP,
        "handover_login_probe_command": Choice(LOGIN_PROBE_COMMANDS, "login probe command"),
    },
)
