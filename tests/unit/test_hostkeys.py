"""gpuctl.hostkeys against a real paramiko SSH server on 127.0.0.1 (issue 12 item 3)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import paramiko
import pytest

from gpuctl import hostkeys
from gpuctl.runner.inventory import SshSettings, ssh_host_data, ssh_targets
from gpuctl.spec import NodeSpec


class _Server(paramiko.ServerInterface):
    def check_auth_password(self, username, password):
        return paramiko.AUTH_SUCCESSFUL

    def get_allowed_auths(self, username):
        return "password"


class _ServerHandle:
    """A paramiko SSH server on 127.0.0.1 for one test: its accept loop and every transport
    it started are closed and joined by `stop()` (leaked transport threads once hung a later
    test's fork in the same pytest process)."""

    def __init__(self, key: paramiko.PKey) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(4)
        self._sock.settimeout(0.2)
        self._key = key
        self._stop = threading.Event()
        self._transports: list[paramiko.Transport] = []
        self.port: int = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._loop, name=f"test-sshd-{self.port}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            t = paramiko.Transport(conn)
            self._transports.append(t)
            t.add_server_key(self._key)
            with contextlib.suppress(Exception):
                t.start_server(server=_Server())
        self._sock.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for t in self._transports:
            t.close()
            t.join(timeout=5)
        assert not self._thread.is_alive() and not any(t.is_alive() for t in self._transports)


@contextlib.contextmanager
def _serve(key: paramiko.PKey) -> Iterator[int]:
    server = _ServerHandle(key)
    try:
        yield server.port
    finally:
        server.stop()


def _connect(port: int, policy: hostkeys.Policy) -> None:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(policy.paramiko_policy())
    try:
        client.connect("127.0.0.1", port=port, username="root", password="x", look_for_keys=False, allow_agent=False,
                       timeout=5, banner_timeout=5, auth_timeout=5)
    finally:
        client.close()


def _key() -> paramiko.PKey:
    return paramiko.RSAKey.generate(1024)


def test_tofu_records_then_accepts_then_refuses_changed(tmp_path):
    k1, k2 = _key(), _key()
    pol = hostkeys.Policy(str(tmp_path / "gpuctl_kh"), (str(tmp_path / "user_kh"),), strict=False)
    with _serve(k1) as port:
        _connect(port, pol)
        text = (tmp_path / "gpuctl_kh").read_text()
        assert text.startswith(f"[127.0.0.1]:{port} ssh-rsa ")
        _connect(port, pol)  # same key: accepted
        assert (tmp_path / "gpuctl_kh").read_text() == text  # not recorded twice
    with _serve(k2) as port2:
        (tmp_path / "gpuctl_kh").write_text(text.replace(f":{port} ", f":{port2} "))
        with pytest.raises(hostkeys.HostKeyChanged) as exc:
            _connect(port2, pol)
        msg = str(exc.value)
        assert f"[127.0.0.1]:{port2}" in msg
        assert hostkeys.fingerprint(k1) in msg and hostkeys.fingerprint(k2) in msg
        assert (tmp_path / "gpuctl_kh").read_text() == text.replace(f":{port} ", f":{port2} ")  # never overwritten


def test_strict_accepts_hashed_user_entry_and_refuses_unknown(tmp_path):
    k1 = _key()
    with _serve(k1) as port:
        name = f"[127.0.0.1]:{port}"
        user = tmp_path / "user_kh"
        user.write_text(f"{paramiko.HostKeys.hash_host(name)} ssh-rsa {k1.get_base64()}\n")
        _connect(port, hostkeys.Policy(str(tmp_path / "g"), (str(user),), strict=True))
        with pytest.raises(paramiko.SSHException, match="strict"):
            _connect(port, hostkeys.Policy(str(tmp_path / "g2"), (), strict=True))


def test_pyinfra_data_and_seed(tmp_path, monkeypatch):
    k1, k2 = _key(), _key()
    rec, user = tmp_path / "gpuctl_kh", tmp_path / "user_kh"
    monkeypatch.setenv("GPUCTL_KNOWN_HOSTS", str(rec))
    monkeypatch.setenv("GPUCTL_USER_KNOWN_HOSTS", str(user))
    user.write_text(f"[10.0.0.1]:2222 ssh-rsa {k1.get_base64()}\n")
    spec = NodeSpec.model_construct(node="n1", address="10.0.0.1", ssh_port=2222, ssh_user="root")
    data = ssh_host_data(spec, SshSettings())
    assert data["ssh_known_hosts_file"] == str(rec)
    assert data["ssh_strict_host_key_checking"] == "accept-new"
    assert ssh_host_data(spec, SshSettings(strict_host_keys=True))["ssh_strict_host_key_checking"] == "yes"
    ssh_targets([spec], SshSettings())
    assert k1.get_base64() in rec.read_text()  # pyinfra sees the user's key
    rec.write_text(f"[10.0.0.1]:2222 ssh-rsa {k2.get_base64()}\n")
    errs = hostkeys.Policy.for_inventory(None, False).seed(["[10.0.0.1]:2222"])
    assert "HOST KEY CHANGED" in errs["[10.0.0.1]:2222"]
    assert k1.get_base64() not in rec.read_text()
    own = tmp_path / "inv_kh"
    assert ssh_host_data(spec, SshSettings(known_hosts=str(own)))["ssh_known_hosts_file"] == str(own)


def test_verify_backend_refuses_changed_key_without_known_hosts(tmp_path, monkeypatch):
    from gpuctl.checks.paramiko_backend import CheckedParamikoBackend

    k1, k2 = _key(), _key()
    rec = tmp_path / "gpuctl_kh"
    monkeypatch.setenv("GPUCTL_KNOWN_HOSTS", str(rec))
    monkeypatch.setenv("GPUCTL_USER_KNOWN_HOSTS", str(tmp_path / "user_kh"))
    with _serve(k2) as port:
        (tmp_path / "user_kh").write_text(f"[127.0.0.1]:{port} ssh-rsa {k1.get_base64()}\n")
        cfg = tmp_path / "ssh_config"
        cfg.write_text(f"Host n1\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
                       "  StrictHostKeyChecking accept-new\n  ConnectTimeout 5\n")
        with pytest.raises(hostkeys.HostKeyChanged, match=r"127\.0\.0\.1"):
            _ = CheckedParamikoBackend("n1", ssh_config=str(cfg)).client
        assert not rec.exists() or k2.get_base64() not in rec.read_text()
        # the refused connection is closed at once, not left running until the server goes
        client_transports = [t for t in threading.enumerate()
                             if isinstance(t, paramiko.Transport) and not t.server_mode]
        for t in client_transports:
            t.join(timeout=2)
        assert [t for t in client_transports if t.is_alive()] == []
