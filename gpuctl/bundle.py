"""The delivery bundle: one `.tar.gz` the provider hands to the customer.

Layout inside the archive (one top folder `<cluster>-delivery-<UTC stamp>/`):

    report/report.html, report/report.json   the acceptance report (gpuctl.report), or
    report/MISSING.txt                       why it could not be made
    lock/<inventory>.lock.yaml               the lock file
    runs/<run id>/…                          every run record given (run.json, stages/, raw/, logs)
    MANIFEST.json                            what is in the bundle, what was left out and why
    SHA256SUMS                               `sha256sum -c` format, every other file

The archive is re-read (`verify_bundle`: every checksum, no private key material) before it is
put in place; a bundle that does not re-read soundly is never left behind.

Every text file passes `gpuctl.redact.redact` (private keys, passwords, tokens, URL
credentials). Files that are private keys — by content (`-----BEGIN … PRIVATE KEY-----`,
OpenSSH/PuTTY private key headers) or by name (id_rsa, id_ed25519, *.pem, *.key, …) — are
never copied; the manifest names them as excluded.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import logging
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl import __version__
from gpuctl.errors import ExecutionError, InputError
from gpuctl.fileio import read_bytes
from gpuctl.redact import redact
from gpuctl.report.gather import build_report
from gpuctl.report.render import render
from gpuctl.runrecord import RunRecord

log = logging.getLogger(__name__)

_PRIVATE_CONTENT = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|PuTTY-User-Key-File-|-----BEGIN OPENSSH PRIVATE")
_PRIVATE_NAMES = re.compile(r"^(id_(rsa|dsa|ecdsa|ed25519)(_sk)?|.*\.(pem|key|p12|pfx|ppk)|ssh_host_.*_key)$")


def is_private_key(name: str, data: bytes) -> bool:
    """A file that is a private key: it starts with a private key header, or is named like
    one (id_rsa, *.pem, …; never a .pub). Text that merely contains a key is redacted."""
    if _PRIVATE_CONTENT.match(data.lstrip()):
        return True
    return not name.endswith(".pub") and bool(_PRIVATE_NAMES.match(name))


def _clean(name: str, data: bytes) -> bytes:
    """Redact secrets from text; binary data is kept as is (private keys never get here)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    return redact(text).encode("utf-8")


@dataclass
class BundleResult:
    path: Path
    files: dict[str, str] = field(default_factory=dict)  # archive path -> sha256
    excluded: list[dict[str, str]] = field(default_factory=list)
    report: str = "missing"  # "included" | "missing"
    report_reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "files": len(self.files), "excluded": self.excluded,
                "report": self.report, "report_reason": self.report_reason}


def _report(report_ref: str | None, root: Path | None) -> tuple[dict[str, bytes], str]:
    """report.html + report.json through gpuctl.report, or ({}, why not)."""
    try:
        data = build_report(report_ref or "latest", root)
    except InputError as exc:
        return {}, f"the report could not be built: {exc}"
    return {"report.html": render(data, "html").encode(), "report.json": render(data, "json").encode()}, ""


def make_bundle(runs: Sequence[RunRecord], out: str | Path, *, lock_file: str | Path | None = None,
                cluster: str = "cluster", report_ref: str | None = None, runs_root: Path | None = None,
                now: dt.datetime | None = None) -> BundleResult:
    """Write the bundle `.tar.gz` at `out` (a file, or a folder to put it in)."""
    if not runs:
        raise InputError("a delivery bundle needs at least one run record")
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    top = f"{cluster}-delivery-{stamp}"
    target = Path(out)
    if target.is_dir() or not target.name.endswith((".tar.gz", ".tgz")):
        target.mkdir(parents=True, exist_ok=True)
        target = target / f"{top}.tar.gz"
    target.parent.mkdir(parents=True, exist_ok=True)
    result = BundleResult(target)
    members: dict[str, bytes] = {}

    def add(rel: str, data: bytes, source: str) -> None:
        name = rel.rsplit("/", 1)[-1]
        if is_private_key(name, data):
            result.excluded.append({"path": source, "reason": "private key: never bundled"})
            log.warning("bundle: left out %s (a private key)", source)
            return
        cleaned = _clean(name, data)
        if _PRIVATE_CONTENT.search(cleaned):  # binary, or a key redact() could not match (truncated)
            result.excluded.append({"path": source, "reason": "holds private key material that could not be "
                                                               "redacted: never bundled"})
            log.warning("bundle: left out %s (private key material)", source)
            return
        members[rel] = cleaned

    report_files, why = _report(report_ref or runs[-1].id, runs_root)
    if report_files:
        for name, data in report_files.items():
            add(f"report/{name}", data, f"gpuctl.report:{name}")
        result.report = "included"
    else:
        result.report_reason = why
        add("report/MISSING.txt", (f"The acceptance report is missing from this bundle: {why}\n").encode(), "bundle")
    if lock_file is not None:
        lp = Path(lock_file)
        if not lp.is_file():
            raise InputError(f"{lp}: no lock file; run `gpuctl lock` first")

        add(f"lock/{lp.name}", read_bytes(lp, what="lock file"), str(lp))
    for rec in runs:
        for p in sorted(rec.path.rglob("*")):
            if p.is_symlink():
                result.excluded.append({"path": str(p), "reason": "symbolic link"})
                continue
            if not p.is_file():
                continue
            add(f"runs/{rec.id}/{p.relative_to(rec.path).as_posix()}", p.read_bytes(), str(p))
    result.files = {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(members.items())}
    manifest = {
        "gpuctl_version": __version__, "created": stamp, "cluster": cluster,
        "runs": [r.id for r in runs], "lock_file": Path(lock_file).name if lock_file else None,
        "report": result.report, "report_reason": result.report_reason,
        "files": result.files, "excluded": result.excluded,
    }
    members["MANIFEST.json"] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    result.files["MANIFEST.json"] = hashlib.sha256(members["MANIFEST.json"]).hexdigest()
    sums = "".join(f"{result.files[rel]}  {rel}\n" for rel in sorted(result.files))
    members["SHA256SUMS"] = sums.encode()
    tmp = target.with_name(target.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for rel in sorted(members):
            data = members[rel]
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            info.mode = 0o644
            info.mtime = int((now or dt.datetime.now(dt.UTC)).timestamp())
            tar.addfile(info, io.BytesIO(data))
    problems = verify_bundle(tmp)  # what the customer will check: re-read before it is handed over
    if problems:
        tmp.unlink(missing_ok=True)
        raise ExecutionError(f"{target}: the bundle written does not re-read soundly, so it was not kept: "
                             + "; ".join(problems[:5]))
    tmp.replace(target)
    return result


def verify_bundle(path: str | Path) -> list[str]:
    """Problems found re-reading a bundle: checksum mismatches, files without a checksum,
    private key material. Empty when the bundle is sound."""
    problems: list[str] = []
    with tarfile.open(path, "r:gz") as tar:
        data = {}
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                data[m.name.split("/", 1)[1]] = f.read() if f else b""
    sums = {}
    for line in data.get("SHA256SUMS", b"").decode().splitlines():
        digest, _, rel = line.partition("  ")
        sums[rel] = digest
    for rel, content in data.items():
        if _PRIVATE_CONTENT.search(content):
            problems.append(f"{rel}: holds private key material")
        if rel == "SHA256SUMS":
            continue
        if rel not in sums:
            problems.append(f"{rel}: not in SHA256SUMS")
        elif hashlib.sha256(content).hexdigest() != sums[rel]:
            problems.append(f"{rel}: checksum mismatch")
    problems += [f"{rel}: listed in SHA256SUMS but missing" for rel in sums if rel not in data]
    return problems
