"""Deploy tier of the timesync component (roles/timesync): chrony installed and its unit
enabled and running where role_vars turn it on; nothing anywhere else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from gpu_scenarios import responses  # tests/deploy (its conftest puts it on sys.path)

from gpuctl.paths import inventories_dir
from gpuctl.runner.roles import load_role

pytestmark = pytest.mark.deploy

OS_NAMES = {"debian12": "debian-12", "rhel9": "rocky-9", "ubuntu2204": "ubuntu-22.04"}
SCENARIO = {"debian12": "debian12-fresh", "rhel9": "rocky9-fresh", "ubuntu2204": "ubuntu2204-fresh"}


def _inventory(tmp_path: Path, os_family: str, **role_vars: Any) -> Path:
    data = yaml.safe_load((inventories_dir() / "h100-8x4.yaml").read_text())
    data["cluster"]["os"] = OS_NAMES[os_family]
    data["role_vars"] = {**(data.get("role_vars") or {}), **role_vars}
    path = tmp_path / f"{os_family}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _responses(os_family: str, **extra: Any) -> dict[Any, Any]:
    return responses(SCENARIO[os_family], **extra)


@pytest.mark.parametrize(("os_family", "unit"), [("debian12", "chrony"), ("ubuntu2204", "chrony"),
                                                 ("rhel9", "chronyd")])
def test_fresh_node_gets_chrony_enabled_and_running(fake: Any, tmp_path: Path, os_family: str, unit: str) -> None:
    specs = fake.specs(_inventory(tmp_path, os_family, timesync_enabled=True), limit=["gpu-01"])
    assert specs[0].roles["timesync"] == "" and specs[0].service("timesync") == unit
    h = fake.run(load_role("timesync").install, specs, responses=_responses(os_family))["gpu-01"]
    assert h.status == "ok", h.error
    cmds = "\n".join(h.execute_commands)
    assert ("dnf" if os_family == "rhel9" else "apt-get") in cmds and " chrony" in cmds
    assert f"systemctl enable --now {unit}" in cmds
    assert h.changed_ops == ["timesync | Install chrony", f"timesync | Enable and start {unit}"], h.changed_ops


def test_converged_node_changes_nothing(fake: Any, tmp_path: Path) -> None:
    specs = fake.specs(_inventory(tmp_path, "debian12", timesync_enabled=True), limit=["gpu-01"])
    # the services fact is `systemctl show` (gpuctl.parsers.systemd), as the other roles' recordings give it
    resp = _responses("debian12", services=["Id=chrony.service", "LoadState=loaded", "ActiveState=active",
                                            "SubState=running", "UnitFileState=enabled"])
    first = fake.run(load_role("timesync").install, specs, responses=resp)["gpu-01"]
    assert first.status == "ok", first.error
    assert not [c for c in first.execute_commands if "systemctl" in c], first.execute_commands


def test_off_by_default_and_on_container_nodes(fake: Any, tmp_path: Path) -> None:
    spec = fake.specs(_inventory(tmp_path, "debian12"), limit=["gpu-01"])[0]
    assert spec.roles["timesync"] == "role_vars.timesync_enabled is not true"
    assert all(s.component != "timesync" for s in spec.services)
    h = fake.run(load_role("timesync").install, [spec], responses=_responses("debian12"))["gpu-01"]
    assert h.status == "ok" and h.ops == []
