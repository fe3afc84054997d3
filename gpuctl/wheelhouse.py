"""The training environment's wheelhouse: the lock's wheels as a PEP 503 simple index.

`fill_wheelhouse(lock, python, dest, index_url)` fetches, from the upstream index (PEP 691
JSON project pages), every wheel file whose sha256 the matrix's lock lists and that the
cluster's Python can install, checks each download against that sha256 before it is kept, and
writes `dest/simple/<project>/<file>` with a `dest/simple/<project>/index.html` (links carrying
`#sha256=`) and `dest/simple/index.html`. A file already in `dest` with the right sha256 is not
fetched again, so filling once and serving `dest/simple/` to N nodes downloads each wheel from
upstream once. Nodes use it through roles/train_env's `train_env_index_url`. A locked
hash that upstream does not have is reported by package, never skipped silently.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import os
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl.errors import InputError
from gpuctl.matrix import LockedWheel

log = logging.getLogger(__name__)

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
Fetch = Callable[[str, dict[str, str]], bytes]


def _urlopen(url: str, headers: dict[str, str]) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=300) as r:
        return r.read()


def wheel_fits(filename: str, python: str) -> bool:
    """A Linux x86_64 (or pure-Python) wheel CPython `python` ("3.11") can install."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    cp = "cp" + python.replace(".", "")
    for t in tags:
        if not (t.platform == "any" or (t.platform.startswith(("manylinux", "linux")) and "x86_64" in t.platform)):
            continue
        if t.interpreter == cp and t.abi in (cp, "abi3", "none"):
            return True
        if t.abi == "abi3" and t.interpreter.startswith("cp3") and int(t.interpreter[3:]) <= int(cp[3:]):
            return True
        if t.interpreter.startswith("py3") and t.abi == "none":
            return True
    return False


@dataclass
class FillReport:
    fetched: list[str] = field(default_factory=list)     # file names downloaded now
    cached: list[str] = field(default_factory=list)      # already in the wheelhouse
    bytes_fetched: int = 0
    missing: list[str] = field(default_factory=list)     # "torch==2.8.0: no file with sha256 …"

    @property
    def ok(self) -> bool:
        return not self.missing

    def as_dict(self) -> dict[str, Any]:
        return {"status": "ok" if self.ok else "incomplete", "fetched": len(self.fetched), "cached": len(self.cached),
                "bytes_fetched": self.bytes_fetched, "missing": self.missing}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _project_page(files: list[tuple[str, str]]) -> str:
    links = "".join(f'<a href="{html.escape(name)}#sha256={sha}">{html.escape(name)}</a><br>\n'
                    for name, sha in sorted(files))
    return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"


def fill_wheelhouse(lock: Sequence[LockedWheel], python: str, dest: Path, index_url: str = "https://pypi.org/simple",
                    fetch: Fetch | None = None) -> FillReport:
    """Fill `dest` with the lock's wheels for `python` (see the module docstring)."""
    fetch = fetch or _urlopen
    report = FillReport()
    simple = dest / "simple"
    simple.mkdir(parents=True, exist_ok=True)
    base = index_url.rstrip("/")
    for pkg in lock:
        wanted = set(pkg.sha256)
        try:
            page = json.loads(fetch(f"{base}/{pkg.name}/", {"Accept": JSON_ACCEPT}))
        except (OSError, ValueError) as exc:
            report.missing.append(f"{pkg.requirement}: the index's project page could not be read ({exc})")
            continue
        chosen = [f for f in page.get("files", []) if f.get("hashes", {}).get("sha256") in wanted
                  and wheel_fits(f["filename"], python)]
        if not chosen:
            report.missing.append(f"{pkg.requirement}: no wheel for Python {python} with a locked sha256 on {base}")
            continue
        folder = simple / pkg.name
        folder.mkdir(exist_ok=True)
        for f in chosen:
            name, sha = f["filename"], f["hashes"]["sha256"]
            target = folder / name
            if target.is_file() and _sha256(target) == sha:
                report.cached.append(name)
                continue
            data = fetch(f["url"], {})
            if hashlib.sha256(data).hexdigest() != sha:
                report.missing.append(f"{pkg.requirement}: {name} downloaded with another sha256 than the lock's")
                continue
            tmp = target.with_name(target.name + ".part")
            tmp.write_bytes(data)
            os.replace(tmp, target)
            report.fetched.append(name)
            report.bytes_fetched += len(data)
        present = [(p.name, _sha256(p)) for p in folder.glob("*.whl")]
        (folder / "index.html").write_text(_project_page(present))
    projects = sorted(p.name for p in simple.iterdir() if p.is_dir())
    (simple / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "".join(
        f'<a href="{html.escape(n)}/">{html.escape(n)}</a><br>\n' for n in projects) + "</body></html>\n")
    return report


def fill_for_inventory(loaded: Any, dest: Path, index_url: str | None = None,
                       fetch: Fetch | None = None) -> FillReport:
    """The wheelhouse for an inventory: its matrix's lock, its OS's Python."""
    matrix = loaded.matrix.matrix
    te = matrix.train_env
    fam = loaded.inventory.cluster.os_family
    if te is None or fam not in te.python:
        raise InputError(f"matrix {matrix.name} pins no training environment for {fam}")
    return fill_wheelhouse(te.lock.packages, te.python[fam], dest, index_url or te.index_url, fetch)
