"""Deploy tier: deploy/provision.py composes roles in ROLE_ORDER with --only/--skip and the
NodeSpecs' skip reasons; plan runs facts only; a failing host does not stop the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.errors import InputError
from gpuctl.runner import roles as roles_mod
from gpuctl.runner.roles import load_role, parse_roles, select_roles
from gpuctl.runner.run import load_provision_deploy
from gpuctl.runner.summary import RunSummary
from gpuctl.spec import ROLE_ORDER

pytestmark = pytest.mark.deploy

ROLE_SRC = '''
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import Command
from pyinfra.operations import server


@deploy("{role}")
def install():
    state = host.get_fact(Command, command="cat /etc/{role}.done || true")
    server.shell(name="configure", commands=[] if state == "done" else ["configure-{role}"])
'''


@pytest.fixture
def toy_roles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every role of ROLE_ORDER as a one-operation toy role in a temporary roles dir."""
    for role in ROLE_ORDER:
        (tmp_path / role).mkdir()
        (tmp_path / role / "__init__.py").write_text("")
        (tmp_path / role / "install.py").write_text(ROLE_SRC.format(role=role))
    monkeypatch.setattr(roles_mod, "roles_dir", lambda: tmp_path)
    return tmp_path


def _ran_roles(host) -> list[str]:
    return [o.role for o in host.ops]


def test_roles_run_in_order_and_respect_only(fake, toy_roles) -> None:
    specs = fake.specs("lab.yaml")
    choices = select_roles(specs, only=["cuda,base", "nccl"])
    run = fake.run(load_provision_deploy().provision, specs, args=(choices,), compose=True)
    h = run["gpu-01"]
    assert _ran_roles(h) == ["base", "cuda", "nccl"]  # ROLE_ORDER, not the --only order
    assert h.execute_commands == ["configure-base", "configure-cuda", "configure-nccl"]
    js = RunSummary("provision", {n: x.result for n, x in run.hosts.items()}, choices).to_json()
    statuses = {r["role"]: r["status"] for r in js["roles"]}
    assert statuses["base"] == "runs" and statuses["dcgm"] == "skipped: not in --only"


def test_skip_and_spec_reasons_are_reported(fake, toy_roles) -> None:
    specs = fake.specs("lab.yaml")
    choices = select_roles(specs, skip=["nvidia_driver"])
    by_name = {c.name: c for c in choices}
    assert by_name["nvidia_driver"].reason == "--skip"
    spec_skips = {r: why for r, why in specs[0].roles.items() if why}
    assert spec_skips, "the lab spec skips some role (e.g. no Lustre)"
    for role, why in spec_skips.items():
        assert by_name[role].reason == why
    run = fake.run(load_provision_deploy().provision, specs, args=(choices,), compose=True)
    ran = set(_ran_roles(run["gpu-02"]))
    assert "nvidia_driver" not in ran and not (ran & set(spec_skips))
    assert ran == {c.name for c in choices if c.runs}


def test_roles_must_agree_across_nodes(fake) -> None:
    specs = fake.specs("lab.yaml")
    odd = specs[1].model_copy(update={"roles": {**specs[1].roles, "base": "odd one out"}})
    with pytest.raises(InputError, match="runs on some nodes only"):
        select_roles([specs[0], odd])


def test_missing_role_is_an_error_for_provision_and_reported_for_plan(fake, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(roles_mod, "roles_dir", lambda: tmp_path)
    specs = fake.specs("lab.yaml")
    with pytest.raises(InputError, match="--skip"):
        select_roles(specs)
    choices = select_roles(specs, require_available=False)
    assert all(not c.runs for c in choices)
    assert any("install.py not found" in c.reason for c in choices)


def test_unknown_roles_rejected() -> None:
    with pytest.raises(InputError, match="unknown role"):
        parse_roles(["base,gpu_magic"])
    with pytest.raises(InputError, match="both in --only and --skip"):
        select_roles([], only=["base"], skip=["base"])
    with pytest.raises(InputError, match="unknown role"):
        load_role("nope")


def test_plan_touches_nothing(fake, toy_roles) -> None:
    specs = fake.specs("lab.yaml")
    choices = select_roles(specs, only=["base", "cuda"])
    run = fake.run(load_provision_deploy().provision, specs, args=(choices,), compose=True, dry=True,
                   host_responses={"gpu-02": {"cat /etc/cuda.done": "done"}})
    for node in ("gpu-01", "gpu-02"):
        h = run[node]
        # only the facts ran: one per role, nothing during execution, no operation command
        assert h.commands == h.prepare_commands == ["cat /etc/base.done || true", "cat /etc/cuda.done || true"]
        assert h.execute_commands == []
        assert not any(c.startswith("configure-") for c in h.commands)
    assert run["gpu-01"].changed_ops == ["base | configure", "cuda | configure"]
    assert run["gpu-02"].changed_ops == ["base | configure"]
    assert run["gpu-02"].op("cuda | configure").status == "no change"
    assert run["gpu-01"].op("cuda | configure").commands == ["configure-cuda"]


def test_failing_host_reported_others_complete(fake, toy_roles) -> None:
    specs = fake.specs("lab.yaml")
    choices = select_roles(specs, only=["base", "cuda", "nccl"])
    run = fake.run(load_provision_deploy().provision, specs, args=(choices,), compose=True,
                   host_responses={"gpu-01": {"configure-cuda": {"success": False,
                                                                   "stderr": ["E: Unable to locate package"]}}})
    bad, good = run["gpu-01"], run["gpu-02"]
    assert bad.status == "failed"
    assert bad.error == "cuda | configure: `configure-cuda` failed: E: Unable to locate package"
    assert [o.status for o in bad.ops] == ["changed", "failed", "not run"]
    assert good.status == "ok" and good.execute_commands[-1] == "configure-nccl"
    js = run.summary.to_json()["hosts"]
    assert (js["gpu-01"]["changed"], js["gpu-01"]["failed"], js["gpu-01"]["not_run"]) == (1, 1, 1)
    assert js["gpu-01"]["status"] == "failed" and js["gpu-02"]["status"] == "ok"
    assert run.summary.exit_code() == 1


def test_fact_failure_in_prepare_fails_only_that_host(fake, toy_roles) -> None:
    specs = fake.specs("lab.yaml")
    choices = select_roles(specs, only=["base"])
    run = fake.run(load_provision_deploy().provision, specs, args=(choices,), compose=True,
                   host_responses={"gpu-02": {"cat /etc/base.done": {"success": False, "stderr": "Permission denied"}}})
    assert run["gpu-02"].status == "failed"
    assert "Permission denied" in run["gpu-02"].error
    assert run["gpu-01"].status == "ok" and run["gpu-01"].execute_commands == ["configure-base"]


def test_role_exception_in_prepare_fails_only_that_host(fake, toy_roles, capfd) -> None:
    (toy_roles / "cudnn" / "install.py").write_text(
        "from pyinfra import host\nfrom pyinfra.api import deploy\n\n"
        "@deploy('cudnn')\ndef install():\n"
        "    if host.name.endswith('gpu-02'):\n        raise TypeError('render() got an unexpected argument')\n")
    specs = fake.specs("lab.yaml")
    choices = select_roles(specs, only=["base", "cudnn"])
    run = fake.run(load_provision_deploy().provision, specs, args=(choices,), compose=True)
    assert run["gpu-02"].status == "failed"
    assert run["gpu-02"].error == "TypeError: render() got an unexpected argument"
    assert run["gpu-02"].execute_commands == []
    assert run["gpu-01"].status == "ok" and run["gpu-01"].execute_commands == ["configure-base"]
    assert "Traceback" not in capfd.readouterr().err  # gevent must not print it
