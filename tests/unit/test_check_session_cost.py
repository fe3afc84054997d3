"""What verify's check session costs per item (issue 18: verify within 1.5× plain pyinfra).

pytest 9 builds a fresh fixture definition for `request` (inspecting a lambda's signature)
each time a fixture that takes `request` serves an item, cached or not, and once more when
filling the item's own fixtures: the plugin's fixtures read the session config without
`request`, and each item is handed its own request up front. Only testinfra's host
parameter still takes it. Measured on the session below (base and nvidia_driver, 139 results):
818 definitions for 139 pytest items before; 395 after those two changes; since a per-item
check is one pytest item per host, 32 for 30 pytest items (62 without the request handed up
front).
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
from tests.unit.checks_support import bundle, inventory_spec, probe, pytest_items_run, role

LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"


@pytest.mark.parametrize("name", ["spec", "probe", "locked_firmware"])
def test_plugin_fixtures_do_not_take_request(name: str) -> None:
    fixture = getattr(plugin, name)
    function = getattr(fixture, "_get_wrapped_function", lambda: getattr(fixture, "__wrapped__", fixture))()
    assert "request" not in inspect.signature(function).parameters


def test_about_one_request_definition_per_pytest_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real session (SSH to a closed loopback port: every check could not run)."""
    made = []
    pytest_items = pytest_items_run(monkeypatch)
    original = fixtures.RequestFixtureDef.__init__

    def counting(self: object, request: object) -> None:
        made.append(1)
        original(self, request)  # type: ignore[arg-type]

    monkeypatch.setattr(fixtures.RequestFixtureDef, "__init__", counting)
    specs = [s.model_copy(update={"ssh_port": 9}) for s in [inventory_spec("lab", 0)]]
    result = run_verify(load_inventory(LAB_INVENTORY), specs, roles=("base", "nvidia_driver"), timeout_s=10)
    assert result.hosts["gpu-01"].count(CheckStatus.ERROR) > 50
    assert len(pytest_items) > 20
    assert len(made) <= 1.5 * len(pytest_items), f"{len(made)} request definitions for {len(pytest_items)} items"


def test_a_file_read_by_many_items_is_parsed_once_per_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """nccl.conf (one item per key) and /etc/modprobe.d (one item per module): each was
    parsed again for every item."""
    spec = inventory_spec("lab", 0)
    conf = "".join(f"{k}={v}\n" for k, v in spec.nccl_conf.items())
    files = {"/etc/nccl.conf": conf, "/etc/modprobe.d/gpuctl-blacklist.conf": "blacklist nouveau\nblacklist rxe_x\n",
             "/proc/modules": "nvidia 54308864 0 - Live 0x0000000000000000 (POE)\n"}
    p = probe(spec, {"/proc/modules": bundle(files)})
    nccl, base = role("nccl"), role("base")
    calls: list[str] = []
    for module, name in ((nccl, "parse_key_values"), (base, "parse_modprobe_blacklist")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _n=name: calls.append(_n) or _real(*a))
    assert len(spec.nccl_conf) > 1
    for key in spec.nccl_conf:
        nccl.test_nccl_conf(None, spec, p, key)
    for module in ("nouveau", "rxe_x"):
        base.test_module_blacklisted(None, spec, p, module)
    assert calls.count("parse_key_values") == 1 and calls.count("parse_modprobe_blacklist") == 1
