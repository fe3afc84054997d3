"""Shared helpers for the verify unit tests: a fake testinfra host answering commands
from recorded outputs, role check modules loaded by path, and NodeSpecs of the example
inventories."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from gpuctl.checks.model import CheckFailure
from gpuctl.checks.probe import Probe
from gpuctl.inventory import load_inventory, load_inventory_text
from gpuctl.paths import inventories_dir, roles_dir
from gpuctl.spec import NodeSpec, resolve

DATA = Path(__file__).parents[1] / "data" / "fixtures"


def fixture(rel: str) -> str:
    return (DATA / rel).read_text()


def bundle(files: dict[str, str]) -> str:
    """`tail -n +1 A B …` output for these files."""
    parts = [f"==> {p} <==\n{t if t.endswith(chr(10)) else t + chr(10)}" for p, t in files.items()]
    return "\n".join(parts)


class FakeHost:
    """Answers `run(command)` with the first response whose key is a substring of the
    command; unknown commands exit 127 like a missing tool. Records what ran."""

    def __init__(self, responses: dict[str, tuple[int, str, str] | str], name: str = "gpu-01") -> None:
        self.responses = responses
        self.ran: list[str] = []
        self.backend = SimpleNamespace(hostname=name)

    def run(self, command: str, *args: str, **kwargs: object) -> SimpleNamespace:
        self.ran.append(command)
        for key, resp in self.responses.items():
            if key in command:
                rc, out, err = (0, resp, "") if isinstance(resp, str) else resp
                return SimpleNamespace(rc=rc, stdout=out, stderr=err)
        return SimpleNamespace(rc=127, stdout="", stderr="sh: 1: command not found")


@cache
def role(name: str) -> ModuleType:
    path = roles_dir() / name / "checks.py"
    spec = importlib.util.spec_from_file_location(f"gpuctl_test_role_checks_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def inventory_spec(name: str, index: int = 0) -> NodeSpec:
    return resolve(load_inventory(inventories_dir() / f"{name}.yaml"))[index]


SINGLE_H200 = """cluster: {name: one, sku: single-h200, matrix: r580-cuda13.0, os: ubuntu-24.04}
nodes:
  - {name: h200-01, address: 10.0.0.5}
"""


@cache
def single_h200_spec() -> NodeSpec:
    return resolve(load_inventory_text(SINGLE_H200))[0]


def probe(spec: NodeSpec, responses: dict[str, tuple[int, str, str] | str], form: str = "q") -> Probe:
    return Probe(FakeHost(responses, spec.node), spec, nvidia_smi_form=form)


def failure(fn, *args) -> CheckFailure:  # type: ignore[no-untyped-def]
    with pytest.raises(CheckFailure) as exc:
        fn(None, *args)
    return exc.value


def pytest_items_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The node ids of the pytest items a check session runs from now on (one per setup
    report the runner's Collector receives), filled as sessions run."""
    from gpuctl.checks import runner

    seen: list[str] = []
    real = runner.Collector.pytest_runtest_logreport

    def recording(self: runner.Collector, report: pytest.TestReport) -> None:
        if report.when == "setup":
            seen.append(report.nodeid)
        real(self, report)

    monkeypatch.setattr(runner.Collector, "pytest_runtest_logreport", recording)
    return seen
