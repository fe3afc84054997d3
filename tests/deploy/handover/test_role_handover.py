"""roles/handover on @fake hosts: accounts, keys, sudoers via visudo, and the provider key
removed only after the customer login probe succeeded in the same run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sshkeys import keypair

from gpuctl.handover import PROBE_MARK, plan_handover
from gpuctl.inventory import load_inventory
from gpuctl.rolerun import load_delivery_role
from gpuctl.spec import resolve

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[2] / "data" / "inventories" / "lab-placeholder.yaml"

pytestmark = pytest.mark.deploy



@pytest.fixture
def keys(tmp_path):
    return {n: keypair(tmp_path, n) for n in ("alice", "bob", "provider", "probe")}


def inventory(tmp_path: Path, keys: dict[str, str], remove: bool) -> Path:
    text = (LAB_INVENTORY).read_text()
    text += (f"handover:\n  remove_provider_key: {'true' if remove else 'false'}\n  accounts:\n"
             f"    - {{name: alice, ssh_keys: ['{keys['alice']}'], sudo: true}}\n"
             f"    - {{name: bob, ssh_keys: ['{keys['bob']}'], sudo: false}}\n")
    path = tmp_path / "handover.yaml"
    path.write_text(text)
    return path


def setup(tmp_path, keys, remove: bool, login_ok: bool | None = None):
    loaded = load_inventory(inventory(tmp_path, keys, remove))
    calls: list[tuple[str, int, str]] = []

    def check(address: str, port: int, user: str) -> tuple[bool, str]:
        calls.append((address, port, user))
        return (bool(login_ok), "logged in" if login_ok else "Permission denied (publickey)")

    plan = plan_handover(loaded, provider_key=keys["provider"] if remove else None,
                         probe_public_key=" ".join(keys["probe"].split()[:2]) if remove else None,
                         login_check=check if remove else None)
    return loaded, plan, calls


def test_accounts_keys_sudoers_fresh(fake, tmp_path, keys):
    loaded, plan, _ = setup(tmp_path, keys, remove=False)
    specs = resolve(loaded)
    run = fake.run(load_delivery_role("handover").install, specs, kwargs={"plan": plan},
                   responses={"visudo": ""})
    h = run["gpu-01"]
    assert h.status == "ok", h.error
    cmds = "\n".join(h.commands)
    assert re.search(r"useradd .*alice", cmds) and re.search(r"useradd .*bob", cmds)
    ak = h.files["/home/alice/.ssh/authorized_keys"]
    assert keys["alice"] in ak and keys["bob"] not in ak
    assert keys["bob"] in h.files["/home/bob/.ssh/authorized_keys"]
    sudo = h.files["/etc/sudoers.d/.gpuctl-alice.gpuctl-new"]
    assert "alice ALL=(ALL:ALL) NOPASSWD: ALL" in sudo
    assert "visudo -cf /etc/sudoers.d/.gpuctl-alice.gpuctl-new && mv -f" in cmds
    assert not any("gpuctl-bob.gpuctl-new" in f for f in h.files)  # bob has no sudo
    assert h.op("No sudo for bob").status == "unchanged"  # absent on a fresh host
    assert not any("authorized_keys" in c and "grep -vF" in c for c in h.commands)  # no key removal asked
    assert any("Create customer account alice" in o for o in h.changed_ops)


def test_sudoers_converged_is_noop(fake, tmp_path, keys):
    import hashlib

    loaded, plan, _ = setup(tmp_path, keys, remove=False)
    want = hashlib.sha256(plan.accounts[0].sudoers("ALL=(ALL:ALL) NOPASSWD: ALL").encode()).hexdigest()
    run = fake.run(load_delivery_role("handover").install, resolve(loaded)[:1], kwargs={"plan": plan},
                   responses={re.compile(r"sha256sum .*gpuctl-alice"): f"{want}  /etc/sudoers.d/gpuctl-alice"})
    h = run["gpu-01"]
    assert h.op("Give alice sudo").status == "unchanged"
    assert not any("visudo" in c for c in h.execute_commands)


def test_visudo_rejection_fails_the_host_and_leaves_no_file(fake, tmp_path, keys):
    loaded, plan, _ = setup(tmp_path, keys, remove=False)
    run = fake.run(load_delivery_role("handover").install, resolve(loaded)[:1], kwargs={"plan": plan},
                   responses={"visudo -cf": {"success": False, "stderr": "visudo rejected the sudoers rule"}})
    h = run["gpu-01"]
    assert h.failed and "Give alice sudo" in h.error
    cmd = next(c for c in h.commands if "visudo -cf" in c)
    assert "|| { rm -f /etc/sudoers.d/.gpuctl-alice.gpuctl-new" in cmd


def provider_present(keys):
    blob = keys["provider"].split()[1]
    return {re.compile(rf"grep -cF -- {re.escape(blob)}"): "1"}


def test_provider_key_removed_after_login_probe(fake, tmp_path, keys):
    loaded, plan, calls = setup(tmp_path, keys, remove=True, login_ok=True)
    specs = resolve(loaded)
    run = fake.run(load_delivery_role("handover").install, specs, kwargs={"plan": plan},
                   responses=provider_present(keys))
    for spec in specs:
        h = run[spec.node]
        assert h.status == "ok", h.error
        cmds = h.execute_commands
        add = next(i for i, c in enumerate(cmds) if PROBE_MARK in c and ">>" in c)
        cleanup = next(i for i, c in enumerate(cmds) if "sed -i" in c and PROBE_MARK in c)
        removal = next(i for i, c in enumerate(cmds) if "grep -vF" in c)
        assert add < cleanup < removal
        assert "/root/.ssh/authorized_keys" in cmds[removal] and keys["provider"].split()[1] in cmds[removal]
        assert "/home/alice/.ssh/authorized_keys" in cmds[add]
        assert h.op("Remove the provider key").status == "changed"
    assert sorted(calls) == sorted((s.address, s.ssh_port, "alice") for s in specs)


def test_failed_login_keeps_the_provider_key(fake, tmp_path, keys):
    loaded, plan, calls = setup(tmp_path, keys, remove=True, login_ok=False)
    run = fake.run(load_delivery_role("handover").install, resolve(loaded)[:1], kwargs={"plan": plan},
                   responses=provider_present(keys))
    h = run["gpu-01"]
    assert h.failed and "Prove alice can log in" in h.error
    assert calls  # the probe ran
    assert any("sed -i" in c and PROBE_MARK in c for c in h.execute_commands)  # probe key cleaned up
    assert not any("grep -vF" in c for c in h.commands)  # provider key never touched
    assert h.op("Remove the provider key").status == "not run"


def test_login_check_that_raises_still_cleans_up_and_refuses(fake, tmp_path, keys):
    loaded, plan, _ = setup(tmp_path, keys, remove=True, login_ok=True)

    def boom(address, port, user):
        raise OSError("ssh not found")

    from dataclasses import replace

    plan = replace(plan, login_check=boom)
    run = fake.run(load_delivery_role("handover").install, resolve(loaded)[:1], kwargs={"plan": plan},
                   responses=provider_present(keys))
    h = run["gpu-01"]
    assert h.failed
    assert any("sed -i" in c and PROBE_MARK in c for c in h.execute_commands)
    assert not any("grep -vF" in c for c in h.commands)


def test_provider_key_already_gone_is_noop(fake, tmp_path, keys):
    loaded, plan, calls = setup(tmp_path, keys, remove=True, login_ok=True)
    run = fake.run(load_delivery_role("handover").install, resolve(loaded)[:1], kwargs={"plan": plan},
                   responses={re.compile(r"grep -cF"): "0"})
    h = run["gpu-01"]
    assert h.status == "ok"
    assert not calls and not any(PROBE_MARK in c for c in h.commands)
    assert h.op("Remove the provider key").status in ("unchanged", "not run")


def test_role_vars_shell_reaches_the_accounts(fake, tmp_path, keys):
    """Inventory role_vars were read only from host data: handover_shell was accepted and ignored."""
    loaded, plan, _ = setup(tmp_path, keys, remove=False)
    specs = [s.model_copy(update={"role_vars": {**s.role_vars, "handover_shell": "/bin/sh"}}) for s in resolve(loaded)]
    run = fake.run(load_delivery_role("handover").install, specs, kwargs={"plan": plan}, responses={"visudo": ""})
    h = run["gpu-01"]
    assert h.status == "ok", h.error
    useradd = [c for c in h.commands if "useradd" in c]
    assert useradd and all("/bin/sh" in c and "/bin/bash" not in c for c in useradd), useradd
