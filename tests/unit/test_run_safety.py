"""Issue 12 items 4 and 5: secrets never reach the run record; run folders are private;
one mutating run per inventory; atomic run folders; run.json finished on Ctrl-C; hostile
YAML; corrupt run.json."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl import redact as rd
from gpuctl.errors import InputError
from gpuctl.runrecord import RunRecord
from gpuctl.yamlsrc import parse_yaml

REPO = Path(__file__).resolve().parents[2]

SECRETS = [
    ("pip install -i alice:mirrorpw1@mirror.lab/simple x", "mirrorpw1"),
    ("https://bob:urlpw2@mirror.lab/x", "urlpw2"),
    ("tool --password optpw3 --x", "optpw3"),
    ("tool --password=optpw4", "optpw4"),
    ("ipmitool -H 10.0.0.5 -U admin -P ipmipw5 power status", "ipmipw5"),
    ("BMC_PASSWORD=envpw6 GH_TOKEN=envtok7 AWS_SECRET=envsec8 run", "envpw6"),
    ("BMC_PASSWORD=envpw6 GH_TOKEN=envtok7 AWS_SECRET=envsec8 run", "envtok7"),
    ("BMC_PASSWORD=envpw6 GH_TOKEN=envtok7 AWS_SECRET=envsec8 run", "envsec8"),
    ('{"password": "jsonpw9", "user": "u"}', "jsonpw9"),
    ("curl -H 'Authorization: Bearer bearer10' https://x", "bearer10"),
    ("bmc_password: yamlpw11", "yamlpw11"),
    ("curl -u admin:curlpw12 https://bmc/redfish/v1", "curlpw12"),
    ("curl --user=admin:curlpw13 --proxy-user 'p:proxypw14' https://x", "curlpw13"),
    ("curl --user=admin:curlpw13 --proxy-user 'p:proxypw14' https://x", "proxypw14"),
    ("sshpass -p sshpw15 ssh root@10.0.0.1", "sshpw15"),
    ("sshpass -e -psshpw16 ssh root@10.0.0.1", "sshpw16"),
    ("tool --pass passpw17 x", "passpw17"),
    ("DB_PASS=passpw18 run", "passpw18"),
    ('{"api_token": 19191919, "user": "u"}', "19191919"),
    ("mysql -u root -pmysqlpw20 -h db gpuctl", "mysqlpw20"),
    ("mysqldump -pdumppw21 db | gzip", "dumppw21"),
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_redact_structural(text: str, secret: str) -> None:
    out = rd.redact(text)
    assert secret not in out
    assert rd.MARK in out


@pytest.mark.parametrize(("argv", "expected"), [
    (["gpuctl", "x", "--password", "pw1-secret"], ["gpuctl", "x", "--password", rd.MARK]),
    (["ipmitool", "-P", "pw2-secret"], ["ipmitool", "-P", rd.MARK]),
    (["curl", "-u", "admin:pw3-secret", "https://x"], ["curl", "-u", f"admin:{rd.MARK}", "https://x"]),
    (["/usr/bin/sshpass", "-p", "pw4-secret", "ssh", "h"], ["/usr/bin/sshpass", "-p", rd.MARK, "ssh", "h"]),
    (["ssh", "-p", "2222", "h"], ["ssh", "-p", "2222", "h"]),
    (["gpuctl", "provision", "inv.yaml", "-u", "admin"], ["gpuctl", "provision", "inv.yaml", "-u", "admin"]),
])
def test_redact_argv_by_position(argv: list[str], expected: list[str]) -> None:
    """A run record's argv: the word after a secret-taking option is replaced, whole or after
    its user; ordinary options and values stay as typed."""
    assert rd.redact_argv(argv) == expected


@pytest.mark.parametrize("text", ["git@github.com:org/repo.git", "ssh root@10.0.0.1 -p 22",
                                  "tokens_per_s: 123", "bypass: true", "password_file: /etc/pw",
                                  "mkdir -p /raid/scratch", "curl -u admin https://x", "ssh -p 2222 -o User=root h",
                                  # token counts and rates (training/inference logs), test counts
                                  '{"model_flops_per_token": 2602176.0, "tokens_per_s": 288453.2}',
                                  "max_tokens=512", '{"num_tokens": 12}', "prompt_tokens: 30", "--max-tokens 512",
                                  '{"pass": 22, "fail": 33}', "pass: 3", "mysql -u root -p -P 3306 db"])
def test_redact_leaves_ordinary_text(text: str) -> None:
    assert rd.redact(text) == text


def test_redacted_json_stays_json() -> None:
    """A number under a secret name becomes a string mark: the document still parses (an
    unquoted value used to swallow the closing brace)."""
    out = rd.redact('{"api_token": 123456, "n": 1}')
    assert json.loads(out) == {"api_token": rd.MARK, "n": 1}


def test_real_training_log_survives_redaction() -> None:
    """The real H200 bench's training log: its stored raw copy had model_flops_per_token blanked
    ('token'), so re-judging the run record failed to parse. Redaction leaves it whole."""
    real = (REPO / "tests/data/fixtures/training/h200-quick-tiny-model-real.jsonl").read_text()
    assert rd.redact(real) == real


def _tree_text(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def test_run_record_redacts_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\nbmc: {password: 'Kn0wnBmcPw'}\nmirror: {url: 'http://m:Kn0wnMirrorPw@h/'}\n")
    monkeypatch.setattr(sys, "argv", ["gpuctl", "provision", "--password", "argvpw"])
    rec = RunRecord.create("plan", inv, root=tmp_path / "runs")
    for text, _ in SECRETS:
        rec.raw("n1", "commands.log", text)
        rec.stage("s", {"cmd": text, "bmc_password": "dictpw", "nested": [text]})
        rec.write_text("x.log", text)
    rec.write_text("known.log", "echo Kn0wnBmcPw; curl m:Kn0wnMirrorPw")
    import logging

    from gpuctl.runner.logroute import engine_logs_to
    with engine_logs_to(rec.path / "pyinfra.log"):
        logging.getLogger("pyinfra").info("sshpass -p x --password logpw99 Authorization: Bearer logtok")
    rec.finish("ok")
    text = _tree_text(rec.path)
    for _, secret in SECRETS:
        assert secret not in text
    for secret in ("argvpw", "dictpw", "Kn0wnBmcPw", "Kn0wnMirrorPw", "logpw99", "logtok"):
        assert secret not in text


def test_bundle_uses_same_redactor() -> None:
    import gpuctl.bundle as bundle
    import gpuctl.runner.logroute as logroute
    import gpuctl.runrecord as runrecord
    assert runrecord.redact is rd.redact
    assert logroute.redact is rd.redact
    assert bundle.redact is rd.redact


def test_run_folder_permissions(tmp_path: Path) -> None:
    old = os.umask(0o000)
    try:
        rec = RunRecord.create("plan", root=tmp_path / "runs")
        rec.raw("n1", "commands.log", "x")
        rec.stage("plan", {"a": 1})
        from gpuctl.runner.logroute import engine_logs_to
        with engine_logs_to(rec.path / "pyinfra.log"):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "runs").stat().st_mode) == 0o700
    for p in [rec.path, *rec.path.rglob("*")]:
        want = 0o700 if p.is_dir() else 0o600
        assert stat.S_IMODE(p.stat().st_mode) == want, p


def test_run_folder_creation_is_exclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "runs"
    real_exists = Path.exists
    # every run sees "no folder yet" (the race): mkdir must still never reuse one
    monkeypatch.setattr(Path, "exists", lambda self, **kw: False if self.parent == root else real_exists(self))
    paths = {RunRecord.create("plan", root=root).path for _ in range(5)}
    assert len(paths) == 5


# ------------------------------------------------------------------ inventory lock

_HOLD = textwrap.dedent("""
    import sys, time
    from gpuctl.runrecord import RunRecord
    rec = RunRecord.create(sys.argv[2], sys.argv[1], root=__import__('pathlib').Path(sys.argv[3]))
    print(rec.id, flush=True)
    time.sleep(30)
""")
_TRY = textwrap.dedent("""
    import sys
    from pathlib import Path
    from gpuctl.cli.common import handle_errors
    from gpuctl.runrecord import RunRecord
    @handle_errors
    def go():
        RunRecord.create(sys.argv[2], sys.argv[1], root=Path(sys.argv[3])).finish('ok')
        print('ran')
    go()
""")


def _py(code: str, *args: str, **kw) -> subprocess.Popen:  # type: ignore[no-untyped-def,type-arg]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kw)


def test_two_mutating_runs_on_one_inventory_contend(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\n")
    runs = tmp_path / "runs"
    holder = _py(_HOLD, str(inv), "provision", str(runs))
    try:
        run_id = holder.stdout.readline().strip()  # type: ignore[union-attr]
        assert run_id
        second = _py(_TRY, str(inv), "provision", str(runs))
        out, err = second.communicate(timeout=30)
        assert second.returncode == 3, (out, err)
        assert "ran" not in out
        assert str(holder.pid) in err and run_id in err and "provision" in err
        # a read-only command is not blocked
        ro = _py(_TRY, str(inv), "report", str(runs))
        out, err = ro.communicate(timeout=30)
        assert ro.returncode == 0, err
    finally:
        holder.kill()
        holder.wait()
    # the holder died: its lock is stale and taken over, with a note
    again = _py(_TRY, str(inv), "rebuild", str(runs))
    out, err = again.communicate(timeout=30)
    assert again.returncode == 0, err
    assert "ran" in out


def test_stale_lock_file_is_taken_over_with_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuctl import runlock
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\n")
    path = runlock.lock_path(inv)
    path.parent.mkdir(parents=True, exist_ok=True)
    import socket
    path.write_text(json.dumps({"pid": 999999, "host": socket.gethostname(), "command": "provision",
                                "started": "2026-01-01T00:00:00+00:00", "run_id": "old"}))
    with runlock.hold(inv, "provision") as held:
        assert held.note and "999999" in held.note


def test_corrupt_lock_file_of_a_live_holder_is_named(tmp_path: Path) -> None:
    from gpuctl import runlock
    from gpuctl.errors import GpuctlError
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\n")
    with runlock.hold(inv, "provision"):
        runlock.lock_path(inv).write_text("{not json")
        code = "import sys; from gpuctl import runlock; from pathlib import Path\n" \
               "from gpuctl.cli.common import handle_errors\n" \
               "handle_errors(lambda: runlock.hold(Path(sys.argv[1]), 'provision').__enter__())()"
        p = _py(code, str(inv))
        _, err = p.communicate(timeout=30)
    assert p.returncode == 3 and str(runlock.lock_path(inv)) in err
    assert issubclass(runlock.InventoryBusy, GpuctlError)


# ------------------------------------------------------------------ Ctrl-C

def test_keyboard_interrupt_finishes_run_json(tmp_path: Path) -> None:
    from gpuctl.cli.common import handle_errors

    made: list[RunRecord] = []

    @handle_errors
    def cmd() -> None:
        made.append(RunRecord.create("provision", root=tmp_path / "runs"))
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exc:
        cmd()
    assert exc.value.code == 3
    meta = made[0].meta()
    assert meta["status"] == "interrupted" and meta.get("finished")


def test_sigint_subprocess_finishes_run_json(tmp_path: Path) -> None:
    import signal
    code = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from gpuctl.cli.common import handle_errors
        from gpuctl.runrecord import RunRecord
        @handle_errors
        def go():
            rec = RunRecord.create('plan', root=Path(sys.argv[1]))
            print(rec.path, flush=True)
            time.sleep(30)
        go()
    """)
    p = _py(code, str(tmp_path / "runs"))
    path = Path(p.stdout.readline().strip())  # type: ignore[union-attr]
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=30)
    meta = json.loads((path / "run.json").read_text())
    assert meta["status"] == "interrupted" and meta.get("finished")


# ------------------------------------------------------------------ hostile YAML

BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x, x]"]
                 + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]"
                    for i in range(9)])


@pytest.mark.parametrize(("name", "text", "needle"), [
    ("bomb", BOMB, "alias"),
    ("bigint", "n: " + "9" * 5000 + "\n", "long"),
    ("deep", "x: " + "[" * 10000 + "]" * 10000 + "\n", "deep"),
    ("deepmap", "x: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "deep"),
])
def test_hostile_yaml_is_an_input_error(name: str, text: str, needle: str) -> None:
    # CPU seconds, not wall: an expanding bomb burns CPU; wall time on a loaded CI core does not
    # tell (this took 5.6 and 7.9 s of wall at load 12-21 with 0.3 s of CPU, 2026-12-06)
    start = time.process_time()
    with pytest.raises(InputError) as exc:
        parse_yaml(text, f"{name}.yaml")
    assert time.process_time() - start < 5
    assert f"{name}.yaml" in str(exc.value) and needle in str(exc.value).lower()


def test_hostile_inventory_cli_exit_2(tmp_path: Path) -> None:
    from gpuctl.cli.main import main
    inv = tmp_path / "bomb.yaml"
    inv.write_text(BOMB)
    start = time.process_time()
    res = CliRunner().invoke(main, ["inventory", "validate", str(inv)])
    assert time.process_time() - start < 10
    assert res.exit_code == 2, res.output
    assert "bomb.yaml" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(("name", "raw", "expected"), [
    ("control", b"cluster: {name: x}\nnodes: [a\x07]\n", r"control\.yaml:2: not valid YAML: character U\+0007"),
    ("latin1", b"cluster: {name: x}\n# caf\xe9\n", r"latin1\.yaml:2: not UTF-8: byte 0xe9"),
])
def test_unreadable_text_names_its_line(tmp_path: Path, name: str, raw: bytes, expected: str) -> None:
    from gpuctl.yamlsrc import load_yaml
    (tmp_path / f"{name}.yaml").write_bytes(raw)
    with pytest.raises(InputError, match=expected):
        load_yaml(tmp_path / f"{name}.yaml")


def test_oversized_or_endless_input_is_refused_before_reading_it_all(tmp_path: Path) -> None:
    from gpuctl.yamlsrc import MAX_FILE_BYTES, load_yaml
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(InputError, match=r"big\.yaml: over \d+ bytes"):
        load_yaml(big)
    start = time.monotonic()
    with pytest.raises(InputError, match=r"/dev/zero: is a device, not a regular file"):
        load_yaml("/dev/zero")
    assert time.monotonic() - start < 5
    with pytest.raises(InputError, match="is a directory"):
        load_yaml(tmp_path)


def test_ordinary_aliases_still_work() -> None:
    data, _ = parse_yaml("a: &x [1, 2]\nb: *x\n", "ok.yaml")
    assert data == {"a": [1, 2], "b": [1, 2]}


# ------------------------------------------------------------------ corrupt run.json

def test_corrupt_run_json_is_named(tmp_path: Path) -> None:
    rec = RunRecord.create("plan", root=tmp_path / "runs")
    (rec.path / "run.json").write_text("{truncated")
    with pytest.raises(InputError) as exc:
        RunRecord.open(rec.id, root=tmp_path / "runs").meta()
    assert str(rec.path / "run.json") in str(exc.value)
    (rec.path / "stages").mkdir(exist_ok=True)
    (rec.path / "stages" / "plan.json").write_text("[")
    with pytest.raises(InputError) as exc:
        rec.read_stage("plan")
    assert "plan.json" in str(exc.value)


def test_corrupt_run_json_report_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.cli.main import main
    rec = RunRecord.create("plan", root=tmp_path / "runs")
    (rec.path / "run.json").write_text("\x00garbage")
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path / "runs"))
    res = CliRunner().invoke(main, ["report", str(rec.path)])
    assert res.exit_code == 2, res.output
    assert "run.json" in res.output and "Traceback" not in res.output


def test_resumed_run_takes_the_inventory_lock(tmp_path: Path) -> None:
    from gpuctl import runlock
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\n")
    runs = tmp_path / "runs"
    rec = RunRecord.create("turnkey", inv, root=runs)
    rec.finish("failed at verify")
    again = RunRecord.open(rec.id, root=runs)
    again.claim("turnkey", inv)
    code = "import sys; from gpuctl import runlock; from pathlib import Path\n" \
           "from gpuctl.cli.common import handle_errors\n" \
           "handle_errors(lambda: runlock.acquire(Path(sys.argv[1]), 'provision'))()"
    p = _py(code, str(inv))
    _, err = p.communicate(timeout=30)
    assert p.returncode == 3 and rec.id in err
    again.finish("pass")
    assert runlock.lock_path(inv) not in runlock._HELD


def test_redaction_shortcut_changes_nothing() -> None:
    """redact() runs its patterns only over the lines holding a trigger word (and the line
    after): a speed-up, verify at 32 nodes spent a seventh of its CPU in re.sub over whole
    outputs. On every secret case here, every ordinary text, every real fixture output and
    multi-line mixes of them, the result equals running all the patterns over the whole text."""
    def full(text: str) -> str:
        text = rd._PRIVATE_KEY.sub(rd._PRIVATE_KEY_MARK, text)
        text = rd._blocks(text)
        for pattern, repl in rd._PATTERNS:
            text = pattern.sub(repl, text)
        return text

    texts = [t for t, _ in SECRETS]
    texts += [p.read_text(errors="replace") for p in (REPO / "tests" / "data" / "fixtures").rglob("*")
              if p.is_file() and p.stat().st_size < 2_000_000]
    texts += ["git@github.com:org/repo.git", "tokens_per_s: 123", "mkdir -p /raid/scratch",
              "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\nok"]
    secrets = "\n".join(t for t, _ in SECRETS)
    texts += [f"line one\n{secrets}\nlast", "a\n--password\nsplitpw\nz", "x: 1\nAuthorization:\n Bearer tok9\n"]
    assert len(texts) > 100
    for text in texts:
        assert rd.redact(text) == full(text)
