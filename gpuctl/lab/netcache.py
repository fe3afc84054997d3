"""The lab's apt cache (a small caching HTTP proxy) and the stand-in repository server.

Both run as detached Python subprocesses bound to 127.0.0.1 only; guests reach
them through QEMU user networking as 10.0.2.2:PORT. apt-cacher-ng cannot bind
in this environment ("Error resolving address for binding"), so the cache is a
small proxy of our own: it forwards plain-HTTP GET/HEAD requests for the Debian
archive hosts only, keeps immutable files (``pool/``, ``by-hash/``) forever under
``<cache>/apt-cache/`` and revalidates index files after a TTL (serving the stale
copy when the archive cannot be reached), so rebuilding an image or reprovisioning
a lab downloads nothing twice. Given the stand-in repository (``--repo-dir``), the proxy
also answers for it at the address the guests know it by (``http://10.0.2.2:<repo port>/``,
the port read from the repo server's port file), from disk: a package cache on a node
(roles/package_mirror) chains every miss through the lab proxy, the NVIDIA repository's too.

Each server can append one JSON line per request it answers to an access log
(``--access-log F``; the lab keeps ``<state dir>/access-proxy.jsonl`` and
``access-repo.jsonl``): time, client, method, path, status, bytes sent (status line,
headers and body) and, for the proxy, whether it came from the cache (``hit``, ``stale``),
from upstream (``miss``) or from the stand-in repository (``repo``).
`bytes_served(logs, since=t)` sums them — what crossed the lab's uplink to the guests
during a run.

Run as ``python -m gpuctl.lab.netcache proxy|repo --dir D --port-file F [--access-log F]``.
"""

from __future__ import annotations

import argparse
import http.server
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuctl.errors import ExecutionError
from gpuctl.lab.state import GUEST_HOST_ADDRESS, ProcessRecord, cache_root
from gpuctl.repocache import ACNG_MAX_PROXY_PORT

log = logging.getLogger(__name__)

#: Upstream hosts the proxy forwards to; anything else is refused (403).
ALLOWED_UPSTREAMS: frozenset[str] = frozenset(
    {"deb.debian.org", "security.debian.org", "ftp.debian.org"}
)
#: Index files (InRelease, Packages without by-hash) are refetched after this many seconds.
INDEX_TTL_S = 6 * 3600
_CHUNK = 1 << 16


def apt_cache_dir() -> Path:
    """Where the proxy keeps downloaded archive files (persists across labs)."""
    return cache_root() / "apt-cache"


def repo_dir() -> Path:
    """The stand-in NVIDIA repository the repo server publishes (the stand-in builder fills it)."""
    path = cache_root() / "repo"
    path.mkdir(parents=True, exist_ok=True)
    return path


def is_immutable(url_path: str) -> bool:
    """Archive files whose content never changes under the same URL."""
    return (
        "/pool/" in url_path
        or "/by-hash/" in url_path
        or url_path.endswith((".deb", ".udeb", ".dsc"))
    )


def cache_file_for(cache_dir: Path, url: str) -> Path | None:
    """The cache path for an absolute http URL, or None if the URL is not cacheable."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    segments = [s for s in parts.path.split("/") if s]
    if not segments or any(s in {".", ".."} for s in segments):
        return None
    return cache_dir.joinpath(parts.hostname, *segments)


_ACCESS_LOCK = threading.Lock()


class _CountingWriter:
    """A handler's `wfile` that counts the bytes written through it."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.count = 0

    def write(self, data: Any) -> Any:
        written = self._raw.write(data)
        self.count += memoryview(data).nbytes
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class AccessLogged(http.server.BaseHTTPRequestHandler):
    """Appends one JSON line per answered request to `access_log` (None: no log)."""

    access_log: Path | None = None
    #: Record the proxy's cache outcome ("cache": hit | stale | miss | repo | null) in each line.
    logs_cache = False

    def setup(self) -> None:
        super().setup()
        self.wfile = _CountingWriter(self.wfile)  # type: ignore[assignment]

    def handle_one_request(self) -> None:
        self._status: int | None = None
        self._cache: str | None = None
        self.wfile.count = 0  # type: ignore[attr-defined]
        started = time.time()
        try:
            super().handle_one_request()
        finally:
            if self._status is not None:
                self._log_access(started)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if isinstance(code, int):  # HTTPStatus too; "-" when unknown
            self._status = int(code)
        super().log_request(code, size)

    def _log_access(self, started: float) -> None:
        if self.access_log is None:
            return
        entry: dict[str, Any] = {
            "time": round(started, 3), "client": self.client_address[0], "method": getattr(self, "command", "") or "",
            "path": getattr(self, "path", ""), "status": self._status, "bytes": self.wfile.count,  # type: ignore[attr-defined]
        }
        if self.logs_cache:
            entry["cache"] = self._cache
        try:
            with _ACCESS_LOCK, self.access_log.open("a") as fh:
                fh.write(json.dumps(entry) + "\n")
        except OSError as exc:
            log.warning("cannot write the access log %s: %s", self.access_log, exc)


def bytes_served(logs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], since: float | None = None,
                 until: float | None = None, path_prefix: str | None = None) -> dict[str, Any]:
    """What the lab's servers sent, from their access logs (one or several files), counting
    requests with `since <= time < until` (and, given `path_prefix`, whose path starts with
    it): {"total": bytes, "requests": n, "clients": {address: bytes}, "logs": {file name:
    bytes}, "cache": {hit|stale|miss|repo: bytes}}.
    A missing log is an error (the server was started without one)."""
    paths = [logs] if isinstance(logs, (str, os.PathLike)) else list(logs)
    out: dict[str, Any] = {"total": 0, "requests": 0, "clients": {}, "logs": {}, "cache": {}}
    for raw in paths:
        path = Path(raw)
        out["logs"].setdefault(path.name, 0)
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
                when, size = float(entry["time"]), int(entry["bytes"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a killed server
            if (since is not None and when < since) or (until is not None and when >= until):
                continue
            if path_prefix is not None and not str(entry.get("path", "")).startswith(path_prefix):
                continue
            out["total"] += size
            out["requests"] += 1
            client = str(entry.get("client", ""))
            out["clients"][client] = out["clients"].get(client, 0) + size
            out["logs"][path.name] += size
            if entry.get("cache"):
                out["cache"][entry["cache"]] = out["cache"].get(entry["cache"], 0) + size
    return out


class CachingProxyHandler(AccessLogged):
    """Forward-proxy handler: absolute-URI GET/HEAD for the Debian archive hosts."""

    protocol_version = "HTTP/1.1"
    logs_cache = True
    cache_dir: Path = Path("/nonexistent")
    #: The stand-in repository and the repo server's port file (None: not served here).
    repo_dir: Path | None = None
    repo_port_file: Path | None = None
    server_version = "gpuctl-lab-aptcache/1"

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def do_CONNECT(self) -> None:
        self.send_error(405, "CONNECT not supported: the lab cache proxies plain http only")

    def _serve(self, send_body: bool) -> None:
        url = self.path
        parts = urllib.parse.urlsplit(url)
        if self._is_standin_repo(parts):
            self._serve_repo(parts.path, send_body)
            return
        if parts.hostname not in ALLOWED_UPSTREAMS or parts.port not in (None, 80):
            self.send_error(403, f"host not allowed through the lab cache: {parts.hostname}")
            return
        target = cache_file_for(self.cache_dir, url)
        if target is None:
            self.send_error(400, "unsupported URL")
            return
        fresh = target.is_file() and (
            is_immutable(parts.path) or time.time() - target.stat().st_mtime < INDEX_TTL_S
        )
        if fresh:
            self._cache = "hit"
            self._send_file(target, send_body)
            return
        self._cache = "miss"
        try:
            self._fetch_and_send(url, target, send_body)
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(exc, urllib.error.HTTPError):
                self.send_error(exc.code, str(exc.reason))
                return
            if target.is_file():
                log.warning("upstream failed for %s (%s); serving the cached copy", url, exc)
                self._cache = "stale"
                self._send_file(target, send_body)
                return
            self.send_error(502, f"upstream unreachable: {exc}")

    def _is_standin_repo(self, parts: urllib.parse.SplitResult) -> bool:
        if self.repo_dir is None or self.repo_port_file is None or parts.scheme != "http":
            return False
        if parts.hostname != GUEST_HOST_ADDRESS:
            return False
        try:
            return parts.port == int(self.repo_port_file.read_text().strip())
        except (OSError, ValueError):
            return False

    def _serve_repo(self, url_path: str, send_body: bool) -> None:
        """A file of the stand-in repository, from disk (what the repo server would send)."""
        assert self.repo_dir is not None
        segments = [s for s in urllib.parse.unquote(url_path).split("/") if s]
        target = self.repo_dir.joinpath(*segments) if segments else None
        if (target is None or any(s in {".", ".."} for s in segments) or not target.is_file()
                or self.repo_dir.resolve() not in target.resolve().parents):
            self.send_error(404, "not in the stand-in repository")
            return
        self._cache = "repo"
        self._send_file(target, send_body)

    def _send_file(self, target: Path, send_body: bool) -> None:
        size = target.stat().st_size
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header(
            "Last-Modified", self.date_time_string(int(target.stat().st_mtime))
        )
        self.end_headers()
        if send_body:
            with target.open("rb") as fh:
                shutil.copyfileobj(fh, self.wfile, _CHUNK)

    def _fetch_and_send(self, url: str, target: Path, send_body: bool) -> None:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(urllib.request.Request(url), timeout=60) as resp:
            length = resp.headers.get("Content-Length")
            self.send_response(200)
            if length is not None:
                self.send_header("Content-Length", length)
            else:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.send_header("Content-Type", "application/octet-stream")
            if resp.headers.get("Last-Modified"):
                self.send_header("Last-Modified", resp.headers["Last-Modified"])
            self.end_headers()
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".part-")
            tmp = Path(tmp_name)
            client_ok = send_body
            try:
                with os.fdopen(fd, "wb") as out:
                    while chunk := resp.read(_CHUNK):
                        out.write(chunk)
                        if client_ok:
                            try:
                                self.wfile.write(chunk)
                            except OSError:
                                client_ok = False
                if length is not None and tmp.stat().st_size != int(length):
                    raise OSError(f"short read: {tmp.stat().st_size} of {length} bytes")
                tmp.replace(target)
            except OSError as exc:
                # Headers are already sent: the only honest signal left is a closed connection.
                log.warning("transfer of %s failed: %s", url, exc)
                self.close_connection = True
            finally:
                tmp.unlink(missing_ok=True)
            if not client_ok:
                self.close_connection = True


class QuietRepoHandler(AccessLogged, http.server.SimpleHTTPRequestHandler):
    """Static files from the stand-in repository; requests go to the log."""

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s " + format, self.address_string(), *args)


#: The guests' apt-cacher-ng (a cluster package cache, `gpuctl mirror`) uses the lab's proxy as
#: its upstream, and the inventory refuses a port it misreads (`ACNG_MAX_PROXY_PORT`); the
#: kernel hands out ephemeral ports above it, so the lab's servers pick theirs in this range.
LOW_PORTS = (20000, ACNG_MAX_PROXY_PORT)


def _bind_low_port(handler: Any) -> http.server.ThreadingHTTPServer:
    """A server on 127.0.0.1 at a free port in LOW_PORTS (random tries; loopback only)."""
    for _ in range(500):
        port = random.randint(*LOW_PORTS)
        try:
            return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        except OSError:
            continue
    raise RuntimeError(f"no free port in {LOW_PORTS[0]}-{LOW_PORTS[1]} on 127.0.0.1")


def _serve(kind: str, directory: Path, port_file: Path, access_log: Path | None = None,
           repo: Path | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if access_log is not None:
        access_log.parent.mkdir(parents=True, exist_ok=True)
        access_log.touch()
    if kind == "proxy":
        handler = type("Handler", (CachingProxyHandler,), {
            "cache_dir": directory, "access_log": access_log, "repo_dir": repo,
            "repo_port_file": port_file.with_name("repo.port") if repo is not None else None})
    else:
        repo_handler = type("RepoHandler", (QuietRepoHandler,), {"access_log": access_log})

        def handler(*args: object, **kwargs: object) -> QuietRepoHandler:
            return repo_handler(*args, directory=str(directory), **kwargs)  # type: ignore[arg-type]
    server = _bind_low_port(handler)
    server.daemon_threads = True
    port = int(server.server_address[1])
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(f"{port}\n")
    tmp.replace(port_file)
    log.info("%s serving %s on 127.0.0.1:%d", kind, directory, port)
    server.serve_forever()


def start_server(kind: str, directory: Path, run_dir: Path, timeout: float = 20.0,
                 access_log: Path | None = None, repo: Path | None = None) -> tuple[int, ProcessRecord]:
    """Start a detached server ('proxy' or 'repo') and return (port, process record);
    with `access_log`, it appends a JSON line per request there (see `bytes_served`); a proxy
    given `repo` also serves that stand-in repository for the repo server started with the
    same `run_dir` (its port file), at the address the guests know it by."""
    if kind not in {"proxy", "repo"}:
        raise ValueError(kind)
    run_dir.mkdir(parents=True, exist_ok=True)
    port_file = run_dir / f"{kind}.port"
    port_file.unlink(missing_ok=True)
    log_file = run_dir / f"{kind}.log"
    package_parent = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    marker = f"--port-file={port_file}"
    argv = [sys.executable, "-m", "gpuctl.lab.netcache", kind, f"--dir={directory}", marker,
            f"--log={log_file}"]
    if access_log is not None:
        argv.append(f"--access-log={access_log}")
    if repo is not None and kind == "proxy":
        argv.append(f"--repo-dir={repo}")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_file.exists():
            return int(port_file.read_text().strip()), ProcessRecord(proc.pid, marker)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    tail = log_file.read_text()[-2000:] if log_file.exists() else ""
    raise ExecutionError(f"the lab {kind} server did not start; log {log_file}:\n{tail}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpuctl.lab.netcache")
    parser.add_argument("kind", choices=["proxy", "repo"])
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--port-file", required=True, type=Path)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--access-log", type=Path, help="append one JSON line per request here")
    parser.add_argument("--repo-dir", type=Path,
                        help="proxy: also serve this stand-in repository (port from repo.port next to --port-file)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        filename=str(args.log) if args.log else None, level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
    )
    _serve(args.kind, args.dir, args.port_file, args.access_log, args.repo_dir)


if __name__ == "__main__":
    main()
