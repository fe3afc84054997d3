"""Golden plan output: `gpuctl plan` on every example inventory prints what it printed before.

Issue 18 (the redesign) must leave behaviour unchanged; this test holds the plan of every
inventory under inventories/ to a file under tests/data/golden/plan/ captured before the
move. Each plan runs the CLI's own code (the role selection of `plan`, deploy/provision.py's
`provision` composed by the engine, dry; `_finish` prints it) on the deploy tier's `@fake`
hosts, so no host is needed. Fact answers: the recorded fresh-install scenario of the
inventory's OS under tests/deploy/data/ (Ubuntu 22.04, Debian 12); an OS without one (Ubuntu
24.04) answers every fact with empty output. inventories/lab.yaml is read as committed
(tests/data/inventories/lab-placeholder.yaml, as the harness does: `gpuctl lab up` rewrites
the live file).

Each golden file holds the text `gpuctl plan` prints (skipped roles, the grouped changes,
the summary table) and then, per host, every operation that would change with the remote
commands it would run (the `--json` object's `changes`).

Normalised (run-dependent only): each host's seconds (the table's `time` column: how long
the fake run took) are set to 0 before printing. Nothing else is: no temporary path or
run id reaches the output (the run id is empty off a run record), so a difference anywhere
else is a behaviour change.

On an intended change, regenerate and review the diff:

    GPUCTL_UPDATE_GOLDENS=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/deploy/test_plan_golden.py
    git diff tests/data/golden/plan/
"""

from __future__ import annotations

import io
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpu_scenarios import responses as scenario_responses
from rich.console import Console

from gpuctl.cli import provision as cli_provision
from gpuctl.paths import inventories_dir
from gpuctl.runner.roles import select_roles
from gpuctl.runner.run import load_provision_deploy
from gpuctl.runner.summary import RunSummary

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "plan"
UPDATE = os.environ.get("GPUCTL_UPDATE_GOLDENS") == "1"
SCENARIO_OF_OS = {"ubuntu-22.04": "ubuntu2204-fresh", "debian-12": "debian12-fresh"}
INVENTORIES = sorted(p.name for p in inventories_dir().glob("*.yaml"))


def _os_of(name: str) -> str:
    data = yaml.safe_load((inventories_dir() / name).read_text())
    return str(data["cluster"]["os"])


def plan_text(fake: Any, monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    """What `gpuctl plan inventories/<name>` prints on @fake hosts, plus each change's commands."""
    specs = fake.specs(name)
    choices = select_roles(specs, require_available=False)  # as `plan` does (runner.run.validate, dry)
    scenario = SCENARIO_OF_OS.get(_os_of(name))
    answers = scenario_responses(scenario) if scenario else {}
    run = fake.run(load_provision_deploy().provision, specs, args=(choices,), compose=True, dry=True,
                   responses=answers)
    hosts = {node: replace(h, seconds=0.0) for node, h in run.summary.hosts.items()}  # the one run-dependent field
    summary = RunSummary(command="plan", hosts=hosts, roles=choices, dry=True)
    buf = io.StringIO()
    monkeypatch.setattr(cli_provision, "console",
                        lambda stderr=False: Console(file=buf, width=200, color_system=None, highlight=False,
                                                     soft_wrap=True, markup=False))
    with pytest.raises(SystemExit):
        cli_provision._finish(summary, as_json=False)
    lines = [f"# gpuctl plan inventories/{name} (facts: {scenario or 'empty output'})", ""]
    lines += [line.rstrip() for line in buf.getvalue().splitlines()]
    lines.append("")
    lines.append("# commands per host (the --json object's changes)")
    for node, host in summary.to_json()["hosts"].items():
        lines.append(f"## {node}: {host['status']}" + (f" ({host['error']})" if host["error"] else ""))
        for change in host["changes"]:
            lines.append(f"[{change['role']}] {change['status']}: {change['operation']}")
            lines += [f"  $ {c}" for c in change["commands"]]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", INVENTORIES)
def test_plan_output_matches_the_golden(fake: Any, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    got = plan_text(fake, monkeypatch, name)
    path = GOLDEN / f"{Path(name).stem}.txt"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert path.is_file(), f"{path} missing: run with GPUCTL_UPDATE_GOLDENS=1 (see this module's docstring)"
    want = path.read_text()
    assert got == want, (f"plan of inventories/{name} differs from {path}; if intended, regenerate "
                         "(GPUCTL_UPDATE_GOLDENS=1) and review `git diff`")


def test_every_example_inventory_has_a_golden() -> None:
    stems = {Path(n).stem for n in INVENTORIES}
    files = {p.stem for p in GOLDEN.glob("*.txt")}
    assert stems and stems == files, f"inventories {sorted(stems)} vs goldens {sorted(files)}"
