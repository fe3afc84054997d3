"""The lab's apt cache (a small caching HTTP proxy) and the stand-in repository server.

Both run as detached Python subprocesses bound to 127.0.0.1 only; guests reach
them through QEMU user networking as 10.0.2.2:PORT. apt-cacher-ng cannot bind
in this environment ("Error resolving address for binding"), so the cache is a
small proxy of our own: it forwards plain-HTTP GET/HEAD requests for the Debian
archive hosts only, keeps immutable files (``pool/``, ``by-hash/``) forever under
``<cache>/apt-cache/`` and revalidates index files after a TTL (serving the stale
copy when the archive cannot be reached), so rebuilding an image or reprovisioning
a lab downloads nothing twice.

Run as ``python -m gpuctl.lab.netcache proxy|repo --dir D --port-file F``.
"""

from __future__ import annotations

import argparse
import http.server
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from gpuctl.errors import ExecutionError
from gpuctl.lab.state import ProcessRecord, cache_root

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


class CachingProxyHandler(http.server.BaseHTTPRequestHandler):
    """Forward-proxy handler: absolute-URI GET/HEAD for the Debian archive hosts."""

    protocol_version = "HTTP/1.1"
    cache_dir: Path = Path("/nonexistent")
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
            self._send_file(target, send_body)
            return
        try:
            self._fetch_and_send(url, target, send_body)
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(exc, urllib.error.HTTPError):
                self.send_error(exc.code, str(exc.reason))
                return
            if target.is_file():
                log.warning("upstream failed for %s (%s); serving the cached copy", url, exc)
                self._send_file(target, send_body)
                return
            self.send_error(502, f"upstream unreachable: {exc}")

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


class QuietRepoHandler(http.server.SimpleHTTPRequestHandler):
    """Static files from the stand-in repository; requests go to the log."""

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s " + format, self.address_string(), *args)


def _serve(kind: str, directory: Path, port_file: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "proxy":
        handler = type("Handler", (CachingProxyHandler,), {"cache_dir": directory})
    else:
        def handler(*args: object, **kwargs: object) -> QuietRepoHandler:
            return QuietRepoHandler(*args, directory=str(directory), **kwargs)  # type: ignore[arg-type]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # type: ignore[arg-type]
    server.daemon_threads = True
    port = int(server.server_address[1])
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(f"{port}\n")
    tmp.replace(port_file)
    log.info("%s serving %s on 127.0.0.1:%d", kind, directory, port)
    server.serve_forever()


def start_server(kind: str, directory: Path, run_dir: Path, timeout: float = 20.0) -> tuple[int, ProcessRecord]:
    """Start a detached server ('proxy' or 'repo') and return (port, process record)."""
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
    args = parser.parse_args(argv)
    logging.basicConfig(
        filename=str(args.log) if args.log else None, level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
    )
    _serve(args.kind, args.dir, args.port_file)


if __name__ == "__main__":
    main()
