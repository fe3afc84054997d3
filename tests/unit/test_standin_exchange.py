"""The stand-in's multi-node nccl-tests with a bootstrap root (NCCL_COMM_ID): real bytes
between the ranks' nodes, the measured rate reported, so a slow peer shows (issue 19, the
lab's slow link). Here both "nodes" are processes on 127.0.0.1; a slow peer is a socket
that sends its share slowly."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuctl.parsers.nccl import parse_nccl_tests
from tests.unit.test_standin_tools import LABHW, Node

EXCHANGE = 256 << 10
ROUNDS = 8
ARGS = ("all_reduce_perf", "-b", "1M", "-e", "16M", "-f", "2", "-g", "1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int) -> dict[str, str]:
    return {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0", "NCCL_COMM_ID": f"127.0.0.1:{port}"}


def _start(node: Node, rank: int, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(LABHW), *ARGS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=node.env(**_rank(rank, port)))


def test_two_ranks_move_real_bytes(tmp_path: Path) -> None:
    node = Node(tmp_path)
    port = _free_port()
    r0, r1 = _start(node, 0, port), _start(node, 1, port)
    out0, err0 = r0.communicate(timeout=60)
    out1, err1 = r1.communicate(timeout=60)
    assert r0.returncode == 0 and r1.returncode == 0, err0 + err1
    assert out1 == ""  # the other rank is silent, as nccl-tests' are
    res = parse_nccl_tests(out0)
    assert res.large_msg_busbw_gb_s > 0.01  # loopback TCP: far above the slow peer below
    # every size reports the one measured rate (no shaping curve on a measured figure; the
    # stand-in's ±0.4 % jitter only)
    bws = [r.busbw_gb_s for r in res.rows]
    assert max(bws) <= min(bws) * 1.01
    assert "figures measured: bytes exchanged over TCP" in err0


def test_a_slow_peer_shows_in_the_figure(tmp_path: Path) -> None:
    """The peer sends its share at ~2 MB/s in every round: the reported rate is the measured one."""
    node = Node(tmp_path)
    port = _free_port()
    r0 = _start(node, 0, port)

    def slow_peer() -> None:
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with conn:
            while conn.recv(1) == b"g":
                for _ in range(EXCHANGE // 65536):
                    conn.sendall(b"\0" * 65536)
                    time.sleep(0.03)  # 64 KiB per 30 ms: ~2 MB/s
                got = 0
                while got < EXCHANGE:
                    got += len(conn.recv(65536))
                conn.sendall(b"k")

    t = threading.Thread(target=slow_peer)
    t.start()
    out0, err0 = r0.communicate(timeout=60)
    t.join()
    assert r0.returncode == 0, err0
    busbw = parse_nccl_tests(out0).large_msg_busbw_gb_s
    # each round moves 2 x 256 KiB in >= 4 x 30 ms: at most ~4.4 MB/s, whatever the loopback can do
    assert 0 < busbw < 2 * EXCHANGE / (4 * 0.03) / 1e9 * 1.05


def test_no_peer_fails_like_the_bootstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    node = Node(tmp_path)
    for key, value in node.env(**_rank(0, _free_port())).items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location("labhw_under_test", LABHW)
    assert spec is not None and spec.loader is not None
    labhw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(labhw)
    monkeypatch.setattr(labhw, "EXCHANGE_TIMEOUT_S", 0.5)
    with pytest.raises(SystemExit) as exc:
        labhw.nccl_test("all_reduce_perf", list(ARGS[1:]))
    # the stand-in tools print their errors on stdout
    assert exc.value.code == 1 and "NCCL WARN Bootstrap : no connection" in capsys.readouterr().out
