"""Verify side of the timesync component (roles/timesync/checks.py): the chrony unit the
role enables is the one checked, active and enabled, and its absence fails."""

from __future__ import annotations

import pytest

from gpuctl.checks.api import services_of
from gpuctl.checks.model import CheckFailure
from tests.unit.checks_support import probe, role


def _enabled_spec(package_manager: str = "apt"):
    from gpuctl.inventory import load_inventory
    from gpuctl.paths import inventories_dir
    from gpuctl.spec import resolve

    loaded = load_inventory(inventories_dir() / "h100-8x4.yaml")
    loaded.inventory = loaded.inventory.model_copy(update={"role_vars": {"timesync_enabled": True}})
    return resolve(loaded, ("gpu-01",))[0]


def _show(unit: str, active: str, enabled: str) -> str:
    return (f"Id={unit}.service\nLoadState=loaded\nActiveState={active}\nSubState="
            f"{'running' if active == 'active' else 'dead'}\nUnitFileState={enabled}\n")


def test_the_enabled_unit_is_the_checked_one_and_passes_when_running():
    spec = _enabled_spec()
    assert services_of("timesync")(spec) == ["chrony"]
    checks = role("timesync")
    p = probe(spec, {"systemctl show": _show("chrony", "active", "enabled")})
    checks.test_service_active(None, spec, p, "chrony")


@pytest.mark.parametrize(("active", "enabled", "says"), [("inactive", "enabled", "chrony is inactive"),
                                                          ("active", "disabled", "not enabled at boot")])
def test_a_stopped_or_disabled_chrony_fails(active: str, enabled: str, says: str):
    spec = _enabled_spec()
    p = probe(spec, {"systemctl show": _show("chrony", active, enabled)})
    with pytest.raises(CheckFailure, match=says):
        role("timesync").test_service_active(None, spec, p, "chrony")


def test_off_by_default_no_check_is_collected():
    from gpuctl.inventory import load_inventory
    from gpuctl.paths import inventories_dir
    from gpuctl.spec import resolve

    spec = resolve(load_inventory(inventories_dir() / "h100-8x4.yaml"), ("gpu-01",))[0]
    assert services_of("timesync")(spec) == [] and spec.roles["timesync"]
