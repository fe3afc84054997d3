"""Deploy tier: the runner's engine over @fake hosts — failures, dry runs, role composition."""

from __future__ import annotations

import pytest
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import Command
from pyinfra.operations import server

pytestmark = pytest.mark.deploy


@deploy("toy")
def toy() -> None:
    present = host.get_fact(Command, command="cat /etc/toy-marker || true")
    if present != "toy":
        server.shell(name="Write the toy marker", commands=["echo toy > /etc/toy-marker"])
    else:
        server.shell(name="Write the toy marker", commands=[])
    server.shell(name="Run the toy step", commands=["toy-step --now"])


def test_failing_host_does_not_stop_others(fake):
    specs = fake.specs("lab.yaml")
    run = fake.run(toy, specs, host_responses={
        "gpu-01": {"toy-step": {"success": False, "stderr": "toy-step: disk on fire"}}})
    bad, good = run["gpu-01"], run["gpu-02"]
    assert bad.status == "failed"
    assert "disk on fire" in bad.error and "Run the toy step" in bad.error
    assert good.status == "ok"
    assert good.execute_commands == ["echo toy > /etc/toy-marker", "toy-step --now"]
    assert run.summary.exit_code() == 1
    js = run.summary.to_json()
    assert js["hosts"]["gpu-01"]["failed"] == 1 and js["hosts"]["gpu-02"]["changed"] == 2
