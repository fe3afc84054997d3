"""A `@for_each` check is one pytest item per host, called once per item of the host's spec,
each item its own result (issue 18: pytest's per-item cost kept verify above 1.5× plain
pyinfra at 32-64 container nodes; on a GPU node every per-GPU check was eight items)."""

from __future__ import annotations

from pathlib import Path

import pytest
import testinfra

from gpuctl.checks import plugin as gplugin
from gpuctl.checks import runner
from gpuctl.checks.model import CheckFailure, CheckStatus, CouldNotRun
from gpuctl.checks.probe import Probe
from gpuctl.checks.runner import list_checks, run_verify
from gpuctl.inventory import load_inventory
from tests.unit.checks_support import inventory_spec, pytest_items_run, role

LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"
ROLES = ("base", "nccl")


def _report(when: str, outcome: str, props: list[tuple[str, object]]) -> pytest.TestReport:
    return pytest.TestReport("roles/base/checks.py::test_sysctl[gpuctl://gpu-01]", ("x", 1, "x"), {}, outcome,
                             None if outcome == "passed" else "CheckFailure: x", when, user_properties=props)


def test_each_item_outcome_is_its_own_result() -> None:
    ident = {"host": "gpu-01", "role": "base", "check": "base.sysctl", "items": ["a", "b", "c"]}
    per_item = [{"item": "a", "outcome": "pass", "duration_s": 0.001},
                {"item": "b", "outcome": "fail", "expected": ">= 2", "found": "1", "remediation": "reconfigure",
                 "message": "b is 1", "duration_s": 0.001},
                {"item": "c", "outcome": "error", "message": "unreadable", "remediation": "rerun",
                 "unreachable": False, "duration_s": 0.001}]
    c = runner.Collector()
    c.pytest_runtest_logreport(_report("setup", "passed", [(gplugin.USER_PROPERTY, ident)]))
    c.pytest_runtest_logreport(_report("call", "failed", [(gplugin.USER_PROPERTY, ident),
                                                          (gplugin.USER_PROPERTY + "_items", per_item)]))
    # the teardown report carries the item's user_properties again: read once, from the call
    stale = [{**o, "outcome": "pass"} for o in per_item]
    c.pytest_runtest_logreport(_report("teardown", "passed", [(gplugin.USER_PROPERTY, ident),
                                                              (gplugin.USER_PROPERTY + "_items", stale)]))
    got = {r.check: r for r in c.results.values()}
    assert len(c.results) == 3
    assert [got[f"base.sysctl[{n}]"].status for n in "abc"] == [CheckStatus.PASS, CheckStatus.FAIL, CheckStatus.ERROR]
    b = got["base.sysctl[b]"]
    assert (b.expected, b.found, b.remediation, b.message) == (">= 2", "1", "reconfigure", "b is 1")
    assert got["base.sysctl[a]"].remediation == ""


def test_a_setup_error_applies_to_every_item_it_stands_for() -> None:
    ident = {"host": "gpu-01", "role": "base", "check": "base.sysctl", "items": ["a", "b"]}
    c = runner.Collector()
    c.pytest_runtest_logreport(_report("setup", "failed", [
        (gplugin.USER_PROPERTY, ident),
        (gplugin.USER_PROPERTY + "_result",
         {"outcome": "error", "message": "ssh to gpu-01 failed", "unreachable": True})]))
    c.pytest_runtest_logreport(_report("teardown", "passed", [(gplugin.USER_PROPERTY, ident)]))
    got = sorted(c.results.values(), key=lambda r: r.check)
    assert [r.check for r in got] == ["base.sysctl[a]", "base.sysctl[b]"]
    assert all(r.status is CheckStatus.ERROR and r.unreachable and r.message == "ssh to gpu-01 failed" for r in got)


def test_one_pytest_item_per_check_and_host_each_item_judged_as_a_direct_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real session on this machine (the local connection): the results are the ids
    collection lists, per-item checks ran as one pytest item each, and every item's status is
    what calling the check for that item alone gives."""
    spec = inventory_spec("lab", 0).model_copy(update={"address": "@local"})
    calls = pytest_items_run(monkeypatch)
    result = run_verify(load_inventory(LAB_INVENTORY), [spec], roles=ROLES, timeout_s=60)
    checks = [c for c in result.hosts[spec.node].checks if c.check != c.role]  # not the role-skipped rows
    assert sorted(c.check for c in checks) == sorted(list_checks([spec], roles=ROLES)[spec.node])
    per_item = [c for c in checks if "[" in c.check]
    assert len(per_item) >= 6
    assert len(calls) == len({c.check.split("[")[0] for c in checks}) < len(checks)
    host = testinfra.get_host("local://")
    probe = Probe(host, spec)
    modules = {r: role(r) for r in ROLES}
    for c in per_item:
        role_name, rest = c.check.split(".", 1)
        name, item = rest.removesuffix("]").split("[", 1)
        try:
            getattr(modules[role_name], f"test_{name}")(host, spec, probe, item)
            want = CheckStatus.PASS
        except CheckFailure:
            want = CheckStatus.FAIL
        except CouldNotRun:
            want = CheckStatus.ERROR
        except pytest.skip.Exception:
            want = CheckStatus.SKIP
        assert c.status is want, c


FAKE_CHECKS = '''
import sys, pytest
from gpuctl.checks.api import for_each, fail, CouldNotRun, Remediation

@for_each(lambda spec: ["ok", "bad", "cnr", "skip", "xfail", "crash", "ok"])
def test_many(host, spec, probe, item):
    if item == "bad": fail("bad thing", expected="x", found="y", remediation=Remediation.RECONFIGURE)
    if item == "cnr": raise CouldNotRun("nope")
    if item == "skip": pytest.skip("not here")
    if item == "xfail": pytest.xfail("known")
    if item == "crash": raise ValueError("boom")

@for_each(lambda spec: ["a", "b", "c"])
def test_sysexit(host, spec, probe, item):
    if item == "b": sys.exit(3)

@for_each(lambda spec: ["a", "b"])
def test_default(host, spec, probe, item, extra=1):
    assert extra == 1

@for_each(lambda spec: [])
def test_empty(host, spec, probe, item):
    pass
'''


def _fake_session(tmp_path: Path, text: str, role: str = "fake") -> tuple[int, dict[str, runner.CheckResult], str]:
    """One check session over a checks file of role `role` on this machine (local://); pytest
    keeps an imported checks module by its path under the roles folder, so each test its own role."""
    import contextlib
    import io
    import json

    spec = inventory_spec("lab", 0)
    (tmp_path / "roles" / role).mkdir(parents=True)
    (tmp_path / "roles" / role / "checks.py").write_text(text)
    (tmp_path / "specs.json").write_text(json.dumps({spec.node: spec.model_dump(mode="json")}))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    args = [str(tmp_path / "roles" / role / "checks.py"), "-c", str(tmp_path / "pytest.ini"),
            "--rootdir", str(tmp_path / "roles"), "--import-mode=importlib", "-p", "no:cacheprovider",
            "-p", "gpuctl.checks.plugin", *runner.NO_PLUGINS, "--hosts=local://",
            f"--gpuctl-specs={tmp_path / 'specs.json'}", "-q", "--tb=line"]
    collector = runner.Collector()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        code = pytest.main(args, plugins=[collector])
    return int(code), {r.check: r for r in collector.results.values()}, buf.getvalue()


def test_each_item_is_judged_as_pytest_judges_a_test(tmp_path: Path) -> None:
    """Found by review: a parameter with a default was asked of pytest's fixtures (every item
    'crashed'), and SystemExit on one item ended the host's whole item (the items before it
    lost their pass, those after it never ran)."""
    code, got, _ = _fake_session(tmp_path, FAKE_CHECKS)
    assert code == 1
    status = {k: v.status.value for k, v in got.items()}
    assert status == {
        "fake.many[ok]": "pass", "fake.many[bad]": "fail", "fake.many[cnr]": "error", "fake.many[skip]": "skip",
        "fake.many[xfail]": "skip", "fake.many[crash]": "error",
        "fake.sysexit[a]": "pass", "fake.sysexit[b]": "error", "fake.sysexit[c]": "pass",
        "fake.default[a]": "pass", "fake.default[b]": "pass"}  # fake.empty: no item, no result
    assert (got["fake.many[bad]"].expected, got["fake.many[bad]"].remediation) == ("x", "reconfigure")
    assert got["fake.many[crash]"].message == "check crashed: ValueError: boom"
    assert got["fake.many[xfail]"].message == "xfail: known"


def test_items_that_cannot_be_listed_name_the_check(tmp_path: Path) -> None:
    broken = "from gpuctl.checks.api import for_each\n\n@for_each(lambda spec: 1 / 0)\n" \
             "def test_broken(host, spec, probe, item):\n    pass\n"
    code, got, out = _fake_session(tmp_path, broken, role="broken")
    assert code == 4 and not got, out  # pytest's usage error: the run names the file, no result is made up
    assert "broken/checks.py::test_broken" in out and "ZeroDivisionError" in out
