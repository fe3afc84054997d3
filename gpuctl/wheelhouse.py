"""The training environment's wheelhouse: the lock's wheels as a PEP 503 simple index.

`fill_wheelhouse(lock, python, dest, index_url)` fetches, from the upstream index (PEP 691
JSON project pages, or PEP 503 HTML ones as download.pytorch.org serves: links with a
`#sha256=` fragment, relative or absolute), every wheel file whose sha256 the matrix's lock lists and that the
cluster's Python can install, checks each download against that sha256 before it is kept, and
writes `dest/simple/<project>/<file>` with a `dest/simple/<project>/index.html` (links carrying
`#sha256=`) and `dest/simple/index.html`. A file already in `dest` with the right sha256 is not
fetched again, so filling once and serving `dest/simple/` to N nodes downloads each wheel from
upstream once. A locked hash that upstream does not have is reported by package, never
skipped silently.

Where it runs: `gpuctl mirror wheels INVENTORY DEST` fills a folder here; without DEST it fills
the cluster cache's folder ON the cache host (roles/package_mirror with package_mirror_wheels,
which serves it; `gpuctl.repocache.apply_cache` points every node's train_env at it): this module
needs only the standard library, so `remote_fill_script` sends its own source to the cache
host's python3 with the job as JSON, and the cache host fetches through the inventory's
upstream proxy when there is one.
"""

from __future__ import annotations

import hashlib
import html
import html.parser
import json
import os
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
REPORT_MARK = "##gpuctl-wheels "
Fetch = Callable[[str, dict[str, str]], bytes]


class Locked(Protocol):
    """What a lock entry offers (gpuctl.matrix.LockedWheel, or `LockEntry` on the cache host)."""

    name: str
    version: str
    sha256: tuple[str, ...]


@dataclass(frozen=True)
class LockEntry:
    name: str
    version: str
    sha256: tuple[str, ...]


def _urlopen(url: str, headers: dict[str, str]) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=300) as r:
        return r.read()


def wheel_fits(filename: str, python: str) -> bool:
    """A Linux x86_64 (or pure-Python) wheel CPython `python` ("3.11") can install, from its
    file name's tags (`name-version[-build]-python-abi-platform.whl`, each tag '.'-separated)."""
    parts = filename[:-4].split("-") if filename.endswith(".whl") else []
    if len(parts) not in (5, 6):
        return False
    pys, abis, plats = (set(p.split(".")) for p in parts[-3:])
    cp = "cp" + python.replace(".", "")
    if not any(p == "any" or (p.startswith(("manylinux", "linux")) and p.endswith("x86_64")) for p in plats):
        return False
    if cp in pys and abis & {cp, "abi3", "none"}:
        return True
    if "abi3" in abis and any(p.startswith("cp3") and p[3:].isdigit() and int(p[3:]) <= int(cp[3:]) for p in pys):
        return True
    return "none" in abis and any(p.startswith("py3") for p in pys)


@dataclass
class FillReport:
    fetched: list[str] = field(default_factory=list)     # file names downloaded now
    cached: list[str] = field(default_factory=list)      # already in the wheelhouse
    bytes_fetched: int = 0
    missing: list[str] = field(default_factory=list)     # "torch==2.8.0: no wheel … with a locked sha256 …"

    @property
    def ok(self) -> bool:
        return not self.missing

    def as_dict(self) -> dict[str, Any]:
        return {"status": "ok" if self.ok else "incomplete", "fetched": len(self.fetched), "cached": len(self.cached),
                "bytes_fetched": self.bytes_fetched, "missing": self.missing}


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of a file, read in 1 MiB chunks (also used by the lab's stand-in index)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href, self._text = dict(attrs).get("href") or "", []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def project_files(body: bytes, page_url: str) -> list[dict[str, Any]]:
    """The files of a project page as PEP 691 describes them ({filename, url, hashes}): the
    page's JSON, else its PEP 503 HTML links (url resolved against the page, the fragment's
    `sha256=` as the hash; a link without one has no hash). ValueError: neither."""
    try:
        page = json.loads(body)
    except ValueError:
        page = None
    if isinstance(page, dict):
        return [f for f in page.get("files", []) if isinstance(f, dict) and "filename" in f and "url" in f]
    text = body.decode("utf-8", errors="replace")
    if "<a" not in text.lower():
        raise ValueError("neither a PEP 691 JSON nor a PEP 503 HTML project page")
    parser = _Anchors()
    parser.feed(text)
    files = []
    for href, label in parser.links:
        url, _, fragment = href.partition("#")
        name = label or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        algo, _, digest = fragment.partition("=")
        files.append({"filename": name, "url": urllib.parse.urljoin(page_url, url),
                      "hashes": {algo: digest} if algo and digest else {}})
    return files


def _page(links: list[tuple[str, str]]) -> str:
    body = "".join(f'<a href="{html.escape(href)}">{html.escape(text)}</a><br>\n' for href, text in links)
    return f"<!DOCTYPE html>\n<html><body>\n{body}</body></html>\n"


def fill_wheelhouse(lock: Sequence[Locked], python: str, dest: Path, index_url: str = "https://pypi.org/simple",
                    fetch: Fetch | None = None) -> FillReport:
    """Fill `dest` with the lock's wheels for `python` (see the module docstring)."""
    fetch = fetch or _urlopen
    report = FillReport()
    simple = dest / "simple"
    simple.mkdir(parents=True, exist_ok=True)
    base = index_url.rstrip("/")
    for pkg in lock:
        requirement = f"{pkg.name}=={pkg.version}"
        wanted = set(pkg.sha256)
        page_url = f"{base}/{pkg.name}/"
        try:
            files = project_files(fetch(page_url, {"Accept": f"{JSON_ACCEPT}, text/html;q=0.1"}), page_url)
        except (OSError, ValueError) as exc:
            report.missing.append(f"{requirement}: the index's project page could not be read ({exc})")
            continue
        chosen = [f for f in files if f.get("hashes", {}).get("sha256") in wanted
                  and wheel_fits(f["filename"], python)]
        if not chosen:
            report.missing.append(f"{requirement}: no wheel for Python {python} with a locked sha256 on {base}")
            continue
        folder = simple / pkg.name
        folder.mkdir(exist_ok=True)
        for f in chosen:
            name, sha = f["filename"], f["hashes"]["sha256"]
            target = folder / name
            if target.is_file() and file_sha256(target) == sha:
                report.cached.append(name)
                continue
            try:
                data = fetch(f["url"], {})
            except OSError as exc:
                report.missing.append(f"{requirement}: {name} could not be downloaded ({exc})")
                continue
            if hashlib.sha256(data).hexdigest() != sha:
                report.missing.append(f"{requirement}: {name} downloaded with another sha256 than the lock's")
                continue
            tmp = target.with_name(target.name + ".part")
            tmp.write_bytes(data)
            os.replace(tmp, target)
            report.fetched.append(name)
            report.bytes_fetched += len(data)
        (folder / "index.html").write_text(_page([(f"{p.name}#sha256={file_sha256(p)}", p.name)
                                                  for p in sorted(folder.glob("*.whl"))]))
    projects = sorted(p.name for p in simple.iterdir() if p.is_dir())
    (simple / "index.html").write_text(_page([(f"{n}/", n) for n in projects]))
    return report


def _lock_and_python(loaded: Any) -> tuple[Sequence[Locked], str, str]:
    """The lock, the Python and the upstream index of the inventory's training environment
    build (roles/train_env `train_env_build`: the matrix's CUDA lock or its `train_env.cpu`)."""
    from gpuctl.errors import InputError
    from gpuctl.spec import train_env_build

    matrix = loaded.matrix.matrix
    te = matrix.train_env
    fam = loaded.inventory.cluster.os_family
    if te is None or fam not in te.python:
        raise InputError(f"matrix {matrix.name} pins no training environment for {fam}")
    if train_env_build(loaded.inventory) == "cpu":
        if te.cpu is None:
            raise InputError(f"role_vars.train_env_build is cpu; matrix {matrix.name} pins no train_env.cpu")
        return te.cpu.lock.packages, te.python[fam], te.cpu.index_url
    return te.lock.packages, te.python[fam], te.index_url


def fill_for_inventory(loaded: Any, dest: Path, index_url: str | None = None,
                       fetch: Fetch | None = None) -> FillReport:
    """The wheelhouse for an inventory, here: its matrix's lock, its OS's Python."""
    lock, python, upstream = _lock_and_python(loaded)
    return fill_wheelhouse(lock, python, dest, index_url or upstream, fetch)


def remote_fill_script(lock: Sequence[Locked], python: str, dest: str, index_url: str,
                       proxy: str | None = None) -> str:
    """A bash script that fills `dest` on another host with its python3 (this module's own
    source and the job as JSON on stdin-free heredocs) and prints the report after REPORT_MARK."""
    from gpuctl.shellcmd import sh  # here, not at the top: this module's source also runs alone on a host

    job = json.dumps({"lock": [{"name": p.name, "version": p.version, "sha256": list(p.sha256)} for p in lock],
                      "python": python, "dest": dest, "index_url": index_url})
    source = Path(__file__).read_text()
    runner = (f"{source}\n\n"
              "_job = json.loads(os.environ['GPUCTL_WHEELS_JOB'])\n"
              "_rep = fill_wheelhouse([LockEntry(e['name'], e['version'], tuple(e['sha256'])) for e in _job['lock']],"
              " _job['python'], Path(_job['dest']), _job['index_url'])\n"
              f"print({REPORT_MARK!r} + json.dumps(_rep.as_dict()))\n")
    proxy_env = f"export http_proxy={sh(proxy)} https_proxy={sh(proxy)}; " if proxy else ""
    return (f"{proxy_env}GPUCTL_WHEELS_JOB={sh(job)} python3 - <<'GPUCTL_WHEELS_EOF'\n{runner}"
            "GPUCTL_WHEELS_EOF\n")


def parse_remote_report(stdout: str) -> dict[str, Any] | None:
    """The report `remote_fill_script` printed, or None when it printed none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(REPORT_MARK):
            value = json.loads(line[len(REPORT_MARK):])
            return value if isinstance(value, dict) else None
    return None
