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

    def __init__(self, key: paramiko.PKey, *more: paramiko.PKey) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(4)
        self._sock.settimeout(0.2)
        self._keys = (key, *more)
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
            for k in self._keys:
                t.add_server_key(k)
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
def _serve(key: paramiko.PKey, *more: paramiko.PKey) -> Iterator[int]:
    server = _ServerHandle(key, *more)
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


# -- known_hosts read with OpenSSH semantics (issue 17 item 4): one test per line type -----------
# Each line below names the host in a form gpuctl used to skip; the offered key must then be
# judged as OpenSSH would, in the verify path (Policy.check on the real offered key) and in the
# provision path (the file pyinfra reads through paramiko, after `seed`), and never recorded.


def _pyinfra_connect(port: int, known_hosts: str, strict: str = "accept-new") -> None:
    """Connect as provision does: pyinfra's SSHClient reading one known_hosts file."""
    from pyinfra.connectors.sshuserclient.client import SSHClient

    client = SSHClient()
    try:
        client.connect("127.0.0.1", port=port, username="root", password="x", look_for_keys=False,
                       allow_agent=False, timeout=5, _pyinfra_ssh_known_hosts_file=known_hosts,
                       _pyinfra_ssh_strict_host_key_checking=strict,
                       _pyinfra_ssh_paramiko_connect_kwargs={"banner_timeout": 5, "auth_timeout": 5})
    finally:
        client.close()


def _both_paths_refuse(tmp_path, k_offered, user_line, *, verify_exc, seed_error: str | None, match: str):
    """`user_line` (a format string over {port}, or a function of the port) in the user's known_hosts; the server offers
    `k_offered`. Verify refuses with `verify_exc`; provision (seed, then pyinfra) refuses with
    `seed_error` from seed or, when None, paramiko's BadHostKeyException; nothing recorded."""
    with _serve(k_offered) as port:
        user = tmp_path / "user_kh"
        user.write_text((user_line(port) if callable(user_line) else user_line.format(port=port)) + "\n")
        rec = tmp_path / f"rec-{port}"
        pol = hostkeys.Policy(str(rec), (str(user),), strict=False)
        with pytest.raises(verify_exc, match=match):
            _connect(port, pol)
        assert not rec.exists() or k_offered.get_base64() not in rec.read_text()
        name = f"[127.0.0.1]:{port}"
        errs = pol.seed([name])
        if seed_error is not None:
            assert seed_error in errs[name]
        else:
            assert errs == {}
            with pytest.raises(paramiko.BadHostKeyException):
                _pyinfra_connect(port, str(rec))
        assert not rec.exists() or k_offered.get_base64() not in rec.read_text()


def test_pattern_entry_with_another_key_refuses(tmp_path):
    k1, k2 = _key(), _key()
    _both_paths_refuse(tmp_path, k1, "[127.0.0.*]:{port} ssh-rsa " + k2.get_base64(),
                       verify_exc=hostkeys.HostKeyChanged, seed_error=None, match="HOST KEY CHANGED")


def test_question_mark_and_list_pattern_with_another_key_refuses(tmp_path):
    k1, k2 = _key(), _key()
    _both_paths_refuse(tmp_path, k1, "other,[127.0.0.?]:{port} ssh-rsa " + k2.get_base64(),
                       verify_exc=hostkeys.HostKeyChanged, seed_error=None, match="HOST KEY CHANGED")


def test_hashed_entry_with_another_key_refuses(tmp_path):
    k1, k2 = _key(), _key()
    _both_paths_refuse(tmp_path, k1, lambda port: f"{paramiko.HostKeys.hash_host(f'[127.0.0.1]:{port}')} ssh-rsa "
                       f"{k2.get_base64()}",
                       verify_exc=hostkeys.HostKeyChanged, seed_error=None, match="HOST KEY CHANGED")


def test_revoked_key_refused(tmp_path):
    k1 = _key()
    _both_paths_refuse(tmp_path, k1, "@revoked * ssh-rsa " + k1.get_base64(),
                       verify_exc=hostkeys.HostKeyRefused, seed_error="@revoked", match="REVOKED")


def test_revoked_key_refused_even_when_also_listed(tmp_path):
    k1 = _key()
    _both_paths_refuse(tmp_path, k1, "@revoked * ssh-rsa {k}\n[127.0.0.1]:{{port}} ssh-rsa {k}".format(
                           k=k1.get_base64()),
                       verify_exc=hostkeys.HostKeyRefused, seed_error="@revoked", match="REVOKED")


def test_cert_authority_only_refused_with_clear_message(tmp_path):
    k1, ca = _key(), _key()
    _both_paths_refuse(tmp_path, k1, "@cert-authority *.example,[127.0.0.1]:* ssh-rsa " + ca.get_base64(),
                       verify_exc=hostkeys.HostKeyRefused, seed_error="@cert-authority",
                       match="does not verify host certificates")


def test_unreadable_key_line_counts_as_known(tmp_path):
    k1 = _key()
    _both_paths_refuse(tmp_path, k1, "[127.0.0.1]:{port} ssh-future AAAAB3NzaC1yc2E=",
                       verify_exc=hostkeys.HostKeyChanged, seed_error="unreadable", match="cannot read")


def test_host_name_in_another_case_and_pattern_rules():
    k1, k2 = _key(), _key()
    assert hostkeys.host_matches("GPU-01.Example", "gpu-01.example")
    assert hostkeys.host_matches("gpu-*", "GPU-01")
    assert hostkeys.host_matches("[10.0.0.?]:2222", "[10.0.0.7]:2222")
    assert not hostkeys.host_matches("[10.0.0.?]:2222", "[10.0.0.17]:2222")
    assert not hostkeys.host_matches("10.0.0.*", "[10.0.0.1]:2222")  # another port is another host
    assert not hostkeys.host_matches("10.0.0.*,!10.0.0.1", "10.0.0.1")
    assert hostkeys.host_matches("10.0.0.*,!10.0.0.1", "10.0.0.2")
    assert not hostkeys.host_matches("!10.0.0.1", "10.0.0.2")  # a negation alone matches nothing
    assert hostkeys.host_matches(paramiko.HostKeys.hash_host("gpu-01"), "GPU-01")
    assert not hostkeys.host_matches("|1|bad|salt", "gpu-01")
    del k1, k2


def test_case_and_pattern_seen_by_verify_and_seeded_for_provision(tmp_path):
    k1, k2 = _key(), _key()
    user = tmp_path / "user_kh"
    user.write_text(f"GPU-01 ssh-rsa {k2.get_base64()}\n10.0.0.* ssh-rsa {k2.get_base64()}\n")
    rec = tmp_path / "rec"
    pol = hostkeys.Policy(str(rec), (str(user),), strict=False)
    for name in ("gpu-01", "10.0.0.5"):
        with pytest.raises(hostkeys.HostKeyChanged):
            pol.check(name, k1)
        assert not rec.exists()
        pol.check(name, k2)  # the same key, under another case or a pattern: accepted
    assert pol.seed(["gpu-01", "10.0.0.5"]) == {}
    seen = paramiko.HostKeys(str(rec))  # what pyinfra loads: exact lines, same keys
    assert seen.lookup("gpu-01")["ssh-rsa"] == k2 and seen.lookup("10.0.0.5")["ssh-rsa"] == k2
    assert pol.seed(["gpu-01"]) == {} and rec.read_text().count("gpu-01 ") == 1  # written once


def test_negated_entry_does_not_name_the_host(tmp_path):
    k1, k2 = _key(), _key()
    user = tmp_path / "user_kh"
    user.write_text(f"10.0.0.*,!10.0.0.1 ssh-rsa {k2.get_base64()}\n")
    pol = hostkeys.Policy(str(tmp_path / "rec"), (str(user),), strict=False)
    pol.check("10.0.0.1", k1)  # excluded by `!`: a new host, recorded on first use
    assert k1.get_base64() in (tmp_path / "rec").read_text()
    # the record holding a line paramiko reads as exact for a name OpenSSH excludes: refused
    own = tmp_path / "own_kh"
    own.write_text(f"10.0.0.1,!10.0.0.1 ssh-rsa {k2.get_base64()}\n")
    errs = hostkeys.Policy(str(own), (), strict=False).seed(["10.0.0.1"])
    assert "does not trust it" in errs["10.0.0.1"]


def test_ssh_targets_stops_before_connecting_on_refused_host(tmp_path, monkeypatch):
    from gpuctl.errors import ExecutionError

    k1 = _key()
    monkeypatch.setenv("GPUCTL_KNOWN_HOSTS", str(tmp_path / "rec"))
    monkeypatch.setenv("GPUCTL_USER_KNOWN_HOSTS", str(tmp_path / "user_kh"))
    (tmp_path / "user_kh").write_text(f"@revoked 10.0.0.* ssh-rsa {k1.get_base64()}\n")
    spec = NodeSpec.model_construct(node="n1", address="10.0.0.1", ssh_port=22, ssh_user="root")
    with pytest.raises(ExecutionError, match=r"10\.0\.0\.1.*@revoked"):
        ssh_targets([spec], SshSettings())


def test_unknown_marker_line_is_ignored_with_one_warning(tmp_path, caplog):
    """OpenSSH skips a line with an unknown @marker; gpuctl does too, and says so once."""
    k1, k2 = _key(), _key()
    user = tmp_path / "user_kh"
    user.write_text(f"@future 10.0.0.1 ssh-rsa {k2.get_base64()}\n# comment\n\n10.0.0.2 ssh-rsa\n")
    pol = hostkeys.Policy(str(tmp_path / "rec"), (str(user),), strict=True)
    with caplog.at_level("WARNING", logger="gpuctl.hostkeys"):
        for _ in range(3):
            with pytest.raises(paramiko.SSHException, match="strict"):  # nothing known: strict refuses
                pol.check("10.0.0.1", k1)
    assert sum("unknown known_hosts marker @future" in r.getMessage() for r in caplog.records) == 1


def test_seed_never_appends_what_the_record_already_holds(tmp_path):
    """Two keys of one type for a host (a re-keyed host listed twice): paramiko keeps one per
    type, but both are already exact lines of the record: nothing is appended, run after run."""
    k1, k2 = _key(), _key()
    rec = tmp_path / "rec"
    rec.write_text(f"10.0.0.1 ssh-rsa {k1.get_base64()}\n10.0.0.1 ssh-rsa {k2.get_base64()}\n")
    user = tmp_path / "user_kh"
    user.write_text(f"10.0.0.* ssh-rsa {k2.get_base64()}\n")
    pol = hostkeys.Policy(str(rec), (str(user),), strict=False)
    before = rec.read_text()
    for _ in range(2):
        assert pol.seed(["10.0.0.1"]) == {}
    assert rec.read_text() == before


def test_verify_asks_for_the_key_type_known_hosts_holds(tmp_path, monkeypatch):
    """A node with an ECDSA and an RSA host key whose known_hosts entry is the RSA one: the
    verify client asks for RSA (as OpenSSH orders HostKeyAlgorithms by the known types) and
    accepts, instead of taking the ECDSA key paramiko prefers and calling it changed."""
    from gpuctl.checks.paramiko_backend import CheckedParamikoBackend

    k_rsa, k_ec = _key(), paramiko.ECDSAKey.generate()
    monkeypatch.setenv("GPUCTL_KNOWN_HOSTS", str(tmp_path / "rec"))
    monkeypatch.setenv("GPUCTL_USER_KNOWN_HOSTS", str(tmp_path / "user_kh"))
    with _serve(k_rsa, k_ec) as port:
        (tmp_path / "user_kh").write_text(f"[127.0.0.1]:{port} ssh-rsa {k_rsa.get_base64()}\n")
        cfg = tmp_path / "ssh_config"
        cfg.write_text(f"Host n1\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
                       "  StrictHostKeyChecking accept-new\n  ConnectTimeout 5\n")
        backend = CheckedParamikoBackend("n1", ssh_config=str(cfg))
        try:
            _ = backend.client  # connects: raises HostKeyChanged when the ECDSA key is offered
        except hostkeys.HostKeyRefused:
            raise
        except paramiko.SSHException as exc:  # authentication, after the host key check passed
            assert "authentication" in str(exc).lower()
        finally:
            if "client" in backend.__dict__:
                backend.client.close()
        assert not (tmp_path / "rec").exists() or k_ec.get_base64() not in (tmp_path / "rec").read_text()


def test_a_known_hosts_fifo_is_refused_not_waited_on(tmp_path):
    """A FIFO (or device) as a known_hosts file is an input error at once: before, reading it
    blocked forever; and a file gpuctl cannot read is never taken for an empty one."""
    import os

    from gpuctl.errors import InputError
    from gpuctl.hostkeys import read_known_hosts

    fifo = tmp_path / "known_hosts"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        read_known_hosts(str(fifo))
    assert read_known_hosts(str(tmp_path / "absent")) == []
