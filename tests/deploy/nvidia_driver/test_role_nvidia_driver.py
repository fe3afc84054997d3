"""Deploy tier: roles/nvidia_driver — exact pins with epoch, holds, module check, reboot only when needed."""

from __future__ import annotations

import pytest
from gpu_scenarios import inventory, pins_in, responses

from gpuctl.deploy_context import RunOptions
from gpuctl.runner.reboot import BOOT_ID_COMMAND, REBOOT_COMMAND
from gpuctl.runner.roles import load_role

pytestmark = pytest.mark.deploy
FAST = RunOptions(extra={"nvidia_driver_reboot_delay_s": "0", "nvidia_driver_reboot_interval_s": "0"})
VER = "580.95.05"


def _driver():
    return load_role("nvidia_driver").install


class Node:
    """A fake node whose kernel state follows the commands run on it: the installed
    module appears when the driver is installed; a reboot loads it (new boot id)."""

    def __init__(self, loaded: str = "", installed: str = "", build_ok: bool = True,
                 boot: str = "5.15.0-131-generic") -> None:
        self.loaded, self.installed, self.build_ok, self.boot = loaded, installed, build_ok, boot
        self.boot_id, self.reboots = 1, 0

    def install(self, command: str) -> str:
        if self.build_ok:
            self.installed = VER
        return ""

    def reboot(self, command: str) -> str:
        self.reboots += 1
        self.boot_id += 1
        self.loaded = self.installed
        return ""

    def module_fact(self, command: str) -> list[str]:
        return ["grub=debian", "running=5.15.0-131-generic", f"boot={self.boot}",
                "boot_source=newest /boot/vmlinuz-*", "args=", f"loaded={self.loaded}",
                f"installed={self.installed}"]

    def responses(self, scenario: str) -> dict:
        # fact markers first: the nvidia-module fact's command also reads /sys/module/nvidia/version
        return {**responses(scenario, **{"nvidia-module": self.module_fact}),
                "apt-get install": self.install, REBOOT_COMMAND: self.reboot,
                BOOT_ID_COMMAND: lambda c: f"boot-{self.boot_id}",
                "cat /sys/module/nvidia/version": lambda c: self.loaded}


def test_fresh_ubuntu2204_installs_holds_reboots_once(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    node = Node()
    run = fake.run(_driver(), specs, responses=node.responses("ubuntu2204-fresh"), options=FAST)
    h = run["gpu-01"]
    assert h.status == "ok", h.error
    assert pins_in(h.execute_commands) == [
        "nvidia-driver-580-open=580.95.05-0ubuntu1", "nvidia-dkms-580-open=580.95.05-0ubuntu1",
        "nvidia-utils-580=580.95.05-0ubuntu1", "libnvidia-compute-580=580.95.05-0ubuntu1",
        "nvidia-persistenced=580.95.05-1"]
    assert ("apt-mark hold nvidia-driver-580-open nvidia-dkms-580-open nvidia-utils-580 libnvidia-compute-580 "
            "nvidia-persistenced") in h.execute_commands
    assert node.reboots == 1
    assert h.rebooted
    assert run.gate.rebooted("@fake/gpu-01")
    assert "systemctl enable --now nvidia-persistenced" in h.execute_commands
    # order: install, hold, module check (fact), reboot, confirm, persistenced
    cmds = h.execute_commands
    assert cmds.index(REBOOT_COMMAND) > max(i for i, c in enumerate(cmds) if "gpuctl-fact nvidia-module" in c)
    assert cmds.index("systemctl enable --now nvidia-persistenced") > cmds.index(REBOOT_COMMAND)
    assert h.op("Install NVIDIA driver 580.95.05 (open kernel modules)").status == "changed"


def test_converged_node_no_change_no_reboot(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    node = Node(loaded=VER, installed=VER)
    h = fake.run(_driver(), specs, responses=node.responses("ubuntu2204-converged"), options=FAST)["gpu-01"]
    assert h.status == "ok", h.error
    assert h.changed_ops == []
    assert h.execute_commands == []
    assert node.reboots == 0 and not h.rebooted
    assert len(h.prepare_commands) == 3  # packages+holds, services, nvidia module


def test_packages_current_but_module_not_loaded_reboots(fake, tmp_path):
    """A previous run installed the driver but never rebooted: this run reboots once."""
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    node = Node(loaded="", installed=VER)
    h = fake.run(_driver(), specs, responses=node.responses("ubuntu2204-converged"), options=FAST)["gpu-01"]
    assert h.status == "ok", h.error
    assert node.reboots == 1
    assert not any("apt-get install" in c for c in h.execute_commands)


def test_module_not_built_for_boot_kernel_refuses_to_reboot(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01", "gpu-02"])
    bad, good = Node(build_ok=False, boot="6.8.0-50-generic"), Node()
    run = fake.run(_driver(), specs, options=FAST,
                   host_responses={"gpu-01": bad.responses("ubuntu2204-fresh"),
                                   "gpu-02": good.responses("ubuntu2204-fresh")})
    assert run["gpu-01"].status == "failed"
    assert "Check nvidia 580.95.05 is built for the kernel the node boots" in run["gpu-01"].error
    assert bad.reboots == 0
    assert run["gpu-02"].status == "ok" and good.reboots == 1


def test_wrong_module_after_reboot_fails_the_host(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    node = Node()
    r = node.responses("ubuntu2204-fresh")
    r["cat /sys/module/nvidia/version"] = "570.133.20"  # the old module came back
    h = fake.run(_driver(), specs, responses=r, options=FAST)["gpu-01"]
    assert h.status == "failed"
    assert node.reboots == 1


def test_epoch_versions_compare_exactly(fake, tmp_path):
    """A dpkg version that differs only by a missing epoch is not the pin: reinstall."""
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    lines = responses("ubuntu2204-converged")[": gpuctl-fact packages;"]
    lines = [line.replace("nvidia-utils-580\t580.95.05-0ubuntu1", "nvidia-utils-580\t580.95.05-0ubuntu0")
             for line in lines]
    node = Node(loaded=VER, installed=VER)
    h = fake.run(_driver(), specs, responses={**node.responses("ubuntu2204-converged"),
                                              ": gpuctl-fact packages;": lines}, options=FAST)["gpu-01"]
    assert pins_in(h.execute_commands) == ["nvidia-utils-580=580.95.05-0ubuntu1"]
    # apt drops the hold of a held package it moves (seen in the lab's driver upgrade): held again
    assert "apt-mark hold nvidia-utils-580" in h.execute_commands


def test_fresh_debian12(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "debian12"), limit=["gpu-01"])
    node = Node(boot="6.1.0-31-amd64")
    h = fake.run(_driver(), specs, responses=node.responses("debian12-fresh"), options=FAST)["gpu-01"]
    assert h.status == "ok", h.error
    assert pins_in(h.execute_commands) == [
        "nvidia-driver=580.95.05-1", "nvidia-kernel-open-dkms=580.95.05-1", "nvidia-smi=580.95.05-1",
        "libcuda1=580.95.05-1", "nvidia-persistenced=580.95.05-1"]
    assert node.reboots == 1


def test_fresh_rocky9_module_stream_install_versionlock(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "rhel9"), limit=["gpu-01"])
    node = Node(boot="5.14.0-427.42.1.el9_4.x86_64")
    r = node.responses("rocky9-fresh")
    r["dnf install"] = node.install
    h = fake.run(_driver(), specs, responses=r, options=FAST)["gpu-01"]
    assert h.status == "ok", h.error
    cmds = h.execute_commands
    assert "dnf -y module enable nvidia-driver:580-open" in cmds
    assert ("dnf install -y --disableplugin=versionlock nvidia-open-3:580.95.05-1.el9 "
            "kmod-nvidia-open-dkms-3:580.95.05-1.el9 nvidia-driver-cuda-3:580.95.05-1.el9 "
            "nvidia-driver-cuda-libs-3:580.95.05-1.el9 nvidia-persistenced-3:580.95.05-1.el9") in cmds
    assert ("dnf versionlock add nvidia-open-3:580.95.05-1.el9 kmod-nvidia-open-dkms-3:580.95.05-1.el9 "
            "nvidia-driver-cuda-3:580.95.05-1.el9 nvidia-driver-cuda-libs-3:580.95.05-1.el9 "
            "nvidia-persistenced-3:580.95.05-1.el9") in cmds
    assert node.reboots == 1


def test_two_hosts_reboot_one_at_a_time(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01", "gpu-02", "gpu-03"])
    nodes = {s.node: Node() for s in specs}
    run = fake.run(_driver(), specs, options=FAST,
                   host_responses={n: node.responses("ubuntu2204-fresh") for n, node in nodes.items()})
    assert all(run[n].status == "ok" for n in nodes)
    assert all(node.reboots == 1 for node in nodes.values())
    assert run.gate.peak_down == 1


def test_driver_upgrade_moves_the_installed_fabric_manager_in_the_same_transaction(fake, tmp_path):
    """A converged HGX node at 580.95.05 whose matrix moves to 580.126.16: the installed fabric
    manager is upgraded in the driver's own apt transaction (never left at the old version,
    and a packaging that pins it to the old kernel module cannot block the upgrade)."""
    from gpuctl.matrix import load_matrix

    new = "580.126.16"
    src = load_matrix("r580-cuda13.0")
    # an inventory names its matrix (issue 17: no paths); a site matrix lives in matrices/ beside it
    (tmp_path / "new" / "matrices").mkdir(parents=True)
    variant = tmp_path / "new" / "matrices" / "r580-new.yaml"
    variant.write_text(src.path.read_text().replace(VER, new).replace("name: r580-cuda13.0", "name: r580-new"))
    old_specs = fake.specs(inventory(tmp_path, "debian12"), limit=["gpu-01"])
    inv = inventory(tmp_path / "new", "debian12", matrix="r580-new")
    specs = fake.specs(inv, limit=["gpu-01"])
    old = old_specs[0]
    held = [f"{p.name}\t{p.version}\thold ok installed"
            for c in ("driver", "persistenced", "fabricmanager") for p in old.components[c].packages]

    class Upgrading(Node):
        def install(self, command: str) -> str:
            self.installed = new
            return ""

    node = Upgrading(loaded=VER, installed=VER, boot="6.1.0-31-amd64")
    answers = {**node.responses("debian12-fresh"),
               **responses("debian12-fresh", packages=held, **{"nvidia-module": node.module_fact})}
    h = fake.run(_driver(), specs, responses=answers, options=FAST)["gpu-01"]
    assert h.status == "ok", h.error
    pins = pins_in(h.execute_commands)
    assert "nvidia-driver=580.126.16-1" in pins
    assert {"nvidia-fabricmanager=580.126.16-1", "libnvidia-nscq=580.126.16-1"} <= set(pins)
    assert not any(p.endswith(f"={VER}-1") for p in pins)
    # apt drops a hold when it moves a held package: every moved package is held again
    hold = next(c for c in h.execute_commands if c.startswith("apt-mark hold "))
    moved = {"nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-fabricmanager", "libnvidia-nscq"}
    assert moved <= set(hold.split()[2:])
    assert node.reboots == 1
    # a fresh node (no fabric manager yet) leaves it to the fabricmanager role
    fresh = fake.run(_driver(), specs, responses=Node(boot="6.1.0-31-amd64").responses("debian12-fresh"),
                     options=FAST)["gpu-01"]
    assert not any("fabricmanager" in p for p in pins_in(fresh.execute_commands))
