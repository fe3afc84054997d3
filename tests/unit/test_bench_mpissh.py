"""The multi-node run's own SSH trust (gpuctl.bench.mpissh) and `BenchRun.run_multi_node`.

Every script runs for real through bash on this machine, always against home folders of
the test's own: the scripts name `$HOME/.ssh/authorized_keys`, and each emulated node
(`HomeTarget`, an `@local` target) runs with HOME set to its folder, so no test can
touch this machine's ~/.ssh. The run's scratch folder is moved under tmp_path too.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuctl.bench import mpissh, suites
from gpuctl.bench.mpissh import RunKey
from gpuctl.bench.remote import SshTarget
from gpuctl.bench.run import BenchRun
from gpuctl.inventory import load_inventory
from gpuctl.runrecord import RunRecord
from gpuctl.spec import NodeSpec, resolve

LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"
FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures"
RUN = "20250101T000000-bench"
OTHER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorsOwnKeyStaysWhereItIs operator@laptop\n"


@dataclass(frozen=True)
class HomeTarget(SshTarget):
    """An `@local` node with a home folder of its own (its ~/.ssh)."""

    home: str = ""

    def argv(self, script: str, timeout_s: float) -> list[str]:
        return ["env", f"HOME={self.home}", *super().argv(script, timeout_s)]


@pytest.fixture(scope="module")
def key() -> RunKey:
    return mpissh.generate_key(RUN)


@pytest.fixture(scope="module")
def lab_specs() -> list[NodeSpec]:
    return resolve(load_inventory(LAB_INVENTORY))


@pytest.fixture(autouse=True)
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The run's scratch folder (the head's key lives there) under tmp_path, and HOME too."""
    monkeypatch.setattr(suites, "SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("HOME", str(tmp_path / "controller-home"))
    return tmp_path / "scratch"


def sh(script: str, home: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], env=dict(os.environ, HOME=str(home)), input=stdin,
                          capture_output=True, text=True, timeout=30, check=False)


def body_lines(key: RunKey) -> list[str]:
    """The base64 lines of the private key (what must never be written anywhere)."""
    return [line for line in key.private.splitlines() if line and "PRIVATE KEY" not in line]


def home_with(tmp_path: Path, name: str, text: str | None, mode: int = 0o600) -> Path:
    home = tmp_path / name
    (home / ".ssh").mkdir(parents=True)
    if text is not None:
        path = home / ".ssh" / "authorized_keys"
        path.write_text(text)
        path.chmod(mode)
    return home


# ---------------------------------------------------------------- the key


def test_generate_key_is_fresh_and_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    real = tempfile.mkdtemp

    def spy(*args: object, **kwargs: object) -> str:
        made.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", spy)
    a, b = mpissh.generate_key(RUN), mpissh.generate_key(RUN)
    assert a.private != b.private and a.blob != b.blob and a.token != b.token
    assert a.private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert a.public == f"ssh-ed25519 {a.blob} gpuctl-bench-{RUN}" and a.marker == f"gpuctl-bench-{RUN}"
    assert len(made) == 2 and not any(Path(p).exists() for p in made)
    assert "PRIVATE" not in repr(a) and body_lines(a)[0] not in repr(a)


def test_generate_key_failure_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(mpissh.TrustError, match="cannot run"):
        mpissh.generate_key(RUN, keygen=str(tmp_path / "no-ssh-keygen"))
    with pytest.raises(mpissh.TrustError, match="failed"):
        mpissh.generate_key(RUN, keygen="false")


def test_no_script_holds_the_private_key(key: RunKey, lab_specs: list[NodeSpec]) -> None:
    hosts = [suites.mpi_host(s) for s in lab_specs]
    scripts = [
        mpissh.head_setup_script(key, hosts),
        mpissh.authorize_script(key, ["192.168.50.11"], 1200),
        mpissh.revoke_script(key),
        mpissh.revoke_script(key, remove_if_created=True, head=True),
        suites.multi_node_script(lab_specs, suites.SUITES["quick"], RUN, mpissh.rsh_args(key)),
    ]
    for script in scripts:
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
        assert "PRIVATE KEY" not in script
        assert not any(line in script for line in body_lines(key))
    # the public half is what names the line to add and to remove
    assert key.blob in scripts[1] and key.blob in scripts[2] and key.marker in scripts[1]


def test_rsh_args_use_the_runs_key_and_known_hosts(key: RunKey, scratch: Path) -> None:
    args = mpissh.rsh_args(key).split()  # Open MPI splits the value on blanks
    assert args[args.index("-i") + 1] == key.key_path == f"{scratch}/{RUN}/mpi-ssh-{key.token}/id_ed25519"
    opts = {args[i + 1] for i, a in enumerate(args) if a == "-o"}
    assert {"IdentitiesOnly=yes", "BatchMode=yes", "StrictHostKeyChecking=accept-new",
            f"UserKnownHostsFile={key.known_hosts_path}"} <= opts
    assert key.known_hosts_path.startswith(key.key_dir + "/")


def test_from_addresses_keeps_ip_literals_and_the_heads_sources() -> None:
    out = "gpuctl-from 192.168.50.11\ngpuctl-from 10.0.0.5\ngpuctl-from fe80::1\nnoise 1.2.3.4\n"
    assert mpissh.from_addresses(["192.168.50.12", "gpu-02.example", "192.168.50.11"], out) == \
        ["10.0.0.5", "192.168.50.11", "192.168.50.12", "fe80::1"]


# ---------------------------------------------------------------- the head's copy


def test_head_setup_places_the_key_privately(key: RunKey, tmp_path: Path) -> None:
    proc = sh(mpissh.head_setup_script(key, ["127.0.0.1", "localhost"]), tmp_path, stdin=key.private)
    assert proc.returncode == 0, proc.stderr
    folder, path = Path(key.key_dir), Path(key.key_path)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == key.private
    assert "gpuctl-from 127.0.0.1" in proc.stdout.splitlines()
    assert not any(line in proc.stdout + proc.stderr for line in body_lines(key))
    # a folder already there is not this run's: refused, and nothing in it is touched
    again = sh(mpissh.head_setup_script(key, []), tmp_path, stdin="other\n")
    assert again.returncode == suites.EXIT_SCRATCH_EXISTS and "not touching it" in again.stderr
    assert path.read_text() == key.private
    # the head's cleanup deletes the folder
    assert sh(mpissh.revoke_script(key, head=True), tmp_path).returncode == 0
    assert not folder.exists()


def test_head_setup_without_a_key_on_stdin_fails(key: RunKey, tmp_path: Path) -> None:
    proc = sh(mpissh.head_setup_script(key, []), tmp_path, stdin="")
    assert proc.returncode == 1 and "no key arrived" in proc.stderr


# ---------------------------------------------------------------- authorized_keys


@pytest.mark.parametrize("before", [OTHER + "ssh-rsa AAAAB3Nza second@host\n", OTHER + "no newline at the end"])
def test_authorize_then_revoke_restores_the_file(key: RunKey, tmp_path: Path, before: str) -> None:
    home = home_with(tmp_path, "home", before, 0o640)
    path = home / ".ssh" / "authorized_keys"
    proc = sh(mpissh.authorize_script(key, ["192.168.50.11", "192.168.50.12"], 1200), home)
    assert proc.returncode == 0, proc.stderr
    assert not mpissh.created(proc.stdout)
    lines = path.read_text().splitlines()
    assert lines[:-1] == before.splitlines()  # nothing joined to the last line, nothing else changed
    m = re.fullmatch(r'restrict,from="192\.168\.50\.11,192\.168\.50\.12",expiry-time="(\d{14})" '
                     rf"ssh-ed25519 {re.escape(key.blob)} {key.marker}", lines[-1])
    assert m, lines[-1]
    expires = dt.datetime.strptime(m.group(1), "%Y%m%d%H%M%S")  # the node's local time, as sshd reads it
    assert abs((expires - dt.datetime.now()).total_seconds() - 1200) < 120
    proc = sh(mpissh.revoke_script(key), home)
    assert proc.returncode == 0, proc.stderr
    assert path.read_text() == before if before.endswith("\n") else path.read_text() == before + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_authorize_creates_what_is_missing_and_revoke_removes_it(key: RunKey, tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    home.mkdir()
    proc = sh(mpissh.authorize_script(key, [], 600), home)
    assert proc.returncode == 0 and mpissh.created(proc.stdout)
    path = home / ".ssh" / "authorized_keys"
    assert stat.S_IMODE((home / ".ssh").stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().startswith('restrict,expiry-time="')  # no address known: no from=
    assert sh(mpissh.revoke_script(key, remove_if_created=True), home).returncode == 0
    assert not path.exists()
    # a line someone else added meanwhile keeps the file
    sh(mpissh.authorize_script(key, [], 600), home)
    with path.open("a") as f:
        f.write(OTHER)
    assert sh(mpissh.revoke_script(key, remove_if_created=True), home).returncode == 0
    assert path.read_text() == OTHER


def test_revoke_removes_only_this_runs_line(key: RunKey, tmp_path: Path) -> None:
    other_run = mpissh.generate_key("20250101T000001-bench")
    same_marker = f"ssh-ed25519 {other_run.blob} {key.marker}\n"  # the marker alone names no line
    home = home_with(tmp_path, "home", OTHER + same_marker)
    assert sh(mpissh.authorize_script(key, ["10.0.0.1"], 600), home).returncode == 0
    assert sh(mpissh.authorize_script(other_run, ["10.0.0.1"], 600), home).returncode == 0
    assert sh(mpissh.revoke_script(key), home).returncode == 0
    text = (home / ".ssh" / "authorized_keys").read_text()
    assert key.blob not in text
    assert text.startswith(OTHER + same_marker) and text.count(other_run.blob) == 2


def test_revoke_fails_when_the_line_stays(key: RunKey, tmp_path: Path) -> None:
    home = home_with(tmp_path, "home", OTHER)
    assert sh(mpissh.authorize_script(key, [], 600), home).returncode == 0
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "sed").write_text("#!/bin/sh\nexit 0\n")  # a sed that removes nothing
    (fake / "sed").chmod(0o755)
    proc = subprocess.run(["bash", "-c", mpissh.revoke_script(key)], capture_output=True, text=True, check=False,
                          env=dict(os.environ, HOME=str(home), PATH=f"{fake}:{os.environ['PATH']}"))
    assert proc.returncode == 1 and "still in authorized_keys" in proc.stderr


# ---------------------------------------------------------------- the run


@dataclass
class Bench:
    """Two lab nodes on this machine, each with its own home; `make` builds the BenchRun."""

    make: Callable[..., BenchRun]
    homes: dict[str, Path]
    record: RunRecord
    tmp: Path
    messages: list[str]

    def restored(self) -> bool:
        """Every node's authorized_keys as it was before the run."""
        return all((h / ".ssh" / "authorized_keys").read_text() == OTHER for h in self.homes.values())

    def key_folders(self) -> list[Path]:
        return list((Path(suites.SCRATCH) / self.record.id).glob("mpi-ssh-*"))


@pytest.fixture()
def bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lab_specs: list[NodeSpec]) -> Bench:
    """A BenchRun over the two lab nodes, each an `@local` target with its own home; a
    stand-in mpirun records what it saw while it ran (the key's mode, each node's lines)."""
    homes = {s.node: home_with(tmp_path / "homes", s.node, OTHER, 0o644) for s in lab_specs}
    bindir = tmp_path / "bin"
    bindir.mkdir()
    mpirun = bindir / "mpirun"
    mpirun.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/calls.log\n'
        "key=$(echo \"$*\" | sed -n 's/.*plm_rsh_args -i \\([^ ]*\\) .*/\\1/p')\n"
        f'stat -c "key %a" "$key" >> {tmp_path}/during.log\n'
        f"grep -h gpuctl-bench- {tmp_path}/homes/*/.ssh/authorized_keys >> {tmp_path}/during.log\n"
        f'[ "${{MPIRUN_EXIT:-0}}" = 0 ] || {{ echo "ssh: Permission denied (publickey)" >&2; exit "$MPIRUN_EXIT"; }}\n'
        f"cat {FIX / 'nccl' / 'nccl-allreduce-a100-2node-16gpu-oci.txt'}\n")
    mpirun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    loaded = load_inventory(LAB_INVENTORY)
    record = RunRecord.create("bench", loaded.path, root=tmp_path / "runs")
    messages: list[str] = []

    def make(**home_for: str) -> BenchRun:
        targets = {s.node: HomeTarget(name=s.node, address="@local", home=home_for.get(s.node, str(homes[s.node])))
                   for s in lab_specs}
        return BenchRun(loaded, lab_specs, suites.SUITES["quick"], record, targets=targets, progress=messages.append)

    return Bench(make, homes, record, tmp_path, messages)


def _multi(run: BenchRun) -> list[dict]:
    return [r for r in run.cluster.results if r["test"] == "all_reduce_multi_node"]


def _leaked(key_lines: list[str], root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and any(line in p.read_text() for line in key_lines)]


def test_multi_node_run_with_trust_for_this_run_only(bench: Bench, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    keys: list[RunKey] = []
    real = mpissh.generate_key
    monkeypatch.setattr(mpissh, "generate_key", lambda run_id: keys.append(real(run_id)) or keys[-1])
    caplog.set_level(logging.DEBUG)
    run = bench.make()
    run.run_multi_node()
    key = keys[0]
    multi = _multi(run)
    busbw = [r for r in multi if r["check"] == "multi_node_busbw_gb_s"]
    assert len(busbw) == 1 and busbw[0]["value"] == pytest.approx(220.92, abs=0.5)  # the recorded 2-node run
    # while mpirun ran: the key on the head (0600), the run's line on both nodes
    during = (bench.tmp / "during.log").read_text().splitlines()
    assert during[0] == "key 600"
    assert len(during[1:]) == 2 and all(key.blob in line and key.marker in line for line in during[1:])
    assert all('from="' in line and "192.168.50.11" in line and "192.168.50.12" in line for line in during[1:])
    call = (bench.tmp / "calls.log").read_text()
    assert f"plm_rsh_args -i {key.key_path} " in call and f"UserKnownHostsFile={key.known_hosts_path}" in call
    # afterwards: both authorized_keys as they were (mode too), the head's key folder gone
    assert bench.restored()
    assert all(stat.S_IMODE((h / ".ssh" / "authorized_keys").stat().st_mode) == 0o644 for h in bench.homes.values())
    assert not Path(key.key_dir).exists()
    # every step is in the run record; the private key is nowhere in it, nor in a log or message
    tests = {(t["test"], t["host"]) for t in run.cluster.tests}
    assert {("mpi_ssh_key", "gpu-01"), ("mpi_ssh_authorize", "gpu-02"), ("mpi_ssh_revoke", "gpu-02")} <= tests
    assert not _leaked(body_lines(key), bench.record.path)
    assert not any(line in caplog.text or line in " ".join(bench.messages) for line in body_lines(key))


def test_cleanup_runs_when_mpirun_fails(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPIRUN_EXIT", "255")
    run = bench.make()
    run.run_multi_node()
    multi = _multi(run)
    assert multi and multi[0]["status"] == "error"
    assert (bench.tmp / "during.log").read_text().count("gpuctl-bench-") == 2  # the lines were there for mpirun
    assert bench.restored()
    assert not bench.key_folders()


def test_cleanup_runs_when_the_run_is_interrupted(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:

    def interrupted(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(suites, "multi_node_script", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bench.make().run_multi_node()
    assert bench.restored()
    assert not bench.key_folders()


def test_a_node_that_refuses_the_key_is_named(bench: Bench) -> None:
    run = bench.make(**{"gpu-02": str(bench.tmp / "no-such-home")})
    run.run_multi_node()
    multi = _multi(run)
    assert len(multi) == 1 and multi[0]["status"] == "error"
    assert "gpu-02: gpuctl: no home folder" in multi[0]["message"] and "gpu-01" not in multi[0]["message"]
    assert not (bench.tmp / "calls.log").exists()  # mpirun never ran
    assert bench.restored()
    assert not bench.key_folders()


def test_no_key_on_the_controller_is_could_not_run(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:

    def no_keygen(run_id: str) -> RunKey:
        raise mpissh.TrustError("cannot run ssh-keygen: not found")

    monkeypatch.setattr(mpissh, "generate_key", no_keygen)
    run = bench.make()
    run.run_multi_node()
    multi = _multi(run)
    assert multi[0]["status"] == "error" and "cannot run ssh-keygen" in multi[0]["message"]
    assert run.cluster.tests == [] and bench.restored()


def test_the_record_redacts_a_private_key_that_slips_through(key: RunKey, tmp_path: Path) -> None:
    record = RunRecord.create("bench", root=tmp_path / "runs")
    whole = record.raw("gpu-01", "whole.txt", f"before\n{key.private}after\n")
    record.stage("x", {"stderr": key.private})
    assert whole.read_text() == "before\n[redacted private key]\nafter\n"
    assert not _leaked(body_lines(key), record.path)
