"""Unit: inventory building, host data, exit codes, JSON shape, CLI options of plan/provision."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.cli.main import main
from gpuctl.deploy_context import OPTIONS_KEY, SPEC_KEY, RunOptions
from gpuctl.errors import ExitCode
from gpuctl.inventory import load_inventory
from gpuctl.runner.engine import HostResult, OpResult, one_line
from gpuctl.runner.inventory import SshSettings, build_inventory, expand_path, ssh_host_data, ssh_targets
from gpuctl.runner.reboot import REBOOT_GATE_KEY, RebootGate
from gpuctl.runner.roles import RoleChoice
from gpuctl.runner.summary import RunSummary, exit_code_for
from gpuctl.spec import resolve

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"


@pytest.fixture(scope="module")
def lab():
    # the placeholder as committed: `gpuctl lab up` rewrites inventories/lab.yaml itself
    loaded = load_inventory(Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml")
    return loaded, resolve(loaded)


def test_ssh_settings_from_inventory(lab) -> None:
    loaded, specs = lab
    ssh = SshSettings.from_loaded(loaded)
    assert ssh.key == str(Path("~/.local/state/gpuctl/lab/id_ed25519").expanduser())
    assert not ssh.strict_host_keys
    assert SshSettings.from_loaded(loaded, strict_host_keys=True).strict_host_keys
    data = ssh_host_data(specs[0], ssh)
    assert data["ssh_hostname"] == "127.0.0.1" and data["ssh_port"] == 22201
    assert data["ssh_user"] == "root" and data["ssh_key"] == ssh.key
    assert data["ssh_strict_host_key_checking"] == "accept-new"
    assert ssh_host_data(specs[0], SshSettings(strict_host_keys=True))["ssh_strict_host_key_checking"] == "yes"
    assert 0 < data["ssh_connect_retries"] <= 2
    assert data["ssh_paramiko_connect_kwargs"]["banner_timeout"] == ssh.connect_timeout_s
    assert "_sudo" not in data  # root needs no sudo


def test_non_root_user_gets_sudo(lab) -> None:
    _, specs = lab
    spec = specs[0].model_copy(update={"ssh_user": "ops"})
    assert ssh_host_data(spec, SshSettings())["_sudo"] is True


def test_expand_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert expand_path("~/k", Path("/x")) == str(tmp_path / "k")
    assert expand_path("keys/k", Path("/inv")) == "/inv/keys/k"
    assert expand_path(None, Path("/x")) is None


def test_host_data_carries_spec_options_gate(lab) -> None:
    loaded, specs = lab
    targets = ssh_targets(specs, SshSettings.from_loaded(loaded))
    opts, gate = RunOptions(max_unavailable=2), RebootGate(2)
    inv = build_inventory(targets, opts, gate)
    hosts = {h.name: h for h in inv}
    assert set(hosts) == {"gpu-01", "gpu-02"}
    data = inv.get_host("gpu-02").data
    assert data.get(SPEC_KEY).node == "gpu-02"
    assert data.get(OPTIONS_KEY) == opts
    assert data.get(REBOOT_GATE_KEY) is gate  # pyinfra copies host data values; the gate stays one object


def _host(node: str, status: str = "ok", ops: tuple[str, ...] = (), error: str = "") -> HostResult:
    return HostResult(node=node, host=node, status=status, error=error,
                      ops=[OpResult(f"op{i}", None, s) for i, s in enumerate(ops)], seconds=1.5)


def test_exit_codes() -> None:
    assert exit_code_for([_host("a", ops=("changed",)), _host("b", ops=("unchanged",))]) == ExitCode.OK
    assert exit_code_for([_host("a", ops=("changed",)), _host("b", "failed", ("failed",))]) == 1
    assert exit_code_for([_host("a", ops=("changed",)), _host("b", "unreachable")]) == 1
    assert exit_code_for([_host("a", "unreachable"), _host("b", "unreachable")]) == ExitCode.EXECUTION
    assert exit_code_for([_host("a", "failed")]) == ExitCode.EXECUTION  # failed before any operation
    assert exit_code_for([]) == ExitCode.EXECUTION


def test_json_shape() -> None:
    hosts = {"a": _host("a", ops=("changed", "unchanged", "unchanged")),
             "b": _host("b", "failed", ("changed", "failed", "not run"), error="x: boom")}
    hosts["a"].rebooted = True
    js = RunSummary("provision", hosts, [RoleChoice("base"), RoleChoice("cuda", "--skip")], run_id="r1").to_json()
    assert js["command"] == "provision" and js["exit_code"] == 1 and js["run_id"] == "r1"
    assert js["roles"] == [{"role": "base", "status": "runs"}, {"role": "cuda", "status": "skipped: --skip"}]
    a, b = js["hosts"]["a"], js["hosts"]["b"]
    for h in (a, b):
        assert {"changed", "unchanged", "failed", "rebooted", "status", "error", "seconds"} <= set(h)
    assert (a["changed"], a["unchanged"], a["failed"], a["rebooted"], a["status"], a["error"]) == \
        (1, 2, 0, True, "ok", None)
    assert (b["changed"], b["failed"], b["not_run"], b["status"], b["error"]) == (1, 1, 1, "failed", "x: boom")


def test_plan_json_shape() -> None:
    h = _host("a", ops=("will change", "no change", "may change"))
    h.ops[0].commands = ["apt-get install -y x=1"]
    js = RunSummary("plan", {"a": h}, dry=True).to_json()["hosts"]["a"]
    assert (js["will_change"], js["may_change"], js["no_change"]) == (1, 1, 1)
    assert js["changes"][0] == {"operation": "op0", "role": None, "status": "will change",
                                "commands": ["apt-get install -y x=1"]}


def test_one_line() -> None:
    assert one_line("\n  first  \nsecond") == "first"
    assert len(one_line("x" * 500)) == 240


def test_cli_options_parse_and_validate(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["provision", "--help"])
    assert res.exit_code == 0
    for opt in ("--limit", "--only", "--skip", "--yes", "--parallel", "--max-unavailable", "--allow-wipe",
                "--strict-host-keys", "--json"):
        assert opt in res.output
    res = runner.invoke(main, ["plan", "--help"])
    assert res.exit_code == 0 and "--only" in res.output and "--json" in res.output
    # bad input is refused before anything connects: exit 2, no traceback
    inv = str(LAB_INVENTORY)
    res = runner.invoke(main, ["plan", inv, "--only", "gpu_magic"])
    assert res.exit_code == 2 and "unknown role" in res.output
    res = runner.invoke(main, ["plan", inv, "--limit", "nomatch-*"])
    assert res.exit_code == 2
    res = runner.invoke(main, ["provision", inv, "--yes", "--max-unavailable", "0"])
    assert res.exit_code == 2 and "--max-unavailable" in res.output
    res = runner.invoke(main, ["plan", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 2


def test_cli_import_does_not_import_the_runner() -> None:
    """The runner (and its gevent patch) loads only when plan/provision run."""
    code = ("import sys; from gpuctl.cli.main import main; "
            "print(','.join(m for m in ('gpuctl.runner.engine', 'gpuctl.runner.run') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_failed_verification_fails_provision() -> None:
    s = RunSummary("provision", {"a": _host("a", ops=("changed",))})
    assert s.exit_code() == ExitCode.OK
    s.verify = {"status": "fail"}
    assert s.exit_code() == ExitCode.CHECKS_FAILED
    s.verify = {"status": "pass"}
    assert s.exit_code() == ExitCode.OK and s.to_json()["verify"] == {"status": "pass"}


def test_provision_verifies_the_roles_that_ran_on_its_own_specs(lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """After provisioning, run_verify gets this run's inventory, specs, record, --limit, --parallel
    and the roles that ran (one direct call; no signature probing, no 'if available')."""
    from gpuctl.checks.model import VerifyResult
    from gpuctl.runner.run import Prepared, RunRequest, _run_verify

    seen: dict[str, object] = {}

    def fake_verify(loaded, specs, record, limit, parallel, *, roles):  # type: ignore[no-untyped-def]
        seen.update(loaded=loaded, specs=specs, record=record, limit=limit, parallel=parallel, roles=roles)
        return VerifyResult({}, run_id="r1")

    monkeypatch.setattr("gpuctl.checks.runner.run_verify", fake_verify)
    loaded, specs = lab
    roles = [RoleChoice("base", ""), RoleChoice("nvidia_driver", "--skip")]
    prepared = Prepared(loaded, specs, roles, RunOptions(), [])
    out = _run_verify(prepared, "rec", RunRequest(inventory=Path("x"), limit=("gpu-01",), parallel=4))  # type: ignore[arg-type]
    assert seen == {"loaded": loaded, "specs": specs, "record": "rec", "limit": ("gpu-01",), "parallel": 4,
                    "roles": ("base",)}
    assert out == VerifyResult({}, run_id="r1").to_json()
