"""Handover plan: public key validation, sudoers/authorized_keys rendering, refusals that
keep someone able to log in, the real SSH login check's failure path."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from sshkeys import keypair

from gpuctl.errors import InputError
from gpuctl.handover import (
    AccountPlan,
    make_probe_key,
    plan_handover,
    provider_public_key,
    ssh_login_check,
)
from gpuctl.inventory import load_inventory_text
from gpuctl.paths import inventories_dir
from gpuctl.pubkey import parse_public_key

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[2] / "data" / "inventories" / "lab-placeholder.yaml"



@pytest.fixture
def keys(tmp_path):
    return {n: keypair(tmp_path, n) for n in ("alice", "bob", "provider")}


def loaded_with(handover: str, ssh_key: str | None = None, ssh_user: str | None = None):
    text = (LAB_INVENTORY).read_text()
    if ssh_key:
        text = text.replace("key: ~/.local/state/gpuctl/lab/id_ed25519", f"key: {ssh_key}")
    if ssh_user:
        text = text.replace("ssh: {user: root,", f"ssh: {{user: {ssh_user},")
    return load_inventory_text(text + handover, "inv.yaml", inventories_dir())


RULE = "ALL=(ALL:ALL) NOPASSWD: ALL"
ALICE = AccountPlan(name="alice", keys=("x",), sudo=True, home="/home/alice")


def test_sudoers_rendering():
    text = ALICE.sudoers(RULE)  # the rendering roles/handover uploads (HandoverPlan's accounts)
    assert text.splitlines()[-1] == "alice ALL=(ALL:ALL) NOPASSWD: ALL"
    assert text.startswith("# Managed by gpuctl handover")


def test_sudoers_rendering_is_accepted_by_visudo(tmp_path):
    import shutil

    if not shutil.which("visudo"):
        pytest.skip("visudo not installed here")
    f = tmp_path / "gpuctl-alice"
    f.write_text(ALICE.sudoers(RULE))
    assert subprocess.run(["visudo", "-cf", str(f)], capture_output=True).returncode == 0
    f.write_text("alice ALL=(ALL:ALL NOPASSWD ALL\n")
    assert subprocess.run(["visudo", "-cf", str(f)], capture_output=True).returncode != 0


def test_public_key_validation(keys, tmp_path):
    assert parse_public_key(keys["alice"] + "\n") == keys["alice"]
    with pytest.raises(InputError, match="private key"):
        parse_public_key((tmp_path / "alice").read_text())
    with pytest.raises(InputError, match="not a supported key type"):
        parse_public_key('command="rm -rf /" ' + keys["alice"])
    with pytest.raises(InputError, match="not base64"):
        parse_public_key("ssh-ed25519 !!!notbase64")
    rsa_blob = keys["alice"].split()[1]
    with pytest.raises(InputError, match="not a ssh-rsa key"):
        parse_public_key(f"ssh-rsa {rsa_blob}")


def test_plan_renders_keys_and_probe_account(keys):
    loaded = loaded_with(
        "handover:\n  remove_provider_key: true\n  accounts:\n"
        f"    - {{name: bob, ssh_keys: ['{keys['bob']}'], sudo: false}}\n"
        f"    - {{name: alice, ssh_keys: ['{keys['alice']}', '{keys['bob']}']}}\n")
    plan = plan_handover(loaded, provider_key=keys["provider"])
    assert plan.probe_account == "alice"  # the first account with sudo
    assert plan.provider_authorized_keys == "/root/.ssh/authorized_keys"
    alice = plan.accounts[1]
    ak = alice.authorized_keys()
    assert keys["alice"] in ak and keys["bob"] in ak and "PRIVATE" not in ak
    assert alice.home == "/home/alice"


def test_removal_without_a_sudo_account_is_refused_when_the_inventory_loads(keys):
    """Refused by `inventory validate` (file:line), not at the end of a turnkey run."""
    with pytest.raises(InputError) as exc:
        loaded_with("handover:\n  remove_provider_key: true\n  accounts:\n"
                    f"    - {{name: bob, ssh_keys: ['{keys['bob']}'], sudo: false}}\n")
    assert any(re.match(r"inv\.yaml:\d+: handover\.remove_provider_key: .*lock everyone out", p)
               for p in exc.value.problems), exc.value.problems


def test_provider_key_listed_as_customer_key_is_refused(keys):
    loaded = loaded_with("handover:\n  remove_provider_key: true\n  accounts:\n"
                         f"    - {{name: alice, ssh_keys: ['{keys['provider']}']}}\n")
    with pytest.raises(InputError, match="also listed as a customer key"):
        plan_handover(loaded, provider_key=keys["provider"])


@pytest.mark.parametrize(("account", "needle"), [
    ("{name: alice, ssh_keys: ['ssh-ed25519 AAAA']}", r"ssh_keys\[0\]: the key data is not a ssh-ed25519 key"),
    ("{name: alice, ssh_keys: ['command=\"/bin/sh\" ssh-ed25519 AAAA']}", r"ssh_keys\[0\]: .*options are not accepted"),
    ("{name: alice, ssh_keys: [\"ssh-ed25519 AAAA\\nssh-rsa BBBB\"]}",
     r"ssh_keys\[0\]: the value holds the control character U\+000A"),
    ("{name: root, ssh_keys: ['KEY']}", r"name: root is not a customer account"),
])
def test_bad_accounts_and_keys_are_located_when_the_inventory_loads(keys, account: str, needle: str):
    """A malformed customer key or a root account was only found by `gpuctl handover`,
    i.e. at the end of a turnkey run after provision, verify and bench."""
    with pytest.raises(InputError) as exc:
        loaded_with("handover:\n  accounts:\n    - " + account.replace("KEY", keys["alice"]) + "\n")
    assert any(re.match(rf"inv\.yaml:\d+: handover\.accounts\[0\]\.{needle}", p) for p in exc.value.problems), \
        exc.value.problems


def test_the_ssh_user_is_not_handed_over(keys):
    with pytest.raises(InputError) as exc:
        loaded_with(f"handover:\n  accounts:\n    - {{name: ubuntu, ssh_keys: ['{keys['alice']}']}}\n",
                    ssh_user="ubuntu")
    assert any("handover.accounts[0].name: 'ubuntu' is the SSH user gpuctl works as" in p
               for p in exc.value.problems), exc.value.problems


def test_provider_public_key_from_pub_file_or_private_key(tmp_path, keys):
    loaded = loaded_with("", ssh_key=str(tmp_path / "provider"))
    assert provider_public_key(loaded) == keys["provider"]
    (tmp_path / "provider.pub").unlink()
    derived = provider_public_key(loaded)
    assert derived.split()[:2] == keys["provider"].split()[:2]


def test_probe_key_folder_is_private(tmp_path):
    key, public = make_probe_key(tmp_path / "probe")
    assert (tmp_path / "probe").stat().st_mode & 0o777 == 0o700
    assert public.startswith("ssh-ed25519 ") and key.is_file()


def test_ssh_login_check_reports_a_refused_login(tmp_path):
    """A real ssh client against a closed local port: the check says no, with the reason."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    key, _ = make_probe_key(tmp_path / "probe")
    loaded = loaded_with("")
    ok, detail = ssh_login_check(loaded, key, timeout_s=10)("127.0.0.1", port, "alice")
    assert not ok and "alice could not log in" in detail
