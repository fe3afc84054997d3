"""The component registry (gpuctl.components): one declaration per component in its own
folder, and no second list of component names anywhere in the product code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuctl import components
from gpuctl.checks.probe import PREFETCHABLE
from gpuctl.paths import roles_dir

ROOT = Path(__file__).resolve().parents[2]
#: where product code lives (tests may name components: they are examples, not the registry)
PRODUCT = ("gpuctl", "deploy", "roles", "bench")


#: literals that hold component names but are not a list of components: file → why
NOT_A_LIST = {
    "gpuctl/cli/matrix.py": "the fields of one `gpuctl matrix list --json` row (driver, cuda, nccl versions)",
}


def _names() -> set[str]:
    names = {c.name for c in components.registry()}
    return names | set(components.matrix_parts())


def spelled_lists(root: Path, names: set[str], min_names: int = 3) -> list[str]:
    """'file:line' of every literal tuple/list/set, or dict's keys, holding `min_names` or more
    distinct component (or matrix part) names: a component list written out by hand."""
    found = []
    for folder in PRODUCT:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    elts = node.elts
                elif isinstance(node, ast.Dict):
                    elts = [k for k in node.keys if k is not None]
                else:
                    continue
                strings = {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if len(strings & names) >= min_names:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {sorted(strings & names)}")
    return found


def test_no_component_list_is_spelled_out_outside_the_registry():
    """spec resolution, install, checks, lock/drift and the CLI read gpuctl.components; a list of
    three or more component names anywhere in the product code is a second copy (it failed on
    spec.ROLE_ORDER / roles / KERNEL_FEATURE_ROLES, checks.api.COMPONENT_ROLE, probe.prefetch,
    lock.MANAGED_FILES, matrix.COMPONENTS, rules' required parts before the registry)."""
    found = [f for f in spelled_lists(ROOT, _names()) if f.split(":")[0] not in NOT_A_LIST]
    assert found == []


def test_the_guard_finds_a_spelled_out_list(tmp_path):
    (tmp_path / "gpuctl").mkdir()
    (tmp_path / "gpuctl" / "x.py").write_text('ORDER = ("base", "cuda", "nccl")\nOK = ("base", "cuda")\n')
    assert spelled_lists(tmp_path, _names()) == ["gpuctl/x.py:1: ['base', 'cuda', 'nccl']"]


def test_every_role_folder_declares_its_component():
    folders = sorted(p.name for p in roles_dir().iterdir() if (p / "install.py").is_file())
    assert sorted(c.name for c in components.registry()) == folders
    for c in components.registry():
        assert c.summary and c.folder == roles_dir() / c.name


def test_provision_order_is_the_design_order():
    assert components.provision_order() == (
        "base", "timesync", "nvidia_repo", "nvidia_driver", "fabricmanager", "cuda", "cudnn", "nccl", "dcgm",
        "ofed", "peermem", "gds", "network", "nvme_raid", "lustre_client", "bench_tools", "train_env")
    assert components.delivery_roles() == ("handover", "package_mirror")


def test_declarations_are_consistent():
    """What a declaration names exists: its knobs in its defaults.yaml and prefixed with its
    name, its services' and modules' knobs among its knobs, its probes known to the Probe,
    its parts' services and modules on its own parts."""
    for c in components.registry():
        defaults = components.defaults(c.name)
        parts = {p.name for p in c.parts}
        for key in c.knobs:
            assert key.startswith(c.name + "_"), key
            assert key in defaults, f"{c.name}: knob {key} has no default in defaults.yaml"
        for s in c.services:
            assert s.knob in c.knobs and (not s.part or s.part in parts), s
        for m in c.modules:
            assert bool(m.name) != bool(m.knob), m
            assert not m.knob or m.knob in c.knobs, m
            assert not m.part or m.part in parts, m
        assert set(c.probes) <= set(PREFETCHABLE), c.probes
        for f in c.files:
            assert f.knob is None or f.knob in defaults, f


def test_a_folder_without_a_declaration_is_refused(tmp_path):
    (tmp_path / "thing").mkdir()
    (tmp_path / "thing" / "__init__.py").write_text('"""no declaration"""\n')
    with pytest.raises(Exception, match="declares no COMPONENT"):
        components._registry(tmp_path)
