"""nvidia_driver: the NVIDIA driver pinned, held, and loaded — rebooting only when needed.

1. RHEL 9: the `nvidia-driver:<branch>-open|-dkms` dnf module stream enabled.
2. The driver packages of spec.components["driver"] (the matrix's names already encode
   open or proprietary modules) and nvidia-persistenced at exactly their versions, in one
   transaction — with the fabric manager packages when they are installed at another
   version (a driver upgrade: they move together, never apart); then held (apt-mark hold /
   dnf versionlock).
3. At execution time, `ModuleReboot` decides: if the loaded nvidia module
   (/sys/module/nvidia/version, absent = none) is not the pinned version, the node must
   reboot. Before that, the module built for the kernel the node will boot (modinfo -k
   <boot kernel>) must be the pinned version, or the host fails and is not rebooted.
4. The reboot is the runner's `rolling_reboot` (gpuctl/runner/reboot.py): at most
   --max-unavailable nodes down at once; after the boot it confirms that
   /sys/module/nvidia/version equals the pinned version (the host fails otherwise).
5. nvidia-persistenced enabled and running.

A converged node (packages at the pins and held, pinned module loaded) gets no command
beyond the three facts read at prepare.
"""

from __future__ import annotations

import logging

from pyinfra import host
from pyinfra.api import FunctionCommand, deploy, operation

from gpuctl.deploy_context import node_spec
from gpuctl.facts.nvidia import NvidiaModule, NvidiaModuleState
from gpuctl.facts.packages import DnfModuleStreams, read_packages
from gpuctl.facts.system import ServiceStates
from gpuctl.knobs import command_argv
from gpuctl.matrix import Package
from gpuctl.operations import (
    decimal_number,
    dnf_module_enable,
    ensure_services,
    fail_host,
    hold_packages,
    install_packages,
    role_knobs,
    sh,
)
from gpuctl.parsers.packages import PackageSnapshot
from gpuctl.runner.reboot import rolling_reboot
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)


class ModuleReboot:
    """The one place that decides whether this host reboots for its driver.

    `needed()` is evaluated at execution time (`_if=`): False without a remote command
    when the packages did not change and the pinned module was already loaded at
    prepare; otherwise it reads `NvidiaModule` once and caches it for this host.
    """

    def __init__(self, pinned: str, at_prepare: NvidiaModuleState, packages_op: object) -> None:
        self.pinned = pinned
        self.at_prepare = at_prepare
        self.packages_op = packages_op
        self._now: NvidiaModuleState | None = None

    def state(self) -> NvidiaModuleState:
        if self._now is None:
            self._now = host.get_fact(NvidiaModule)
        return self._now

    def needed(self) -> bool:
        changed = self.packages_op.did_change()  # type: ignore[attr-defined]
        if not changed and not self.at_prepare.needs_reboot(self.pinned):
            return False
        return self.state().needs_reboot(self.pinned)

    def boot_module_problem(self) -> str:
        """'' when the next boot will load the pinned module, else why not."""
        st = self.state()
        if st.installed_version == self.pinned:
            return ""
        found = st.installed_version or "no nvidia module"
        return (f"modinfo -k {st.boot.boot_kernel} -F version nvidia gives {found!r}, expected {self.pinned} "
                f"(boot kernel from {st.boot.boot_kernel_source}); not rebooting into a kernel without the "
                "pinned module — check the DKMS build log (/var/lib/dkms/nvidia/) and the kernel headers")


@operation(is_idempotent=False)
def check_boot_module(decision: ModuleReboot):
    """Fail the host unless the module for the kernel it will boot is the pinned version."""

    def _check(state, host) -> bool:  # pyinfra passes (state, host) by these names
        problem = decision.boot_module_problem()
        if problem:
            host.log_styled(f"refused: {problem}", fg="red", log_func=logging.getLogger("pyinfra").error)
            return False
        return True

    yield FunctionCommand(_check, (), {})


def fabricmanager_moving(spec: NodeSpec, snap: PackageSnapshot) -> list[Package]:
    """The node's fabric manager packages that are installed at another version than the
    spec's (the driver's): upgraded together with the driver. Empty on fresh nodes (the
    fabricmanager role installs them) and on SKUs without NVSwitch."""
    fm = spec.components.get("fabricmanager")
    if fm is None or not fm.enabled:
        return []
    return [p for p in fm.packages
            if snap.version(p.name) is not None and not snap.has(p.name, p.version)
            and p.upstream == spec.driver_version]


@deploy("nvidia_driver")
def install() -> None:
    spec = node_spec()
    k = role_knobs("nvidia_driver")
    ver = spec.driver_version
    driver = spec.components["driver"]
    persistenced = spec.components["persistenced"]
    packages = [*driver.packages, *persistenced.packages]
    label = f"NVIDIA driver {ver} ({spec.driver_flavour} kernel modules)"
    service = spec.service("persistenced")

    snap = read_packages(spec.package_manager)
    services = host.get_fact(ServiceStates, names=(service,))
    at_prepare = host.get_fact(NvidiaModule)

    if spec.package_manager == "dnf":
        suffix = k[f"nvidia_driver_dnf_stream_suffix_{spec.driver_flavour}"]
        dnf_module_enable(name=f"Enable the dnf module stream nvidia-driver:{spec.driver_branch}{suffix}",
                          module="nvidia-driver", stream=f"{spec.driver_branch}{suffix}",
                          enabled_streams=host.get_fact(DnfModuleStreams))

    # A fabric manager already installed at the old version moves with the driver, in the same
    # transaction: it must never run against another driver version, and packagings that pin
    # it to the driver's kernel module (= version) would otherwise block the upgrade.
    moving = fabricmanager_moving(spec, snap)
    installed = install_packages(name=f"Install {label}", packages=[*packages, *moving], snapshot=snap, label=label)
    hold_packages(name=f"Hold NVIDIA driver {ver} packages", packages=[*packages, *moving], snapshot=snap)

    decision = ModuleReboot(ver, at_prepare, installed)
    check_boot_module(name=f"Check nvidia {ver} is built for the kernel the node boots",
                      decision=decision, _if=decision.needed)
    timeout = k["nvidia_driver_reboot_timeout_s"]

    def seconds(what: str) -> float:
        return decimal_number(k[f"nvidia_driver_reboot_{what}_s"], f"nvidia_driver_reboot_{what}_s")
    # a command knob is a choice among known commands, run as its argv (gpuctl.knobs), never as text
    argv = command_argv("nvidia_driver_confirm_command", str(k["nvidia_driver_confirm_command"]))
    if argv is None:
        fail_host(name="Refuse an unknown driver confirm command",
                  reason=f"nvidia_driver_confirm_command {str(k['nvidia_driver_confirm_command'])!r} is not a known "
                         "command (gpuctl.knobs.CONFIRM_COMMANDS)")
        return
    confirm = sh(*argv)
    rolling_reboot(name=f"Reboot to load NVIDIA driver {ver}",
                   reason=f"the loaded nvidia module is not {ver}",
                   confirm_command=confirm, confirm_output=ver,
                   delay_s=seconds("delay"), interval_s=seconds("interval"),
                   timeout_s=seconds("timeout") if timeout is not None else None,
                   _if=decision.needed)
    ensure_services(name=f"Enable and start {service} {persistenced.version}", names=[service],
                    states=services)
