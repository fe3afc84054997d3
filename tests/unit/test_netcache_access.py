"""The lab servers' access logs (one JSON line per request) and `bytes_served`, on servers
started on 127.0.0.1 here; the proxy answers from a pre-filled cache, from the stand-in
repository on disk, or refuses — nothing is fetched from anywhere but 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpuctl.lab import netcache
from gpuctl.lab.state import port_listening, stop_process

DEB = "http://deb.debian.org/debian/pool/main/h/hello/hello_2.10-3_amd64.deb"


def entries(log: Path, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The log's entries once it has `count` (a server writes a line after its response)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def via_proxy(port: int) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"}))


def test_bytes_served_sums_requests_between_since_and_until(tmp_path: Path) -> None:
    proxy, repo = tmp_path / "access-proxy.jsonl", tmp_path / "access-repo.jsonl"
    proxy.write_text("\n".join([
        json.dumps({"time": 100.0, "client": "127.0.0.1", "status": 200, "bytes": 1000, "cache": "hit"}),
        json.dumps({"time": 200.0, "client": "127.0.0.1", "status": 200, "bytes": 300, "cache": "miss"}),
        json.dumps({"time": 250.0, "client": "10.0.2.15", "status": 403, "bytes": 20, "cache": None}),
        '{"time": 260.0, "client": "127.0.0.1", "byt',  # cut short by a killed server
        json.dumps({"time": 300.0, "client": "127.0.0.1", "status": 200, "bytes": 7, "cache": "repo"}),
    ]) + "\n")
    repo.write_text(json.dumps({"time": 210.0, "client": "127.0.0.1", "status": 200, "bytes": 50}) + "\n")
    got = netcache.bytes_served([proxy, repo], since=150.0, until=300.0)
    assert got["total"] == 370 and got["requests"] == 3
    assert got["clients"] == {"127.0.0.1": 350, "10.0.2.15": 20}
    assert got["logs"] == {"access-proxy.jsonl": 320, "access-repo.jsonl": 50}
    assert got["cache"] == {"miss": 300}
    assert netcache.bytes_served(proxy)["total"] == 1327
    with pytest.raises(FileNotFoundError):
        netcache.bytes_served(tmp_path / "none.jsonl")


def test_proxy_logs_cache_hits_and_refusals(tmp_path: Path) -> None:
    cache = tmp_path / "apt"
    target = netcache.cache_file_for(cache, DEB)
    assert target is not None
    target.parent.mkdir(parents=True)
    body = b"a cached package\n" * 100
    target.write_bytes(body)  # immutable (pool/): served without asking upstream
    log = tmp_path / "access-proxy.jsonl"
    since = time.time()
    port, proc = netcache.start_server("proxy", cache, tmp_path / "run", access_log=log)
    try:
        with via_proxy(port).open(DEB, timeout=5) as resp:
            assert resp.read() == body
        with pytest.raises(urllib.error.HTTPError) as err:
            via_proxy(port).open("http://example.com/", timeout=5)
        assert err.value.code == 403
        hit, refused = entries(log, 2)
    finally:
        stop_process(proc, "proxy")
    assert not port_listening(port)
    assert hit["client"] == "127.0.0.1" and hit["method"] == "GET" and hit["path"] == DEB
    assert hit["status"] == 200 and hit["cache"] == "hit"
    assert len(body) < hit["bytes"] < len(body) + 1024  # status line and headers too
    assert refused["status"] == 403 and refused["cache"] is None and refused["bytes"] > 0
    assert refused["time"] >= hit["time"] >= since
    got = netcache.bytes_served(log, since=since)
    assert got["total"] == hit["bytes"] + refused["bytes"] and got["requests"] == 2
    assert got["clients"] == {"127.0.0.1": got["total"]} and got["cache"] == {"hit": hit["bytes"]}
    assert netcache.bytes_served(log, since=time.time() + 60)["total"] == 0


def test_repo_server_logs_every_request(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "Packages").write_bytes(b"Package: x\n" * 50)
    log = tmp_path / "access-repo.jsonl"
    port, proc = netcache.start_server("repo", repo, tmp_path / "run", access_log=log)
    try:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(f"http://127.0.0.1:{port}/Packages", timeout=5) as resp:
            assert len(resp.read()) == 550
        with pytest.raises(urllib.error.HTTPError):
            direct.open(f"http://127.0.0.1:{port}/missing.deb", timeout=5)
        ok, missing = entries(log, 2)
    finally:
        stop_process(proc, "repo")
    assert ok["path"] == "/Packages" and ok["status"] == 200 and 550 < ok["bytes"] < 550 + 1024
    assert "cache" not in ok
    assert missing["path"] == "/missing.deb" and missing["status"] == 404
    assert netcache.bytes_served(log)["total"] == ok["bytes"] + missing["bytes"]


def test_proxy_serves_the_standin_repository_from_disk(tmp_path: Path) -> None:
    # a node's apt-cacher-ng chains every miss through the lab proxy, the stand-in NVIDIA
    # repository's (http://10.0.2.2:<repo port>/...) too: the proxy answers it from disk
    repo = tmp_path / "repo"
    (repo / "debian12").mkdir(parents=True)
    (repo / "debian12/pkg.deb").write_bytes(b"stand-in deb\n")
    (tmp_path / "secret").write_text("not in the repository\n")
    run = tmp_path / "run"
    rport, rproc = netcache.start_server("repo", repo, run, access_log=tmp_path / "access-repo.jsonl")
    pport, pproc = netcache.start_server("proxy", tmp_path / "apt", run, access_log=tmp_path / "access-proxy.jsonl",
                                         repo=repo)
    try:
        with via_proxy(pport).open(f"http://10.0.2.2:{rport}/debian12/pkg.deb", timeout=5) as resp:
            assert resp.read() == b"stand-in deb\n"
        statuses = []
        for url in (f"http://10.0.2.2:{rport}/%2e%2e/secret", f"http://10.0.2.2:{rport}/../secret",
                    f"http://10.0.2.2:{rport + 1 if rport < 65535 else rport - 1}/debian12/pkg.deb"):
            conn = http.client.HTTPConnection("127.0.0.1", pport, timeout=5)
            conn.request("GET", url)
            resp = conn.getresponse()
            assert b"not in the repository" not in resp.read()
            statuses.append(resp.status)
            conn.close()
        assert statuses[:2] == [404, 404] and statuses[2] == 403  # other ports: not the stand-in
        served = entries(tmp_path / "access-proxy.jsonl", 4)
    finally:
        stop_process(pproc, "proxy")
        stop_process(rproc, "repo")
    assert served[0]["cache"] == "repo" and served[0]["status"] == 200
    assert (tmp_path / "access-repo.jsonl").read_text() == ""  # answered by the proxy alone: counted once
    assert netcache.bytes_served(tmp_path / "access-proxy.jsonl")["cache"] == {"repo": served[0]["bytes"]}


def test_lab_servers_bind_loopback_below_32768() -> None:
    """apt-cacher-ng in the guests (the cluster cache) misreads an upstream proxy port above
    32767, and the kernel's ephemeral ports start at 32768: the lab's servers pick lower ones."""
    import http.server

    from gpuctl.lab.netcache import LOW_PORTS, _bind_low_port
    from gpuctl.repocache import ACNG_MAX_PROXY_PORT

    assert LOW_PORTS[1] <= ACNG_MAX_PROXY_PORT
    servers = [_bind_low_port(http.server.BaseHTTPRequestHandler) for _ in range(5)]
    try:
        for s in servers:
            host, port = s.server_address[:2]
            assert host == "127.0.0.1" and LOW_PORTS[0] <= port <= ACNG_MAX_PROXY_PORT
        assert len({s.server_address[1] for s in servers}) == 5
    finally:
        for s in servers:
            s.server_close()
