"""A role that every selected node skips is not collected by verify's pytest session (its
items were made per host and then all deselected; issue 18), and the result still names the
skip on every host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuctl.checks import runner
from gpuctl.checks.model import CheckStatus
from gpuctl.inventory import load_inventory
from tests.unit.checks_support import inventory_spec

LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"


def test_roles_skipped_everywhere_are_not_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [inventory_spec("lab", 0), inventory_spec("lab", 1)]
    skipped = {r for r, why in specs[0].roles.items() if why}
    assert {"lustre_client", "train_env"} <= skipped
    seen: list[list[str]] = []

    def fake_main(args: list[str], plugins: Any = ()) -> int:
        seen.append(list(args))
        return 5  # no tests ran

    monkeypatch.setattr(runner.pytest, "main", fake_main)
    result = runner.run_verify(load_inventory(LAB_INVENTORY), specs)
    files = {Path(a).parent.name for a in seen[0] if a.endswith("checks.py")}
    assert files and not files & skipped
    assert "base" in files and "nvidia_driver" in files
    for name in ("gpu-01", "gpu-02"):
        skips = {c.role for c in result.hosts[name].checks if c.status is CheckStatus.SKIP}
        assert skipped <= skips


def test_a_role_one_node_runs_is_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    one = inventory_spec("lab", 0)
    other = one.model_copy(update={"node": "gpu-02", "roles": {**one.roles, "lustre_client": ""}})
    seen: list[list[str]] = []
    monkeypatch.setattr(runner.pytest, "main", lambda args, plugins=(): seen.append(list(args)) or 5)
    runner.run_verify(load_inventory(LAB_INVENTORY), [one, other])
    assert "lustre_client" in {Path(a).parent.name for a in seen[0] if a.endswith("checks.py")}
