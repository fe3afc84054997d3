"""Deploy tier: roles/fabricmanager — only on NVSwitch, never at a version other than the driver's."""

from __future__ import annotations

import pytest
from gpu_scenarios import inventory, pins_in, rerun_converged, responses, role_deploy, run_role

from gpuctl.matrix import Package

pytestmark = pytest.mark.deploy


def test_fresh_ubuntu2204_pins_to_driver_version(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    assert specs[0].hardware.nvswitch
    h = run_role(fake, "fabricmanager", specs, "ubuntu2204-fresh")
    assert h.status == "ok", h.error
    assert pins_in(h.execute_commands) == ["nvidia-fabricmanager=580.95.05-1", "libnvidia-nscq=580.95.05-1"]
    assert "apt-mark hold nvidia-fabricmanager libnvidia-nscq" in h.execute_commands
    assert "systemctl enable --now nvidia-fabricmanager" in h.execute_commands
    assert not any("systemctl restart" in c for c in h.execute_commands)  # not running before: no restart


def test_every_installed_fabricmanager_version_is_the_driver_version(fake, tmp_path):
    for fam, scenario in (("ubuntu2204", "ubuntu2204-fresh"), ("debian12", "debian12-fresh"),
                          ("rhel9", "rocky9-fresh")):
        specs = fake.specs(inventory(tmp_path, fam), limit=["gpu-01"])
        h = run_role(fake, "fabricmanager", specs, scenario)
        verb = "dnf install" if fam == "rhel9" else "apt-get install"
        args = [w for c in h.execute_commands if verb in c for w in c.split() if w.startswith(("nvidia-fab", "libnv"))]
        assert args, fam
        for a in args:
            assert "580.95.05-1" in a and specs[0].driver_version == "580.95.05", (fam, a)


def test_tampered_spec_is_refused(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01", "gpu-02"])
    fm = specs[0].components["fabricmanager"]
    tampered = fm.model_copy(update={"packages": (Package(name="nvidia-fabricmanager", version="580.105.08-1"),
                                                  fm.packages[1])})
    specs = [s.model_copy(update={"components": {**s.components, "fabricmanager": tampered}}) for s in specs]
    run = fake.run(role_deploy("fabricmanager"), specs, responses=responses("ubuntu2204-fresh"))
    for node in ("gpu-01", "gpu-02"):
        h = run[node]
        assert h.status == "failed"
        assert "Refuse fabric manager packages not at driver version 580.95.05" in h.error
        assert not any("apt-get" in c or "apt-mark" in c for c in h.commands)


def test_not_on_systems_without_nvswitch(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204", base="h200-roce-8x8.yaml"), limit=[])
    specs = [s.model_copy(update={"components": {**s.components, "fabricmanager":
             s.components["fabricmanager"].model_copy(update={"enabled": False, "reason": "no NVSwitch"})}})
             for s in specs[:1]]
    h = run_role(fake, "fabricmanager", specs, "ubuntu2204-fresh", node=specs[0].node)
    assert h.status == "ok" and h.commands == [] and h.ops == []


def test_converged_no_change(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    first = run_role(fake, "fabricmanager", specs, "ubuntu2204-fresh")
    h = rerun_converged(fake, "fabricmanager", specs, first)
    assert h.status == "ok" and h.changed_ops == [] and h.execute_commands == []
    assert len(h.prepare_commands) == 2


def test_upgrade_restarts_only_with_the_new_driver_loaded(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    first = run_role(fake, "fabricmanager", specs, "ubuntu2204-fresh")
    old = [line.replace("nvidia-fabricmanager\t580.95.05-1", "nvidia-fabricmanager\t580.82.07-1")
           for line in responses("ubuntu2204-converged")[": gpuctl-fact packages;"]]
    h = rerun_converged(fake, "fabricmanager", specs, first, packages=old)
    assert pins_in(h.execute_commands) == ["nvidia-fabricmanager=580.95.05-1"]
    assert h.execute_commands[-1] == "systemctl restart nvidia-fabricmanager"
    stale = [line.replace("loaded=580.95.05", "loaded=580.82.07")
             for line in responses("ubuntu2204-converged")[": gpuctl-fact nvidia-module;"]]
    h = rerun_converged(fake, "fabricmanager", specs, first, packages=old, **{"nvidia-module": stale})
    assert not any("systemctl restart" in c for c in h.execute_commands)
