"""Deploy-tier harness: run any pyinfra deploy against @fake hosts that carry NodeSpecs.

The harness drives the *same* engine as `gpuctl plan/provision` (gpuctl.runner.engine):
same host data (NodeSpec under SPEC_KEY, RunOptions under OPTIONS_KEY, the RebootGate),
same stages, same per-host failure handling — only the connector is pyinfra's `@fake`.

Fixtures
--------
`fake` — a FakeHarness:

    def test_driver_fresh(fake):
        specs = fake.specs("lab.yaml")                      # NodeSpecs from inventories/lab.yaml
        run = fake.run(load_role("nvidia_driver").install, specs,
                       responses={"dpkg-query": "", re.compile(r"^uname"): "6.1.0-13-amd64"})
        h = run["gpu-01"]
        assert h.status == "ok"
        assert "apt-get install" in " ".join(h.execute_commands)
        assert h.changed_ops == ["Install NVIDIA driver 580.95.05"]

`fake_run` — shortcut for `fake.run`.

fake.specs(inventory="lab.yaml", limit=(), **update) -> list[NodeSpec]
    `inventory` is a file name under gpuctl.paths.inventories_dir() or a path. `update`
    fields replace NodeSpec fields (pydantic `model_copy(update=...)`), e.g.
    `fake.specs("h100-8x4.yaml", os_family="rocky", package_manager="dnf")`.

fake.run(deploy, specs, *, responses=None, host_responses=None, options=None, dry=False,
         args=(), kwargs=None, delay=0.0, parallel=0, gate=None, compose=False) -> FakeRun
    Runs `deploy(*args, **kwargs)` on one @fake host per NodeSpec (named `@fake/<node>`):
    connect → prepare → execute (or only connect → prepare when `dry=True`, as `plan`).
    - responses: {matcher: response} for every host; host_responses: {node: {...}} checked
      before the common ones. A matcher is a substring of the command or a compiled
      `re.Pattern` (searched); first match wins; unmatched commands succeed with no output.
      A response is a str / list of stdout lines, a dict {stdout, stderr, success}, or a
      callable(command: str) -> one of those (evaluated when the command runs, so a fact
      can answer differently after an install; it may gevent.sleep to take time).
    - options: gpuctl.deploy_context.RunOptions (allow_wipe, max_unavailable, …).
    - delay: seconds every fake command takes (default 0).
    - gate: a gpuctl.runner.reboot.RebootGate to share/inspect (default: one sized
      options.max_unavailable).
    - compose: treat `deploy` as deploy/provision.py's `provision` (pass `args=(choices,)`)
      and let it mark roles, so OpResult.role is filled.

fake.responses_from(path) -> dict
    Load recorded responses from YAML/JSON: a mapping `matcher: response`; a matcher
    written as `re:<regex>` becomes a compiled pattern.

FakeRun: `run[node]` -> FakeHost; `run.hosts`; `run.summary` (the RunSummary the CLI
prints; `run.summary.to_json()` is the `--json` object); `run.engine`; `run.gate`.

FakeHost (per node):
    status ("ok" | "failed" | "unreachable"), error (one line), failed (bool), rebooted
    commands          every remote command, in order (masked like pyinfra logs them)
    prepare_commands  those run while preparing (facts)
    execute_commands  those run while operations executed (incl. facts read in `_if`)
    records           gpuctl.runner.engine.CommandRecord list (stage, op, output, success)
    files             {remote path: uploaded content (str, or bytes if not UTF-8)}
    ops               gpuctl.runner.engine.OpResult list in operation order
    changed_ops / failed_ops / op_names     operation names by status
    op(substring) -> OpResult    the only operation whose name contains substring
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyinfra.connectors.fake import FakeConnector
from pyinfra.connectors.util import CommandOutput, OutputLine

from gpuctl.deploy_context import RunOptions
from gpuctl.inventory import load_inventory
from gpuctl.paths import inventories_dir, roles_dir
from gpuctl.runner.engine import CommandRecord, Engine, HostResult, OpResult
from gpuctl.runner.inventory import Target
from gpuctl.runner.reboot import RebootGate
from gpuctl.runner.summary import RunSummary
from gpuctl.spec import NodeSpec, resolve

# A component's own deploy tests live in tests/deploy/<component>/ (found from roles/<component>/);
# other deploy tests import their scenario helpers by module name (`import test_role_nvme_raid`),
# so each such folder is importable like this one (gpu_scenarios).
_HERE = Path(__file__).resolve().parent
for _folder in sorted(p for p in _HERE.iterdir() if p.is_dir() and (roles_dir() / p.name).is_dir()):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

Responses = Mapping[Any, Any]


def _as_lines(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.splitlines()
    return [str(v) for v in value]


def _lookup_response(self: FakeConnector, command_str: str) -> tuple[bool, CommandOutput]:
    """pyinfra's matcher semantics plus callable responses (installed for the test only)."""
    for matcher, response in (self.data.get("fake_responses") or {}).items():
        if isinstance(matcher, re.Pattern):
            if not matcher.search(command_str):
                continue
        elif matcher not in command_str:
            continue
        if callable(response):
            response = response(command_str)
        success, stdout, stderr = True, [], []
        if isinstance(response, dict):
            success = bool(response.get("success", True))
            stdout, stderr = _as_lines(response.get("stdout")), _as_lines(response.get("stderr"))
        else:
            stdout = _as_lines(response)
        lines = [OutputLine("stdout", x) for x in stdout] + [OutputLine("stderr", x) for x in stderr]
        return success, CommandOutput(lines)
    return True, CommandOutput([])


@dataclass
class FakeHost:
    node: str
    result: HostResult
    records: list[CommandRecord]
    files: dict[str, str | bytes]

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def error(self) -> str:
        return self.result.error

    @property
    def failed(self) -> bool:
        return self.result.status != "ok"

    @property
    def rebooted(self) -> bool:
        return self.result.rebooted

    @property
    def commands(self) -> list[str]:
        return [r.command for r in self.records if not r.command.startswith("<upload ")]

    @property
    def prepare_commands(self) -> list[str]:
        return [r.command for r in self.records if r.stage == "prepare" and not r.command.startswith("<upload ")]

    @property
    def execute_commands(self) -> list[str]:
        return [r.command for r in self.records if r.stage == "execute" and not r.command.startswith("<upload ")]

    @property
    def ops(self) -> list[OpResult]:
        return self.result.ops

    @property
    def op_names(self) -> list[str]:
        return [o.name for o in self.ops]

    @property
    def changed_ops(self) -> list[str]:
        return [o.name for o in self.ops if o.status in ("changed", "will change")]

    @property
    def failed_ops(self) -> list[str]:
        return [o.name for o in self.ops if o.status == "failed"]

    def op(self, substring: str) -> OpResult:
        found = [o for o in self.ops if substring in o.name]
        if len(found) != 1:
            raise AssertionError(f"{len(found)} operations match {substring!r}: {[o.name for o in self.ops]}")
        return found[0]


@dataclass
class FakeRun:
    engine: Engine
    summary: RunSummary
    hosts: dict[str, FakeHost]

    @property
    def gate(self) -> RebootGate:
        return self.engine.gate

    def __getitem__(self, node: str) -> FakeHost:
        return self.hosts[node]


class FakeHarness:
    """See the module docstring."""

    def specs(self, inventory: str | Path = "lab.yaml", limit: Sequence[str] = (), **update: Any) -> list[NodeSpec]:
        path = Path(inventory)
        if str(inventory) == "lab.yaml":  # the lab inventory as committed; `gpuctl lab up` rewrites the live one
            path = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"
        elif not path.is_file():
            path = inventories_dir() / str(inventory)
        specs = resolve(load_inventory(path), tuple(limit))
        return [s.model_copy(update=update) for s in specs] if update else specs

    @staticmethod
    def responses_from(path: str | Path) -> dict[Any, Any]:
        text = Path(path).read_text()
        data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
        return {(re.compile(k[3:]) if isinstance(k, str) and k.startswith("re:") else k): v
                for k, v in (data or {}).items()}

    def run(self, deploy: Callable[..., Any], specs: Iterable[NodeSpec], *, responses: Responses | None = None,
            host_responses: Mapping[str, Responses] | None = None, options: RunOptions | None = None,
            dry: bool = False, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
            delay: float = 0.0, parallel: int = 0, gate: RebootGate | None = None,
            compose: bool = False) -> FakeRun:
        specs = list(specs)
        targets = []
        for s in specs:
            merged: dict[Any, Any] = dict((host_responses or {}).get(s.node, {}))
            for k, v in (responses or {}).items():
                merged.setdefault(k, v)
            targets.append(Target(name=f"@fake/{s.node}", spec=s,
                                  data={"fake_responses": merged, "fake_delay": delay, "fake_delay_jitter": 0}))
        opts = options or RunOptions()
        engine = Engine(targets, opts, parallel=parallel, gate=gate, record_files=True)
        kw = dict(kwargs or {})
        if compose:
            kw.setdefault("on_role", engine.mark_role)
        try:
            engine.connect()
            engine.prepare(deploy, *args, **kw)
            if not dry:
                engine.execute()
        finally:
            engine.disconnect()
        results = engine.results(with_commands=dry)
        summary = RunSummary(command="plan" if dry else "provision", hosts=results, dry=dry)
        hosts = {node: FakeHost(node, res, engine.commands[node], engine.files[node]) for node, res in results.items()}
        return FakeRun(engine=engine, summary=summary, hosts=hosts)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeHarness:
    monkeypatch.setattr(FakeConnector, "_lookup_response", _lookup_response)
    return FakeHarness()


@pytest.fixture
def fake_run(fake: FakeHarness) -> Callable[..., FakeRun]:
    return fake.run
