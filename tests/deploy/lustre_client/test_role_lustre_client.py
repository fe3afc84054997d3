"""lustre_client role on @fake hosts, up to the mount (no Lustre server exists here or in the lab)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl.runner.roles import load_role
from gpuctl.spec import NodeSpec

pytestmark = pytest.mark.deploy

LUSTRE = "10.100.0.5@tcp:/lfs01"
FAMILIES = {
    "ubuntu2204": {},
    "debian12": {"os_family": "debian12", "os": "debian-12"},
    "rhel9": {"os_family": "rhel9", "os": "rocky-9", "package_manager": "dnf"},
}


def specs(fake: Any, family: str) -> list[NodeSpec]:
    return fake.specs("h100-8x4.yaml", limit=("*01",), **FAMILIES[family])


def pkgs(spec: NodeSpec) -> list[tuple[str, str]]:
    return [(p.name, p.version) for p in spec.components["lustre"].packages]


def fresh(spec: NodeSpec, module_after_install: bool = True) -> dict[Any, Any]:
    installed = {"yes": False}

    def packages(command: str) -> list[str]:
        return []

    def install(command: str) -> str:
        installed["yes"] = True
        return ""

    def modinfo(command: str) -> str:
        return spec.components["lustre"].version if installed["yes"] and module_after_install else ""
    return {"apt-get": install, "dnf ": install, "modinfo -k": modinfo, "dpkg-query": packages, "rpm -qa": packages}


def converged(spec: NodeSpec, fstab: str) -> dict[Any, Any]:
    conf = ("# Managed by gpuctl (lustre_client role): LNet networks from the inventory (storage.lustre.lnet).\n"
            f'options lnet networks="{spec.lustre.lnet}"\n')  # type: ignore[union-attr]
    if spec.package_manager == "dnf":
        pk = [f"{n}\t0:{v}" for n, v in pkgs(spec)] + ["##gpuctl-versionlock"] + [f"{n}-0:{v}" for n, v in pkgs(spec)]
        key = "rpm -qa"
    else:
        pk = [f"{n}\t{v}\thold ok installed" for n, v in pkgs(spec)]
        key = "dpkg-query"
    return {key: pk, "modinfo -k": spec.components["lustre"].version, "cat /etc/modprobe.d/lustre.conf": conf,
            "cat /etc/fstab": fstab, "findmnt -n -o SOURCE,FSTYPE --mountpoint": f"{LUSTRE} lustre"}


def run(fake: Any, family: str, responses: dict[Any, Any]) -> Any:
    sp = specs(fake, family)
    return fake.run(load_role("lustre_client").install, sp, responses=responses)[sp[0].node]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fresh_install_pins_holds_lnet_module_check_fstab_mount(fake: Any, family: str) -> None:
    spec = specs(fake, family)[0]
    h = run(fake, family, fresh(spec))
    assert h.status == "ok", h.error
    cmds = "\n".join(h.execute_commands)
    for n, v in pkgs(spec):
        assert (f"{n}-{v}" if family == "rhel9" else f"{n}={v}") in cmds
    assert ("versionlock" if family == "rhel9" else "apt-mark hold") in cmds
    assert h.files["/etc/modprobe.d/lustre.conf"].endswith('options lnet networks="tcp0(eno1.100)"\n')
    line = next(c for c in h.execute_commands if "/etc/fstab.gpuctl" in c)
    assert f"{LUSTRE} /lustre lustre flock,_netdev,x-systemd.requires=network-online.target," in line
    assert "x-systemd.requires=sys-subsystem-net-devices-eno1.100.device 0 0" in line
    assert "mkdir -p /lustre && mount /lustre" in cmds
    # the module check ran after the install and before the mount
    idx = [i for i, c in enumerate(h.execute_commands) if "modinfo -k" in c]
    assert idx and idx[-1] < h.execute_commands.index("mkdir -p /lustre && mount /lustre")


def test_module_not_built_for_running_kernel_fails_before_mount(fake: Any) -> None:
    spec = specs(fake, "ubuntu2204")[0]
    h = run(fake, "ubuntu2204", fresh(spec, module_after_install=False))
    assert h.status == "failed"
    assert any("Check the lustre" in o for o in h.failed_ops)
    assert not any("mount /lustre" in c for c in h.execute_commands)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_converged_host_changes_nothing(fake: Any, family: str) -> None:
    spec = specs(fake, family)[0]
    first = run(fake, family, fresh(spec))
    line = next(c for c in first.execute_commands if "/etc/fstab.gpuctl" in c)
    fstab = line.split("printf '%s\\n' '", 1)[1].split("'", 1)[0]
    h = run(fake, family, converged(spec, f"/dev/vda / ext4 defaults 0 1\n{fstab}\n"))
    assert h.status == "ok", h.error
    assert h.changed_ops == []
    assert set(h.execute_commands) <= set(h.prepare_commands)


def test_something_else_mounted_there_fails(fake: Any) -> None:
    spec = specs(fake, "ubuntu2204")[0]
    r = fresh(spec)
    r["findmnt -n -o SOURCE,FSTYPE --mountpoint"] = "/dev/md0 xfs"
    h = run(fake, "ubuntu2204", r)
    assert h.status == "failed" and any("Mount /lustre" in o for o in h.failed_ops)
