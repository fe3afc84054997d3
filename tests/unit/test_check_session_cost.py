"""What verify's check session costs per item (issue 18: verify within 1.5× plain pyinfra).

pytest 9 builds a fresh fixture definition for `request` (inspecting a lambda's signature)
each time a fixture that takes `request` serves an item, cached or not, and once more when
filling the item's own fixtures: the plugin's fixtures read the session config without
`request`, and each item is handed its own request up front. testinfra's host parameter
and pytest's own parameter fixtures still take it: measured 5.9 definitions per item before,
2.8 after (139 items).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from _pytest import fixtures

from gpuctl.checks import plugin
from gpuctl.checks.model import CheckStatus
from gpuctl.checks.runner import run_verify
from gpuctl.inventory import load_inventory
from tests.unit.checks_support import inventory_spec

LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"


@pytest.mark.parametrize("name", ["spec", "probe", "locked_firmware"])
def test_plugin_fixtures_do_not_take_request(name: str) -> None:
    fixture = getattr(plugin, name)
    function = getattr(fixture, "_get_wrapped_function", lambda: getattr(fixture, "__wrapped__", fixture))()
    assert "request" not in inspect.signature(function).parameters


def test_at_most_three_request_definitions_per_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real session (SSH to a closed loopback port: every check could not run)."""
    made = []
    original = fixtures.RequestFixtureDef.__init__

    def counting(self: object, request: object) -> None:
        made.append(1)
        original(self, request)  # type: ignore[arg-type]

    monkeypatch.setattr(fixtures.RequestFixtureDef, "__init__", counting)
    specs = [s.model_copy(update={"ssh_port": 9}) for s in [inventory_spec("lab", 0)]]
    result = run_verify(load_inventory(LAB_INVENTORY), specs, roles=("base", "nvidia_driver"), timeout_s=10)
    items = result.hosts["gpu-01"].count(CheckStatus.ERROR)
    assert items > 50
    assert len(made) <= 3 * items, f"{len(made)} request definitions for {items} items"
