"""verify's gpuctl:// backend (in-process paramiko, added for scale): host keys are
checked as OpenSSH would from the run's ssh_config, and connection failures reach the
probe as "ssh failed" (RuntimeError carrying stderr), never as a crash."""

from __future__ import annotations

import socket
from pathlib import Path

import paramiko
import pytest
from testinfra import backend as tbackend

from gpuctl import hostkeys
from gpuctl.checks import paramiko_backend as pb

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"


def _config(tmp_path: Path, strict: str, known_hosts: Path) -> Path:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host gpu-01\n  HostName 127.0.0.1\n  Port 9\n  User root\n  IdentityFile {tmp_path / 'k'}\n"
                   f"  UserKnownHostsFile {known_hosts}\n  StrictHostKeyChecking {strict}\n  ConnectTimeout 2\n")
    return cfg


class _Recorder:
    def __init__(self) -> None:
        self.kwargs: dict = {}
        self.policy = None
        self.loaded: list[str] = []

    def __call__(self):  # stands in for paramiko.SSHClient()
        rec = self

        class Client:
            def load_host_keys(self, path: str) -> None:
                rec.loaded.append(path)

            def set_missing_host_key_policy(self, policy) -> None:
                rec.policy = policy

            def connect(self, **kwargs) -> None:
                rec.kwargs = kwargs

            def close(self) -> None:
                pass

        return Client()


@pytest.mark.parametrize(("strict", "is_strict"), [("yes", True), ("accept-new", False), ("no", False)])
def test_policy_and_connect_arguments_follow_the_ssh_config(tmp_path, monkeypatch, strict, is_strict) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("127.0.0.1 ssh-ed25519 AAAA\n")
    rec = _Recorder()
    monkeypatch.setattr(pb.paramiko, "SSHClient", rec)
    be = pb.CheckedParamikoBackend("gpu-01", ssh_config=str(_config(tmp_path, strict, kh)))
    be.client  # noqa: B018 - connects
    assert isinstance(rec.policy, hostkeys.MissingKeyPolicy)  # gpuctl.hostkeys checks every key
    assert rec.policy.policy.files == (str(kh),) and rec.policy.policy.strict is is_strict
    assert rec.loaded == []
    assert rec.kwargs["hostname"] == "127.0.0.1" and rec.kwargs["port"] == 9
    assert rec.kwargs["username"] == "root" and rec.kwargs["key_filename"] == str(tmp_path / "k")
    assert rec.kwargs["look_for_keys"] is False and rec.kwargs["allow_agent"] is False
    assert rec.kwargs["timeout"] == 2.0
    pb.close_all()


def test_accept_new_appends_the_key_under_the_hosts_name(tmp_path) -> None:
    kh = tmp_path / "known_hosts"
    key = paramiko.Ed25519Key.from_private_key_file(str(_keyfile(tmp_path)))
    hostkeys.Policy(str(kh)).paramiko_policy().missing_host_key(None, "[127.0.0.1]:2222", key)  # type: ignore[arg-type]
    assert kh.read_text() == f"[127.0.0.1]:2222 ssh-ed25519 {key.get_base64()}\n"


def _keyfile(tmp_path: Path) -> Path:
    import subprocess

    path = tmp_path / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def test_unreachable_host_is_a_runtime_error_with_stderr(tmp_path) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host gpu-01\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
                   f"  UserKnownHostsFile {tmp_path / 'kh'}\n  StrictHostKeyChecking yes\n  ConnectTimeout 2\n")
    be = pb.CheckedParamikoBackend("gpu-01", ssh_config=str(cfg))
    with pytest.raises(RuntimeError) as info:
        be.run("true")
    failure = info.value.args[0]
    assert failure.rc == 255 and failure.stderr  # what Probe reads as the unreachable reason
    assert "client" not in be.__dict__  # the next command reconnects


def test_registered_with_testinfra() -> None:
    pb.register()
    pb.register()
    assert tbackend.BACKENDS["gpuctl"] == "gpuctl.checks.paramiko_backend.CheckedParamikoBackend"
    assert tbackend.get_backend_class("gpuctl") is pb.CheckedParamikoBackend


def test_generated_ssh_config_read_once_matches_paramiko(tmp_path) -> None:
    from gpuctl.checks.sshconfig import render_ssh_config
    from gpuctl.inventory import load_inventory
    from gpuctl.spec import resolve

    specs = resolve(load_inventory(LAB_INVENTORY))
    cfg = tmp_path / "ssh_config"
    cfg.write_text(render_ssh_config(specs, key="/k/id", known_hosts="/k/known hosts", strict_host_keys=False,
                                     control_dir=tmp_path))
    ours = pb._host_config(str(cfg), specs[0].node)
    theirs = paramiko.SSHConfig.from_path(str(cfg)).lookup(specs[0].node)
    for key in ("hostname", "port", "user", "identityfile", "userknownhostsfile", "stricthostkeychecking",
                "connecttimeout"):
        assert ours[key] == theirs[key], key
    assert pb._host_config(str(cfg), "not-a-node") == {}
    wild = tmp_path / "wild"
    wild.write_text("Host *\n  User someone\n")  # patterns: paramiko's own lookup is used
    assert pb._host_config(str(wild), "x")["user"] == "someone"
