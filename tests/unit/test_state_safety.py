"""Issue 17, part B (items 3, 6, 7 and 8): every file gpuctl reads goes through one
bounded reader (regular files only, size bound, read once, file:line on every parse
error); huge YAML 1.1 ints and non-finite numbers are refused; the one JSON writer never
prints NaN/Infinity; locks are keyed by the cluster's identity in one state folder that
does not depend on the current folder; run folders never follow or chmod what they did
not create; SIGTERM/SIGHUP finish run.json; turnkey, rebuild and handover need consent;
`lab down` refuses another checkout's lab."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.errors import InputError
from gpuctl.runrecord import RunRecord
from gpuctl.yamlsrc import parse_yaml

REPO = Path(__file__).resolve().parents[2]
LAB_INVENTORY = REPO / "tests" / "data" / "inventories" / "lab-placeholder.yaml"


def _gpuctl(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """gpuctl as a user runs it (a subprocess: a hang is a timeout here, not a stuck suite)."""
    return subprocess.run([sys.executable, "-m", "gpuctl", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
                          timeout=timeout, input=stdin if stdin is not None else "")


# ------------------------------------------------------------------ item 6: numbers in YAML

@pytest.mark.parametrize("value", [
    "0x" + "F" * 5000,                   # hex
    "0b" + "1" * 20000,                  # binary
    "0" + "7" * 5000,                    # octal (YAML 1.1 reads 0777 as octal)
    ":".join(["59"] * 3000),             # sexagesimal 59:59:…
    "1_" + "0_" * 3000 + "0",            # separators
    "1." + "5" * 5000,                   # float
])
def test_huge_yaml_11_numbers_are_refused_with_their_line(value: str) -> None:
    text = f"cluster:\n  name: x\nport: {value}\n"
    with pytest.raises(InputError, match=r"inv\.yaml:3: a number is too long"):
        parse_yaml(text, "inv.yaml")


@pytest.mark.parametrize("value", [".nan", ".NaN", ".inf", "-.inf", "+.Inf", "1.0e+999"])
def test_non_finite_numbers_are_refused_with_file_line_field(value: str) -> None:
    text = f"thresholds:\n  busbw:\n    min: {value}\n"
    with pytest.raises(InputError) as exc:
        parse_yaml(text, "m.yaml")
    assert "m.yaml:3: thresholds.busbw.min" in str(exc.value) and "finite" in str(exc.value)


def test_ordinary_numbers_still_read() -> None:
    data, _ = parse_yaml("a: 0x1F\nb: 1:30\nc: 1.5\nd: 12345678901234567890\ne: '.nan'\n", "ok.yaml")
    assert data == {"a": 31, "b": 90, "c": 1.5, "d": 12345678901234567890, "e": ".nan"}


def test_huge_hex_port_in_an_inventory_cli_exit_2(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(LAB_INVENTORY.read_text().replace("cluster:", "x_port: 0x" + "F" * 5000 + "\ncluster:", 1))
    res = _gpuctl("inventory", "validate", str(inv))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "inv.yaml:" in res.stderr and "number is too long" in res.stderr


# ------------------------------------------------------------------ item 6: regular files only

def test_fifo_inventory_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "inv.yaml"
    os.mkfifo(fifo)
    start = time.monotonic()
    res = _gpuctl("inventory", "validate", str(fifo), timeout=30)  # before: blocked for ever in open()
    assert time.monotonic() - start < 30
    assert res.returncode == 2, res.stderr
    assert f"{fifo}: is a FIFO, not a regular file" in res.stderr and "Traceback" not in res.stderr


def test_inventory_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The text kept (and hashed into the run record) is the text validated: one open."""
    from gpuctl.inventory import load_inventory
    inv = tmp_path / "inv.yaml"
    inv.write_text(LAB_INVENTORY.read_text())
    opened: list[str] = []
    real_open = os.open

    def counting_open(path, *a, **kw):  # type: ignore[no-untyped-def]
        if str(path) == str(inv):
            opened.append(str(path))
        return real_open(path, *a, **kw)

    real_path_open = Path.open

    def counting_path_open(self, *a, **kw):  # type: ignore[no-untyped-def]
        if str(self) == str(inv):
            opened.append(str(self))
        return real_path_open(self, *a, **kw)

    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(Path, "open", counting_path_open)
    loaded = load_inventory(inv)
    assert len(opened) == 1, opened
    assert loaded.text == LAB_INVENTORY.read_text()


# ------------------------------------------------------------------ item 6: the version lock file

@pytest.mark.parametrize(("name", "raw", "needle"), [
    ("deep", b"lock_version: 1\nnodes: " + b"[" * 10000 + b"]" * 10000 + b"\n", "deep"),
    ("latin1", b"lock_version: 1\n# caf\xe9\n", "deep.lock.yaml:2: not UTF-8"),
    ("hugeint", b"lock_version: 0x" + b"F" * 5000 + b"\n", ":1: a number is too long"),
    ("nan", b"lock_version: .nan\n", ":1: lock_version"),
])
def test_hostile_version_lock_files_exit_2(tmp_path: Path, name: str, raw: bytes, needle: str) -> None:
    from gpuctl.lock.model import load_lock
    path = tmp_path / ("deep.lock.yaml" if name == "latin1" else f"{name}.lock.yaml")
    path.write_bytes(raw)
    with pytest.raises(InputError) as exc:
        load_lock(path)
    assert str(path) in str(exc.value)
    assert needle.replace("deep.lock.yaml", str(path)) in str(exc.value)


# ------------------------------------------------------------------ item 6: Packages.gz

def _lab_specs():  # type: ignore[no-untyped-def]
    from gpuctl.inventory import load_inventory_text
    from gpuctl.paths import inventories_dir
    from gpuctl.spec import resolve
    return resolve(load_inventory_text(LAB_INVENTORY.read_text(), "inv.yaml", inventories_dir()))


@pytest.mark.parametrize(("name", "make", "needle"), [
    ("corrupt", lambda good: b"\x1f\x8b\x08\x00" + b"\xff" * 64, "corrupt gzip data"),
    ("truncated", lambda good: good[: len(good) // 2], "truncated gzip data"),
    ("notgzip", lambda good: b"Package: x\n", "corrupt gzip data"),
])
def test_corrupt_or_truncated_packages_gz(tmp_path: Path, name: str, make, needle: str) -> None:  # type: ignore[no-untyped-def]
    from gpuctl.mirror import fetch_index
    good = gzip.compress(("".join(f"Package: p{i}\nVersion: 1.{i}\n\n" for i in range(2000))).encode())
    (tmp_path / "Packages.gz").write_bytes(make(good))
    with pytest.raises(InputError) as exc:
        fetch_index(tmp_path.as_uri())
    assert "Packages.gz" in str(exc.value) and needle in str(exc.value)


def test_gzip_bomb_is_bounded() -> None:
    from gpuctl.fileio import gunzip
    bomb = gzip.compress(b"\0" * (4 * 2**20))
    with pytest.raises(InputError, match="decompresses to over"):
        gunzip(bomb, "Packages.gz", limit=2**20)
    assert gunzip(gzip.compress(b"abc"), "x") == b"abc"


# ------------------------------------------------------------------ item 6/7: run records

@pytest.mark.parametrize(("body", "needle"), [
    ('{"id": "x", "status": NaN}', "NaN is not a number JSON allows"),
    ('{"id": "x", "figure": Infinity}', "Infinity is not a number JSON allows"),
    ("[" * 100000 + "]" * 100000, "nested too deep"),
    ('{"id": "x",\n "status": }', "run.json:2: not valid JSON"),
])
def test_hostile_run_json_is_an_input_error(tmp_path: Path, body: str, needle: str) -> None:
    rec = RunRecord.create("plan", root=tmp_path / "runs")
    (rec.path / "run.json").write_text(body)
    with pytest.raises(InputError) as exc:
        rec.meta()
    assert str(rec.path / "run.json") in str(exc.value) and needle in str(exc.value)


def test_the_json_writer_never_prints_nan_or_infinity(tmp_path: Path) -> None:
    from gpuctl.cli.common import emit_json
    from gpuctl.fileio import dumps_json
    data = {"busbw": math.inf, "x": [math.nan, -math.inf, 1.5], "ok": 2}
    assert json.loads(dumps_json(data), parse_constant=lambda c: pytest.fail(c)) == \
        {"busbw": None, "x": [None, None, 1.5], "ok": 2}
    rec = RunRecord.create("plan", root=tmp_path / "runs")
    rec.stage("bench", data)
    text = (rec.path / "stages" / "bench.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    runner = CliRunner()
    import click

    @click.command()
    def cmd() -> None:
        emit_json(data)

    out = runner.invoke(cmd).output
    assert "Infinity" not in out and "NaN" not in out
    json.loads(out)


# ------------------------------------------------------------------ item 3: locks and run folders

_HOLD = """
import os, sys, time
from pathlib import Path
os.chdir(sys.argv[3])
from gpuctl.runrecord import RunRecord
rec = RunRecord.create('provision', sys.argv[1], root=Path(sys.argv[2]))
print(rec.id, flush=True)
time.sleep(60)
"""
_TRY = """
import os, sys
from pathlib import Path
os.chdir(sys.argv[3])
from gpuctl.cli.common import handle_errors
from gpuctl.runrecord import RunRecord
@handle_errors
def go():
    RunRecord.create(sys.argv[4], sys.argv[1], root=Path(sys.argv[2])).finish('ok')
    print('ran')
go()
"""


def _py(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def test_same_cluster_from_another_folder_hard_link_or_runs_dir_cannot_run_twice(tmp_path: Path) -> None:
    """Before: the lock was <cwd-relative runs root>/.locks/<hash of the path>: each of these ran."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    inv = a / "inv.yaml"
    inv.write_text("cluster: {name: prod-h100}\n")
    os.link(inv, b / "linked.yaml")
    (b / "copy.yaml").write_text("cluster: {name: prod-h100}\n")
    holder = _py(_HOLD, str(inv), "runs", str(a))
    try:
        assert holder.stdout.readline().strip()  # type: ignore[union-attr]
        for path, runs, cwd in [(str(inv), "runs", b),                 # another folder
                                ("linked.yaml", "runs", b),            # a hard link
                                ("copy.yaml", "runs", b),              # a copy: the same cluster
                                (str(inv), str(tmp_path / "other"), a)]:  # another GPUCTL_RUNS_DIR
            p = _py(_TRY, path, runs, str(cwd), "provision")
            out, err = p.communicate(timeout=30)
            assert p.returncode == 3, (path, runs, cwd, out, err)
            assert "ran" not in out and str(holder.pid) in err
        # another cluster is not blocked
        (b / "other.yaml").write_text("cluster: {name: staging}\n")
        p = _py(_TRY, "other.yaml", "runs", str(b), "provision")
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0 and "ran" in out, err
    finally:
        holder.kill()
        holder.wait()


def test_lock_lives_in_the_state_folder_not_the_current_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl import runlock
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\n")
    first = runlock.lock_path(inv)
    monkeypatch.chdir(tmp_path)
    assert runlock.lock_path("inv.yaml") == first
    assert first.parent == Path(os.environ["GPUCTL_STATE_DIR"]) / "locks"
    monkeypatch.delenv("GPUCTL_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert runlock.lock_path(inv) == tmp_path / "xdg" / "gpuctl" / "locks" / first.name
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert runlock.lock_path(inv) == tmp_path / "home" / ".local" / "state" / "gpuctl" / "locks" / first.name
    for bad in ("", "relative/state"):
        monkeypatch.setenv("GPUCTL_STATE_DIR", bad)
        with pytest.raises(InputError, match="GPUCTL_STATE_DIR"):
            runlock.lock_path(inv)


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "foreign"])
def test_a_planted_lock_file_is_refused_and_its_target_untouched(tmp_path: Path, kind: str) -> None:
    """Before: the lock file was opened without O_NOFOLLOW, truncated and chmodded 0600:
    a symlink planted at its path emptied its target."""
    from gpuctl import runlock
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\n")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    path = runlock.lock_path(inv)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "hardlink":
        os.link(victim, path)
    else:
        path.write_text("precious\n")
    with pytest.raises(InputError) as exc:
        runlock.acquire(inv, "provision")
    assert str(path) in str(exc.value)
    assert victim.read_text() == "precious\n" and (victim.stat().st_mode & 0o777) == 0o644
    if kind == "foreign":
        assert path.read_text() == "precious\n"


def test_lock_holder_with_an_impossible_pid_is_taken_over(tmp_path: Path) -> None:
    """Before: `pid: 2147483648` made os.kill raise OverflowError (a traceback)."""
    import socket

    from gpuctl import runlock
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\n")
    path = runlock.lock_path(inv)
    path.parent.mkdir(parents=True, exist_ok=True)
    for pid in (2147483648, 2**70, -1, True, "12"):
        path.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "command": "provision"}))
        with runlock.hold(inv, "provision") as held:
            assert held.note and "stale" in held.note


def test_runs_root_that_exists_is_never_chmodded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: GPUCTL_RUNS_DIR naming an existing 1777 folder made it 0700, and a `runs`
    symlink had its target chmodded."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(shared))
    rec = RunRecord.create("plan")
    assert (shared.stat().st_mode & 0o7777) == 0o1777
    assert rec.path.parent == shared and (rec.path.stat().st_mode & 0o777) == 0o700
    # a `runs` symlink (to a bigger disk, say) is used as it is: its target keeps its mode
    target = tmp_path / "big-disk"
    target.mkdir()
    target.chmod(0o755)
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "runs").symlink_to(target)
    monkeypatch.delenv("GPUCTL_RUNS_DIR")
    monkeypatch.chdir(tmp_path / "cwd")
    rec = RunRecord.create("plan")
    assert (target.stat().st_mode & 0o777) == 0o755
    assert (target / rec.id / "run.json").is_file()


def test_a_symlink_at_a_run_folder_name_is_never_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mkdir is the claim: a symlink planted where the next run folder would be is skipped,
    its target neither chmodded nor written."""
    import datetime as dt
    root = tmp_path / "runs"
    root.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    victim.chmod(0o755)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    for s in {stamp, (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).strftime("%Y%m%dT%H%M%S")}:
        (root / f"{s}-plan").symlink_to(victim)
    rec = RunRecord.create("plan", root=root)
    assert not rec.path.is_symlink() and list(victim.iterdir()) == []
    assert (victim.stat().st_mode & 0o777) == 0o755


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_runs_dir_is_exit_2_and_touches_nothing(tmp_path: Path, value: str) -> None:
    """Before: GPUCTL_RUNS_DIR="" chmodded the current folder 0700."""
    tmp_path.chmod(0o755)
    res = _gpuctl("report", cwd=tmp_path, env={"GPUCTL_RUNS_DIR": value})
    assert res.returncode == 2, res.stderr
    assert "GPUCTL_RUNS_DIR" in res.stderr and "Traceback" not in res.stderr
    assert (tmp_path.stat().st_mode & 0o777) == 0o755
    with pytest.raises(InputError, match="GPUCTL_RUNS_DIR"):
        os.environ["GPUCTL_RUNS_DIR"] = value
        try:
            RunRecord.create("plan")
        finally:
            del os.environ["GPUCTL_RUNS_DIR"]
    assert (tmp_path.stat().st_mode & 0o777) == 0o755


def test_runs_dir_naming_a_file_is_exit_2(tmp_path: Path) -> None:
    """Before: a traceback (FileExistsError from mkdir)."""
    f = tmp_path / "afile"
    f.write_text("x")
    res = _gpuctl("report", cwd=tmp_path, env={"GPUCTL_RUNS_DIR": str(f)})
    assert res.returncode == 2, res.stderr
    assert str(f) in res.stderr and "not a folder" in res.stderr and "Traceback" not in res.stderr
    with pytest.raises(InputError, match="not a folder"):
        RunRecord.create("plan", root=f / "sub")


@pytest.mark.parametrize("patched", [False, True], ids=["plain", "gevent"])
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_finish_run_json(tmp_path: Path, signame: str, patched: bool) -> None:
    """Before: run.json stayed "running" and the lock record named a dead holder. Under
    gevent (provision, bench) the signal arrives while the hub waits: it must still reach
    the command, without a traceback."""
    import signal
    code = """
import sys, time
from pathlib import Path
if sys.argv[3] == "1":
    from gpuctl.runner.bootstrap import ensure_patched
    ensure_patched()
import gevent
from gpuctl.cli.common import handle_errors
from gpuctl.runrecord import RunRecord
@handle_errors
def go():
    rec = RunRecord.create('provision', sys.argv[2], root=Path(sys.argv[1]))
    print(rec.path, flush=True)
    gevent.spawn(gevent.sleep, 60).join() if sys.argv[3] == "1" else time.sleep(60)
go()
"""
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\n")
    p = _py(code, str(tmp_path / "runs"), str(inv), "1" if patched else "0")
    path = Path(p.stdout.readline().strip())  # type: ignore[union-attr]
    p.send_signal(getattr(signal, signame))
    _, err = p.communicate(timeout=30)
    assert p.returncode == 3, err
    assert signame in err and "Traceback" not in err
    meta = json.loads((path / "run.json").read_text())
    assert meta["status"] == "interrupted" and meta.get("finished")
    from gpuctl import runlock
    assert runlock.lock_path(inv).read_text() == ""  # released: no holder left behind


# ------------------------------------------------------------------ item 6: rich markup

def _main():  # type: ignore[no-untyped-def]
    from gpuctl.cli.main import main
    return main


def test_markup_in_a_matrix_description_is_shown_as_it_is(tmp_path: Path) -> None:
    """Before: `[/]` in a description raised rich's MarkupError (a traceback) and `[bold]`
    was swallowed as styling."""
    src = (REPO / "matrices" / "r580-cuda13.0.yaml").read_text()
    lines = src.splitlines()
    idx = next(i for i, line in enumerate(lines) if line.startswith("description:"))
    lines[idx] = "description: 'closing [/] and [bold]not bold[/bold] and [link=http://x]y[/link]'"
    m = tmp_path / "m.yaml"
    m.write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(_main(), ["matrix", "show", str(m)])
    assert res.exit_code == 0, res.output
    assert "closing [/] and [bold]not bold[/bold] and [link=http://x]y[/link]" in res.output
    res = CliRunner().invoke(_main(), ["matrix", "list"])
    assert res.exit_code == 0, res.output


def test_markup_in_tool_output_is_shown_as_it_is(tmp_path: Path) -> None:
    """A tool output file named with markup, and a Table cell quoting tool text."""
    fix = REPO / "tests" / "data" / "fixtures" / "nccl" / "nccl-allreduce-a100-1node-8gpu-oci.txt"
    odd = tmp_path / "out[red]x[bold].txt"
    odd.write_text(fix.read_text())
    res = CliRunner().invoke(_main(), ["analyze", "nccl", str(odd), "--sku", "hgx-a100-80gb"])
    assert res.exit_code == 0, res.output
    assert "out[red]x[bold].txt" in res.output.replace("\n", "")


def test_run_summary_and_progress_tables_quote_errors_literally() -> None:
    """The provision summary's error column and the live table's operation column hold
    outside text (an SSH error, an operation named after a knob)."""
    from rich.console import Console

    from gpuctl.cli.common import console
    from gpuctl.runner.engine import HostResult
    from gpuctl.runner.summary import RunSummary
    con = Console(record=True, width=200)  # markup on: the cells must be Text, not markup
    host = HostResult(node="gpu-[/]01", host="10.0.0.1", status="failed",
                      error="ssh: closing [/] tag and [bold]x[/bold]")
    con.print(RunSummary(command="provision", hosts={"gpu-[/]01": host}).table())
    text = con.export_text()
    assert "closing [/] tag and [bold]x[/bold]" in text and "gpu-[/]01" in text
    out = console()
    assert out._markup is False


# ------------------------------------------------------------------ item 7: non-finite figures

def test_busbw_inf_is_not_a_pass_and_json_holds_no_infinity(tmp_path: Path) -> None:
    """Before: busbw `inf` was judged pass against the SKU's minimum and `--json` printed
    `Infinity` (not JSON)."""
    fix = REPO / "tests" / "data" / "fixtures" / "nccl" / "nccl-allreduce-a100-1node-8gpu-oci.txt"
    text = fix.read_text()
    text = text.replace("133.14  233.00", "133.14     inf").replace("133.34  233.34", "133.34     inf")
    text = text.replace("Avg bus bandwidth    : 233.168", "Avg bus bandwidth    : inf")
    out = tmp_path / "nccl.txt"
    out.write_text(text)
    res = CliRunner().invoke(_main(), ["analyze", "nccl", str(out), "--sku", "hgx-a100-80gb", "--json"])
    assert "Infinity" not in res.output and "NaN" not in res.output
    doc = json.loads(res.output)
    busbw = next(v for v in doc["verdicts"] if v["check"] == "all_reduce_busbw_gb_s")
    assert busbw["status"] == "error" and "not a finite number" in busbw["message"], busbw
    assert doc["status"] != "pass" and res.exit_code == 1


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_judge_refuses_non_finite_measurements(value: float) -> None:
    from gpuctl.catalog import Threshold
    from gpuctl.remediation import Remediation
    from gpuctl.verdicts import Status, judge, judge_fact
    for thr in (Threshold(min=100, source="src"), Threshold(max=5, source="src")):
        v = judge("x", value, thr, "GB/s")
        assert v.status is Status.ERROR and v.value is None
    f = judge_fact("rate", True, value=value, expected=400, source="src", remediation=Remediation.RERUN, message="m")
    assert f.status is Status.ERROR and f.value is None


@pytest.mark.parametrize(("field", "value"), [("power_kw", ".inf"), ("power_kw", ".nan")])
def test_non_finite_inventory_numbers_exit_2_with_file_line(tmp_path: Path, field: str, value: str) -> None:
    text = LAB_INVENTORY.read_text()
    assert "cluster:" in text
    inv = tmp_path / "inv.yaml"
    inv.write_text(text + f"x_extra:\n  {field}: {value}\n")
    res = CliRunner().invoke(_main(), ["inventory", "validate", str(inv)])
    assert res.exit_code == 2, res.output
    assert f"inv.yaml:{len(text.splitlines()) + 2}: x_extra.{field}" in res.output and "finite" in res.output


# ------------------------------------------------------------------ item 8: consent and ownership

@pytest.mark.parametrize("argv", [["turnkey"], ["rebuild", "--host", "gpu-01"], ["handover"]])
def test_changing_commands_need_yes_without_a_terminal(tmp_path: Path, argv: list[str]) -> None:
    """Before: they acted at once, with no terminal and no --yes."""
    runs = tmp_path / "runs"
    res = _gpuctl(argv[0], str(LAB_INVENTORY), *argv[1:], env={"GPUCTL_RUNS_DIR": str(runs)})
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "--yes" in res.stderr and "nothing was changed" in res.stderr and "Traceback" not in res.stderr
    assert not runs.exists()  # no run folder, no lock taken
    assert not list((Path(os.environ["GPUCTL_STATE_DIR"])).rglob("*.lock"))


@pytest.mark.parametrize("argv", [["turnkey"], ["rebuild", "--host", "gpu-01"], ["handover"]])
def test_changing_commands_ask_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             argv: list[str]) -> None:
    import gpuctl.cli.common as common
    monkeypatch.setattr(common, "on_terminal", lambda: True)
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path / "runs"))
    res = CliRunner().invoke(_main(), [argv[0], str(LAB_INVENTORY), *argv[1:]], input="n\n")
    assert res.exit_code == 0, res.output
    assert "Continue?" in res.output and "cancelled: nothing was changed" in res.output
    assert not (tmp_path / "runs").exists()


def _lab_state(tmp_path: Path, checkout: str):  # type: ignore[no-untyped-def]
    from gpuctl.lab.state import LabState, save_state
    sdir = tmp_path / "xdg" / "gpuctl" / "lab"
    state = LabState(sku="hgx-h100-80gb", smp=2, memory_mb=1536, nvme_count=0, nvme_size_gb=2,
                     image_dir=str(tmp_path / "image"), key_path=str(tmp_path / "k"),
                     known_hosts=str(sdir / "known_hosts"), state_dir=str(sdir), checkout=checkout)
    return save_state(state)


def test_lab_down_refuses_a_lab_of_another_checkout(tmp_path: Path) -> None:
    """Before: `gpuctl lab down` from any folder stopped whichever lab ran on the machine."""
    path = _lab_state(tmp_path, "/elsewhere/gpuctl")
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    res = _gpuctl("lab", "down", env=env)
    assert res.returncode == 2, res.stderr
    assert "/elsewhere/gpuctl" in res.stderr and "--force" in res.stderr
    assert path.exists()
    res = _gpuctl("lab", "down", "--force", env=env)
    assert res.returncode == 0, res.stderr
    assert not path.exists()


def test_lab_records_its_checkout_and_down_from_it_works(tmp_path: Path) -> None:
    from gpuctl.lab.state import load_state, this_checkout
    path = _lab_state(tmp_path, this_checkout())
    assert load_state(path).checkout == str(REPO.resolve())  # type: ignore[union-attr]
    res = _gpuctl("lab", "down", env={"XDG_STATE_HOME": str(tmp_path / "xdg")})
    assert res.returncode == 0, res.stderr
    assert not path.exists()


def test_a_new_lab_state_names_this_checkout(tmp_path: Path) -> None:
    from gpuctl.lab.state import LabState
    state = LabState(sku="x", smp=1, memory_mb=1, nvme_count=0, nvme_size_gb=1, image_dir="", key_path="",
                     known_hosts="", state_dir="")
    assert state.checkout == str(REPO.resolve())
    assert LabState.from_dict({k: v for k, v in state.to_dict().items() if k != "checkout"}).checkout == ""


# ------------------------------------------------------------------ item 6: wrong-shaped run records

_SHAPES = [
    ("run.json", {"id": "x", "command": "verify", "status": ["a"]}, "status: expected a string or null"),
    ("run.json", {"command": "verify", "inventory": "a string"}, "inventory: expected an object"),
    ("stages/verify.json", [1, 2], "a stage is a JSON object, found an array"),
    ("stages/verify.json", {"status": "pass", "hosts": [1]}, "hosts: expected an object"),
    ("stages/verify.json", {"hosts": {"n1": "x"}}, "hosts.n1: expected an object"),
    ("stages/verify.json", {"hosts": {"n1": {"checks": "abc"}}}, "hosts.n1.checks: expected an array"),
    ("stages/verify.json", {"hosts": {"n1": {"checks": [{"role": ["x"]}]}}}, "hosts.n1.checks[0].role"),
    ("stages/bench.json", {"hosts": {"n1": {"results": 5}}}, "hosts.n1.results: expected an array"),
    ("stages/bench.json", {"thresholds": {"busbw": {"min": "abc"}}}, "thresholds.busbw.min: expected a number"),
    ("stages/bench.json", {"nccl_series": [{"points": [[1, "x"]]}]}, "nccl_series[0].points[0]"),
    ("stages/bench.json", '{"hosts": {}, "thresholds": {"b": {"min": NaN}}}', "NaN is not a number JSON allows"),
]


@pytest.mark.parametrize(("rel", "body", "needle"), _SHAPES)
def test_report_on_a_wrong_shaped_run_record_exit_2(tmp_path: Path, rel: str, body: object, needle: str) -> None:
    """Before: AttributeError/TypeError tracebacks from inside the report (exit 1)."""
    rec = RunRecord.create("verify", root=tmp_path / "runs")
    (rec.path / "stages").mkdir(exist_ok=True)
    (rec.path / "stages" / "verify.json").write_text(json.dumps({"status": "pass", "hosts": {}}))
    (rec.path / rel).write_text(body if isinstance(body, str) else json.dumps(body))
    res = _gpuctl("report", str(rec.path), "--format", "json", env={"GPUCTL_RUNS_DIR": str(tmp_path / "runs")})
    assert res.returncode == 2, res.stderr
    assert str(rec.path / rel) in res.stderr and needle in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(("body", "needle"), [
    ({"stages": ["preflight"]}, "stages: expected an object"),
    ({"stages": {"preflight": "pass"}}, "stages.preflight: expected an object"),
    ({"stages": {}, "history": {"a": 1}}, "history: expected an array"),
    ('{"stages": {"preflight": {"status": "pass", "seconds": NaN}}}', "NaN is not a number JSON allows"),
])
def test_turnkey_resume_of_a_wrong_shaped_run_exit_2(tmp_path: Path, body: object, needle: str) -> None:
    """Before: AttributeError from the resume (or a stage judged from garbage)."""
    from gpuctl.paths import inventories_dir
    inv = tmp_path / "h100.yaml"
    inv.write_text((inventories_dir() / "h100-8x4.yaml").read_text())
    runs = tmp_path / "runs"
    rec = RunRecord.create("turnkey", root=runs)
    rec.finish("failed at verify")
    (rec.path / "stages").mkdir(exist_ok=True)
    (rec.path / "stages" / "turnkey.json").write_text(body if isinstance(body, str) else json.dumps(body))
    from gpuctl.turnkey import STAGES, StageOutcome, run_turnkey
    ran: list[str] = []

    def stage(ctx):  # type: ignore[no-untyped-def]
        ran.append("x")
        return StageOutcome("pass", "ok")

    with pytest.raises(InputError) as exc:
        run_turnkey(inv, dict.fromkeys(STAGES, stage), resume=str(rec.path))
    assert str(rec.path / "stages" / "turnkey.json") in str(exc.value) and needle in str(exc.value)
    assert ran == []  # nothing ran on the nodes


def test_real_run_records_have_the_shapes(tmp_path: Path) -> None:
    """The shapes are what gpuctl itself writes: a verify result and a bench result as their
    writers dump them pass the check."""
    from gpuctl.checks.model import CheckResult, CheckStatus, HostResult, VerifyResult
    from gpuctl.results import verify_stage
    check = CheckResult(**{f: ("x" if f not in ("status", "duration_s", "unreachable") else  # type: ignore[arg-type]
                               {"status": CheckStatus.FAIL, "duration_s": 1.5, "unreachable": False}[f])
                           for f in CheckResult.__dataclass_fields__})
    verify = json.loads(json.dumps(VerifyResult({"n1": HostResult("n1", [check])}).as_dict()))
    assert verify_stage(verify).dump() == verify  # the verify stage's shape is its typed model (gpuctl.results)


# ------------------------------------------------------------------ the class: one reader

#: Files that still parse a file directly, and why that is not an input gpuctl must bound.
_DIRECT_PARSE_ALLOWED = {
    "gpuctl/lab/image.py": "the lab image cache's own manifest, written by gpuctl beside the image",
    "gpuctl/lab/pcisim.py": "runs inside a lab guest, on the profile gpuctl copied there",
    "gpuctl/lab/nodes.py": "the shipped lab inventory template (another helper's file; see the report)",
}


def test_no_module_parses_a_file_around_the_bounded_reader() -> None:
    """YAML and JSON files are read through gpuctl.fileio / gpuctl.yamlsrc (size bound,
    regular files only, file:line errors); a new direct yaml.safe_load/json.load of a file
    would reopen the class of hangs and tracebacks this guards."""
    import re
    pattern = re.compile(r"yaml\.(safe_)?load\(|json\.load\(|json\.loads\([^)]*read_(text|bytes)\(")
    offenders = []
    for path in sorted((REPO / "gpuctl").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("gpuctl/lab/standin/") or rel in _DIRECT_PARSE_ALLOWED:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []


@pytest.mark.parametrize("entry", ["matrix", "analyze", "drift-lock", "stage", "packages", "lab-state"])
def test_a_fifo_is_refused_at_every_reader(tmp_path: Path, entry: str) -> None:
    """The class of the FIFO-inventory hang: each reader of a user-reachable file refuses a
    FIFO at once (exit 2 naming it) instead of blocking in open() or read()."""
    fifo = tmp_path / "x.fifo"
    os.mkfifo(fifo)
    env = {"GPUCTL_RUNS_DIR": str(tmp_path / "runs"), "XDG_STATE_HOME": str(tmp_path / "xdg")}
    if entry == "matrix":
        res = _gpuctl("matrix", "show", str(fifo), env=env, timeout=30)
    elif entry == "analyze":
        res = _gpuctl("analyze", "nccl", str(fifo), env=env, timeout=30)
    elif entry == "drift-lock":
        res = _gpuctl("drift", str(LAB_INVENTORY), "--lock-file", str(fifo), env=env, timeout=30)
    elif entry == "stage":
        rec = RunRecord.create("verify", root=tmp_path / "runs")
        (rec.path / "stages").mkdir()
        os.rename(fifo, rec.path / "stages" / "verify.json")
        fifo = rec.path / "stages" / "verify.json"
        res = _gpuctl("report", str(rec.path), env=env, timeout=30)
    elif entry == "packages":
        mirror = tmp_path / "mirror"
        mirror.mkdir()
        os.rename(fifo, mirror / "Packages.gz")
        fifo = mirror / "Packages.gz"
        code = ("import sys\nfrom gpuctl.cli.common import handle_errors\nfrom gpuctl.mirror import fetch_index\n"
                "handle_errors(lambda: fetch_index(sys.argv[1]))()")
        res = subprocess.run([sys.executable, "-c", code, mirror.as_uri()], capture_output=True, text=True,
                             timeout=30, env={**os.environ, "PYTHONPATH": str(REPO)})
    else:
        (tmp_path / "xdg" / "gpuctl" / "lab").mkdir(parents=True)
        os.rename(fifo, tmp_path / "xdg" / "gpuctl" / "lab" / "state.json")
        fifo = tmp_path / "xdg" / "gpuctl" / "lab" / "state.json"
        res = _gpuctl("lab", "down", env=env, timeout=30)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"{fifo}: is a FIFO" in res.stderr and "Traceback" not in res.stderr


def test_turnkey_validates_the_inventory_before_asking(tmp_path: Path) -> None:
    """A broken inventory is named first (exit 2 with file:line), not hidden behind --yes."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: {name: x}\nnodes: [\n")
    res = _gpuctl("turnkey", str(inv), env={"GPUCTL_RUNS_DIR": str(tmp_path / "runs")})
    assert res.returncode == 2 and "inv.yaml:" in res.stderr and "--yes" not in res.stderr, res.stderr


def test_the_run_record_hashes_the_inventory_text_that_was_validated(tmp_path: Path) -> None:
    """Read once: the sha256 in run.json is that of the text validated, even if the file
    changes afterwards (it used to be a second read of the file)."""
    import hashlib

    from gpuctl.inventory import load_inventory
    from gpuctl.runrecord import inventory_sha256
    inv = tmp_path / "inv.yaml"
    inv.write_text(LAB_INVENTORY.read_text())
    loaded = load_inventory(inv)
    inv.write_text(LAB_INVENTORY.read_text() + "# edited after validation\n")
    want = hashlib.sha256(LAB_INVENTORY.read_bytes()).hexdigest()
    assert inventory_sha256(loaded) == want
    rec = RunRecord.create("provision", loaded.path, root=tmp_path / "runs", cluster="x",
                           inventory_text=loaded.text)
    assert rec.meta()["inventory"]["sha256"] == want
    rec.finish("ok")
