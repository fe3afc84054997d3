"""Delivery bundle: report + lock + run records, SHA256SUMS that `sha256sum -c` accepts,
secrets redacted, and private keys never inside."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from gpuctl.bundle import is_private_key, make_bundle, verify_bundle
from gpuctl.checks.model import CheckResult, CheckStatus, HostResult, VerifyResult
from gpuctl.runrecord import RunRecord

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"

NOW = dt.datetime(2025, 1, 1, 12, 0, tzinfo=dt.UTC)


def make_run(root: Path, tmp_path: Path) -> RunRecord:
    rec = RunRecord.create("verify", LAB_INVENTORY, root=root)
    hosts = {h: HostResult(h, [CheckResult(h, "nvidia_driver.gpu_count", "nvidia_driver", CheckStatus.PASS)])
             for h in ("gpu-01", "gpu-02")}
    rec.stage("verify", VerifyResult(hosts, duration_s=1.0, run_id=rec.id).as_dict())
    rec.raw("gpu-01", "nvidia-smi.txt", "GPU 0: NVIDIA H100 80GB HBM3\n")
    rec.finish("pass")
    return rec


@pytest.fixture
def keyfile(tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    return (tmp_path / "k").read_text()


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_bundle_contents_and_checksums(tmp_path, keyfile):
    root = tmp_path / "runs"
    rec = make_run(root, tmp_path)
    # things that must never reach the bundle as they are
    (rec.path / "raw" / "gpu-01" / "id_ed25519").write_text(keyfile)  # a private key dropped in a run folder
    (rec.path / "raw" / "gpu-01" / "notes.txt").write_text("key follows\n" + keyfile + "\npassword: hunter2\n")
    (rec.path / "raw" / "gpu-01" / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3Nza x@y\n")
    lock = tmp_path / "lab.lock.yaml"
    lock.write_text("lock_version: 1\n")
    out = make_bundle([rec], tmp_path / "out", lock_file=lock, cluster="lab", runs_root=root, now=NOW)
    assert out.path.name == "lab-delivery-20250101T120000Z.tar.gz"
    files = members(out.path)
    assert "report/report.html" in files and "report/report.json" in files, out.report_reason
    assert json.loads(files["report/report.json"])["status"] == "pass"
    assert files["lock/lab.lock.yaml"] == b"lock_version: 1\n"
    assert f"runs/{rec.id}/stages/verify.json" in files and f"runs/{rec.id}/run.json" in files
    # private keys: the key file left out, the embedded key and the password redacted
    assert f"runs/{rec.id}/raw/gpu-01/id_ed25519" not in files
    assert f"runs/{rec.id}/raw/gpu-01/id_ed25519.pub" in files
    for rel, data in files.items():
        assert b"PRIVATE KEY" not in data, rel
        assert keyfile.splitlines()[1].encode() not in data, rel
        assert b"hunter2" not in data, rel
    notes = files[f"runs/{rec.id}/raw/gpu-01/notes.txt"].decode()
    assert "[redacted private key]" in notes and "password: [redacted]" in notes
    manifest = json.loads(files["MANIFEST.json"])
    assert [e["reason"] for e in manifest["excluded"]] == ["private key: never bundled"]
    assert manifest["excluded"][0]["path"].endswith("raw/gpu-01/id_ed25519")
    # SHA256SUMS covers every other file, and sha256sum itself agrees
    sums = dict(reversed(line.split("  ", 1)) for line in files["SHA256SUMS"].decode().splitlines())
    assert set(sums) == set(files) - {"SHA256SUMS"}
    for rel, digest in sums.items():
        assert hashlib.sha256(files[rel]).hexdigest() == digest
    with tarfile.open(out.path) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    top = next((tmp_path / "x").iterdir())
    check = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=top, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert verify_bundle(out.path) == []


def test_verify_bundle_catches_tampering(tmp_path):
    root = tmp_path / "runs"
    rec = make_run(root, tmp_path)
    out = make_bundle([rec], tmp_path / "b.tar.gz", cluster="lab", runs_root=root, now=NOW)
    files = members(out.path)
    files[f"runs/{rec.id}/raw/gpu-01/nvidia-smi.txt"] = b"tampered\n"
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        import io

        for rel, data in files.items():
            info = tarfile.TarInfo(f"top/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert verify_bundle(bad) == [f"runs/{rec.id}/raw/gpu-01/nvidia-smi.txt: checksum mismatch"]


def test_unredactable_key_material_is_left_out(tmp_path):
    root = tmp_path / "runs"
    rec = make_run(root, tmp_path)
    # binary (not UTF-8) data holding key material cannot be redacted: left out
    (rec.path / "raw" / "gpu-01" / "half.bin").write_bytes(b"\xff\xfe-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n")
    # a text key without its END line (a truncated output) is redacted (issue 17 item 5) and kept
    (rec.path / "raw" / "gpu-01" / "half.txt").write_text("output\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n")
    out = make_bundle([rec], tmp_path / "b.tar.gz", runs_root=root, now=NOW)
    files = members(out.path)
    assert f"runs/{rec.id}/raw/gpu-01/half.bin" not in files
    assert any("could not be redacted" in e["reason"] for e in out.excluded)
    assert b"MIIEow" not in files[f"runs/{rec.id}/raw/gpu-01/half.txt"]
    assert verify_bundle(out.path) == []


def test_missing_report_is_recorded(tmp_path):
    root = tmp_path / "runs"
    inv = tmp_path / "inv.yaml"
    inv.write_text("x: 1\n")
    rec = RunRecord.create("provision", inv, root=root)  # no verify or bench stage: no report
    out = make_bundle([rec], tmp_path / "b.tar.gz", runs_root=root, now=NOW)
    files = members(out.path)
    assert out.report == "missing" and "no verify or bench results" in out.report_reason
    assert b"missing from this bundle" in files["report/MISSING.txt"]
    assert json.loads(files["MANIFEST.json"])["report"] == "missing"


@pytest.mark.parametrize("name, data, private", [
    ("id_rsa", b"anything", True),
    ("server.pem", b"cert", True),
    ("notes.txt", b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n", True),
    ("log.txt", b"some output\n-----BEGIN RSA PRIVATE KEY-----\n", False),  # redacted, or left out if it cannot be
    ("putty.txt", b"PuTTY-User-Key-File-3: ssh-ed25519\n", True),
    ("id_ed25519.pub", b"ssh-ed25519 AAAA x", False),
    ("nccl.txt", b"# nThread 1\n", False),
])
def test_private_key_detection(name, data, private):
    assert is_private_key(name, data) is private


def test_cli_bundle(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from gpuctl.cli.main import main

    root = tmp_path / "runs"
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(root))
    rec = make_run(root, tmp_path)
    r = CliRunner().invoke(main, ["bundle", str(LAB_INVENTORY), "--run", rec.id,
                                  "--out", str(tmp_path / "b"), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["path"].endswith(".tar.gz") and Path(data["path"]).is_file()
    assert verify_bundle(data["path"]) == []
    r = CliRunner().invoke(main, ["bundle", str(LAB_INVENTORY), "--run", "nope"])
    assert r.exit_code == 2 and "not a run folder" in r.output


def test_a_bundle_that_does_not_re_read_soundly_is_never_published(tmp_path, monkeypatch):
    """make_bundle (handover and turnkey write every bundle through it) re-reads the archive it
    wrote with verify_bundle before putting it in place (issue 18: verify_bundle had no caller
    outside tests). A write that corrupts a member leaves no bundle and names the file."""
    root = tmp_path / "runs"
    rec = make_run(root, tmp_path)
    real = tarfile.TarFile.addfile

    def corrupting(self, info, fileobj=None):  # type: ignore[no-untyped-def]
        if fileobj is not None and info.name.endswith("nvidia-smi.txt"):
            import io

            data = fileobj.read().replace(b"H100", b"H200")
            return real(self, info, io.BytesIO(data))
        return real(self, info, fileobj)

    monkeypatch.setattr(tarfile.TarFile, "addfile", corrupting)
    from gpuctl.errors import ExecutionError

    with pytest.raises(ExecutionError, match=r"nvidia-smi\.txt: checksum mismatch"):
        make_bundle([rec], tmp_path / "b.tar.gz", cluster="lab", runs_root=root, now=NOW)
    assert list(tmp_path.glob("b.tar.gz*")) == []
