"""Each component's rules for the inventory live beside it (roles/<component>/validate.py),
are declared by it (`Component.validate`) and found through the registry; gpuctl/ keeps
only the shared model's rules (gpuctl.inventory_semantics.VALIDATORS)."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import pytest

from gpuctl import components
from gpuctl import inventory_semantics as sem
from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory_text
from gpuctl.paths import inventories_dir, roles_dir

ROCE = (inventories_dir() / "h200-roce-8x8.yaml").read_text()
H100 = (inventories_dir() / "h100-8x4.yaml").read_text()


def _problems(text: str) -> list[str]:
    with pytest.raises(InputError) as exc:
        load_inventory_text(text, "inv.yaml", base_dir=inventories_dir())
    return exc.value.problems


def _is_rule(f: object) -> bool:
    return inspect.isfunction(f) and list(inspect.signature(f).parameters) == ["inv", "sku", "found"]


def test_each_components_rules_are_defined_in_its_own_folder_and_all_declared() -> None:
    """A rule sits in roles/<component>/ of the component that declares it; a rule written in a
    component's validate.py but left out of its declaration would never run."""
    declared = 0
    for c in components.registry():
        for rule in c.validate:
            assert Path(inspect.getfile(rule)).resolve().parent == c.folder.resolve(), (c.name, rule)
            assert rule not in sem.VALIDATORS
            declared += 1
        module = sys.modules.get(f"gpuctl_components.{c.name}.validate")
        written = {f for f in vars(module).values()
                   if _is_rule(f) and f.__module__ == module.__name__} if module else set()
        assert written == set(c.validate), c.name
    assert declared >= 5  # network (2), nvme_raid, lustre_client, package_mirror, handover


def test_gpuctl_keeps_only_the_shared_models_rules() -> None:
    """No rule about one component's section is left in gpuctl/: the core rules judge nodes,
    racks, thresholds, role_vars, CPU memory and preflight, never fabric, vlans, storage,
    repos or handover (those belong to network, nvme_raid, lustre_client, package_mirror, handover)."""
    source = inspect.getsource(sem)
    for section in ("inv.fabric", "inv.vlans", "inv.storage", "inv.repos", "inv.handover"):
        assert section not in source, section


def test_a_components_rule_is_found_through_its_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The RoCE dscp rule is network's: with network's declaration declaring no rules, the
    inventory's bad dscp goes unreported; with the declaration as shipped, it is reported."""
    text = ROCE.replace("dscp: 26", "dscp: 24")
    assert any("fabric.roce.dscp: 24 is not the DSCP" in p for p in _problems(text))
    shipped = components.registry()
    silenced = tuple(dataclasses.replace(c, validate=()) if c.name == "network" else c for c in shipped)
    monkeypatch.setattr(components, "registry", lambda: silenced)
    load_inventory_text(text, "inv.yaml", base_dir=inventories_dir())  # nothing else judges dscp


WIDGET_INIT = '''"""widget: a component added by a test, with one rule for the inventory."""

from gpuctl.components import Component
from gpuctl.knobs import Choice

from .validate import cluster_name_problems

COMPONENT = Component(name="widget", order=999, summary="a test component", validate=(cluster_name_problems,),
                      knobs={"widget_color": Choice(("blue", "red"), "widget colour")})
'''

WIDGET_RULES = '''"""widget's rule for the inventory."""


def cluster_name_problems(inv, sku, found):
    if not inv.cluster.name.startswith("widget-"):
        found.err(("cluster", "name"), f"'{inv.cluster.name}': a widget cluster's name starts with widget-")
'''


@pytest.fixture
def roles_with_widget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A roles/ folder holding every shipped component (linked) plus a new one, `widget`."""
    root = tmp_path / "roles"
    root.mkdir()
    for folder in roles_dir().iterdir():
        if (folder / "__init__.py").is_file():
            (root / folder.name).symlink_to(folder, target_is_directory=True)
    (root / "widget").mkdir()
    (root / "widget" / "__init__.py").write_text(WIDGET_INIT)
    (root / "widget" / "validate.py").write_text(WIDGET_RULES)
    (root / "widget" / "defaults.yaml").write_text("widget_color: blue\n")
    (root / "stray").mkdir()  # knobs in a folder that declares no component are no knobs
    (root / "stray" / "defaults.yaml").write_text("stray_size: 1\n")
    saved = {k: v for k, v in sys.modules.items() if k.startswith("gpuctl_components.")}
    monkeypatch.setattr(components, "roles_dir", lambda: root)
    yield root
    for k in [k for k in sys.modules if k.startswith("gpuctl_components.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_a_new_components_rule_is_picked_up_without_editing_gpuctl(roles_with_widget: Path) -> None:
    """Adding roles/widget/ (a declaration and its validate.py) is all it takes: loading an
    inventory runs widget's rule and reports its problem at the field's line, exit code 2."""
    assert "widget" in [c.name for c in components.registry()]
    problems = _problems(H100)
    line = next(i for i, s in enumerate(H100.splitlines(), 1) if s.startswith("cluster:"))
    want = f"inv.yaml:{line}: cluster.name: 'h100-8x4': a widget cluster's name starts with widget-"
    assert want in problems, problems
    with pytest.raises(InputError) as exc:
        load_inventory_text(H100, "inv.yaml", base_dir=inventories_dir())
    assert exc.value.exit_code == 2


def test_role_vars_are_judged_on_the_knobs_the_components_declare(roles_with_widget: Path) -> None:
    """The inventory reads knobs and their defaults through the registry, not by globbing
    roles/*/defaults.yaml: widget's knob is known and judged by its default's shape and its
    declared type; a defaults.yaml in a folder that declares no component adds no knob."""
    text = H100.replace("cluster: {name: h100-8x4", "cluster: {name: widget-1") + (
        "role_vars: {widget_color: 3, widget_colour: red, stray_size: 2}\n")
    at = len(text.splitlines())
    assert _problems(text) == [
        f"inv.yaml:{at}: role_vars.widget_color: 3 is a number; this setting is a string: quote it ('3')",
        f"inv.yaml:{at}: role_vars.widget_colour: unknown role setting 'widget_colour'; did you mean 'widget_color'?",
        f"inv.yaml:{at}: role_vars.stray_size: unknown role setting 'stray_size' (see roles/<role>/defaults.yaml)",
    ]
    green = text.replace("{widget_color: 3, widget_colour: red, stray_size: 2}", "{widget_color: green}")
    assert any("role_vars.widget_color" in p and "green" in p for p in _problems(green))
    load_inventory_text(green.replace("green", "red"), "inv.yaml", base_dir=inventories_dir())
