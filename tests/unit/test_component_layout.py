"""Each component is found from its own folder (issue 18): its tests sit in
tests/<tier>/<component>/, no test file named after one component sits anywhere else, and
roles/<component>/README.md names where its declaration, install, checks, knobs, templates,
matrix parts and tests are. The READMEs are generated from the registry and the tree and
held to it here, so they cannot go stale; after adding a component, a tests folder or a
templates folder, regenerate them with

    GPUCTL_UPDATE_GOLDENS=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_component_layout.py

and review `git diff roles/`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gpuctl import components

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
UPDATE = os.environ.get("GPUCTL_UPDATE_GOLDENS") == "1"

#: components with no tests folder of their own: component → why, and where their tests are.
#: An entry for a component that has a folder fails (the exemption is stale).
NO_FOLDER = {
    "cudnn": "a package-only role (pins and holds, nothing else): its tests are the ones shared by the "
             "five package roles, tests/deploy/test_package_roles.py, and the package checks of "
             "tests/unit/test_checks_system.py",
    "nccl": "a package role whose pins and holds are tested with the other package roles "
            "(tests/deploy/test_package_roles.py); its nccl.conf checks read the network role's fabric "
            "and are tested beside the network checks (tests/unit/test_checks_system.py)",
}


def find_test_files(root: Path = TESTS) -> list[Path]:
    return sorted(p for p in root.rglob("test_*.py") if "data" not in p.relative_to(root).parts)


def named_after(path: Path, names: set[str]) -> str | None:
    """The component a test file is named after — test_<c>.py, test_<c>_*.py, test_role_<c>.py,
    test_role_<c>_*.py (the longest such name) — or None."""
    stem = path.stem.removeprefix("test_")
    stem = stem.removeprefix("role_")
    found = [n for n in names if stem == n or stem.startswith(n + "_")]
    return max(found, key=len, default=None)


def misplaced(root: Path, names: set[str]) -> list[str]:
    """Test files named after one component that are not in a tests/<tier>/<that component>/ folder."""
    out = []
    for path in find_test_files(root):
        owner = named_after(path, names)
        rel = path.relative_to(root)
        if owner and not (len(rel.parts) == 3 and rel.parts[1] == owner):
            out.append(f"{rel} (belongs in {rel.parts[0]}/{owner}/)")
    return out


def component_folders(root: Path = TESTS) -> dict[str, list[str]]:
    """Component → the tests/<tier>/<component>/ folders that hold test files ('deploy', 'unit', …)."""
    out: dict[str, list[str]] = {}
    for path in find_test_files(root):
        rel = path.relative_to(root)
        if len(rel.parts) == 3:
            out.setdefault(rel.parts[1], [])
            if rel.parts[0] not in out[rel.parts[1]]:
                out[rel.parts[1]].append(rel.parts[0])
    return {k: sorted(v) for k, v in out.items()}


def _names() -> set[str]:
    return {c.name for c in components.registry()}


def test_every_component_has_its_tests_folder_or_a_reason():
    folders = component_folders()
    missing = [c.name for c in components.registry() if c.name not in folders and c.name not in NO_FOLDER]
    assert missing == [], f"components without tests/<tier>/<component>/ (and no NO_FOLDER reason): {missing}"
    stale = [name for name in NO_FOLDER if name in folders or name not in _names()]
    assert stale == [], f"NO_FOLDER entries that are no longer true: {stale}"


def test_every_tests_subfolder_is_a_component():
    """tests/<tier>/<folder>/ holding tests is named after a component, so it is found from roles/<name>/."""
    strays = sorted(f"{tier}/{name}" for name, tiers_ in component_folders().items() for tier in tiers_
                    if name not in _names())
    assert strays == []


def test_no_test_file_named_after_a_component_sits_outside_its_folder():
    assert misplaced(TESTS, _names()) == []


def test_the_guard_finds_a_misplaced_file(tmp_path):
    names = {"nccl", "network", "nvidia_driver", "nvidia_repo", "cuda", "cudnn"}
    for rel in ("deploy/test_role_nccl.py", "unit/test_network_checks.py", "unit/test_parsers_nccl.py",
                "deploy/nvidia_driver/test_role_nvidia_driver.py", "unit/cuda/test_cudnn.py",
                "deploy/test_package_roles.py", "unit/nvidia_repo/test_role_nvidia_driver_x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert misplaced(tmp_path, names) == [
        "deploy/test_role_nccl.py (belongs in deploy/nccl/)",
        "unit/cuda/test_cudnn.py (belongs in unit/cudnn/)",
        "unit/nvidia_repo/test_role_nvidia_driver_x.py (belongs in unit/nvidia_driver/)",
        "unit/test_network_checks.py (belongs in unit/network/)",
    ]
    assert component_folders(tmp_path) == {"cuda": ["unit"], "nvidia_driver": ["deploy"], "nvidia_repo": ["unit"]}


# ------------------------------------------------------------------ roles/<component>/README.md

def _code(path: Path) -> str:
    return f"`{path.relative_to(ROOT).as_posix()}`"


def readme(c: components.Component) -> str:
    """roles/<c>/README.md: where everything about the component is, from the registry and the tree."""
    folder = c.folder
    place = "a delivery role: its own command, never provision" if c.delivery else f"provision order {c.order}"
    lines = [
        f"# {c.name}: {c.summary}",
        "",
        "<!-- Generated by tests/unit/test_component_layout.py from the declaration and the tree;",
        "     do not edit: regenerate as that module's docstring says. -->",
        "",
        "Where everything about this component is:",
        "",
        f"- declaration ({place}; matrix parts, services, modules, files, typed knobs, when it applies): "
        f"{_code(folder / '__init__.py')}",
    ]
    if (folder / "defaults.yaml").is_file():
        lines.append(f"- knobs' defaults: {_code(folder / 'defaults.yaml')}")
    lines.append(f"- install (pyinfra): {_code(folder / 'install.py')}")
    if (folder / "checks.py").is_file():
        lines.append(f"- checks (`gpuctl verify`): {_code(folder / 'checks.py')}")
    templates = ROOT / "templates" / c.name
    if templates.is_dir():
        lines.append(f"- templates: `{templates.relative_to(ROOT).as_posix()}/`")
    if c.parts:
        parts = ", ".join(f"`{p.name}`" for p in c.parts)
        lines.append(f"- matrix parts: {parts} (their packages: `packages.<os>.<part>` in `matrices/*.yaml`)")
    tiers_ = component_folders().get(c.name, [])
    if tiers_:
        lines.append("- tests: " + ", ".join(f"`tests/{t}/{c.name}/`" for t in tiers_))
    else:
        lines.append(f"- tests: no folder of its own: {NO_FOLDER.get(c.name, 'none')}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", sorted(c.name for c in components.registry()))
def test_component_readme_names_where_everything_is(name):
    c = components.component(name)
    path = c.folder / "README.md"
    want = readme(c)
    if UPDATE:
        path.write_text(want)
    assert path.is_file(), f"{path} missing: regenerate (see this module's docstring)"
    assert path.read_text() == want, f"{path} is stale: regenerate (see this module's docstring) and review git diff"


def test_every_path_a_readme_names_exists():
    for c in components.registry():
        for rel in re.findall(r"`((?:roles|templates|tests)/[^`<>*]+)`", readme(c)):
            assert (ROOT / rel).exists(), f"{c.name}: {rel}"


def test_readmes_are_only_for_components():
    folders = sorted(p.parent.name for p in (ROOT / "roles").glob("*/README.md"))
    assert set(folders) <= _names(), folders
