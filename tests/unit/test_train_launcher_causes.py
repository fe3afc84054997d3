"""Which node's fault a failed training run is (issue 16 item 7, fault b): a launcher whose
failure is what another node's failure does to the others is that failure's consequence
(could not run, naming the node at fault), not a second fault. Judged on real torchrun
outputs recorded on this machine (tests/data/fixtures/training/SOURCES.md): the rendezvous
host's own RendezvousTimeoutError while a node could not reach its store (the lab's
blocked-port fault: TCP 29400 dropped on gpu-02), ranks that lost a peer whose rank was
killed, and the first node's port unreachable from every node."""

from __future__ import annotations

from pathlib import Path

from gpuctl.parsers.training import parse_launcher_log
from gpuctl.verdicts import Launch, Status, Subject, judge_launchers
from gpuctl.verdicts.core import overall

FIX = Path(__file__).parents[2] / "tests" / "data" / "fixtures" / "training"
ENDPOINT = "10.251.1.1:29400"
SUBJECT = Subject(node="2 nodes")


def _launch(node: str, fixture: str | None = None, exit_status: int = 1, timed_out: bool = False,
            stopped: str | None = None) -> Launch:
    out = (FIX / f"{fixture}.stdout").read_text() if fixture and (FIX / f"{fixture}.stdout").exists() else ""
    err = (FIX / f"{fixture}.stderr").read_text() if fixture else ""
    return Launch(node, exit_status if fixture or timed_out else 0, timed_out, 200.0 if fixture else 30.0, 900,
                  parse_launcher_log(out, err), stopped=stopped)


WAITED = "torchrun-rdzv-timeout-missing-node-cpu-real"  # the host, alone: RendezvousTimeoutError
UNREACHED = "torchrun-rdzv-store-unreachable-cpu-real"  # a node: RendezvousConnectionError / DistNetworkError


def _by_node(verdicts: list) -> dict:  # type: ignore[type-arg]
    return {v.subject.node: v for v in verdicts}


def test_blocked_rendezvous_port_on_one_node_names_it_and_marks_the_host_a_consequence() -> None:
    got = _by_node(judge_launchers([_launch("gpu-01", WAITED), _launch("gpu-02", UNREACHED)], ENDPOINT, "gpu-01",
                                   SUBJECT))
    assert got["gpu-02"].status is Status.FAIL
    assert "RendezvousConnectionError" in got["gpu-02"].message
    assert f"the rendezvous is at {ENDPOINT} on gpu-01" in got["gpu-02"].message
    assert "gpu-02 could not reach it" in got["gpu-02"].message
    # gpu-01 hosted the rendezvous and waited for gpu-02: not a second, independent fault
    assert got["gpu-01"].status is Status.ERROR
    assert "a consequence of the failure on gpu-02, not a fault of gpu-01" in got["gpu-01"].message
    assert "RendezvousTimeoutError" in got["gpu-01"].message
    assert overall(got.values()) is Status.FAIL
    assert [v.subject.node for v in got.values() if v.status is Status.FAIL] == ["gpu-02"]


def test_a_rank_killed_on_one_node_is_the_cause_its_peers_connection_reset_the_consequence() -> None:
    got = _by_node(judge_launchers([_launch("gpu-01", "torchrun-gloo-2node-peer-killed-cpu-real"),
                                    _launch("gpu-02", "torchrun-gloo-2node-rank-sigkill-cpu-real")],
                                   ENDPOINT, "gpu-01", SUBJECT))
    assert got["gpu-02"].status is Status.FAIL and "killed by SIGKILL" in got["gpu-02"].message
    assert got["gpu-01"].status is Status.ERROR
    assert "a consequence of the failure on gpu-02" in got["gpu-01"].message
    assert "Connection reset by peer" in got["gpu-01"].message


def test_no_node_reaches_the_hosts_port_names_the_host() -> None:
    """3 nodes: neither gpu-02 nor gpu-03 could reach the store on gpu-01, which waited: the
    fault is on gpu-01's side (its port), the others could not run."""
    got = _by_node(judge_launchers([_launch("gpu-01", WAITED), _launch("gpu-02", UNREACHED),
                                    _launch("gpu-03", UNREACHED)], ENDPOINT, "gpu-01", SUBJECT))
    assert got["gpu-01"].status is Status.FAIL
    assert f"no node could reach the rendezvous at {ENDPOINT} on gpu-01" in got["gpu-01"].message
    assert "check gpu-01's firewall" in got["gpu-01"].message
    for node in ("gpu-02", "gpu-03"):
        assert got[node].status is Status.ERROR and "a consequence of the failure on gpu-01" in got[node].message
    # one of three could not connect while the other did: that one is at fault
    one = _by_node(judge_launchers([_launch("gpu-01", WAITED), _launch("gpu-02", UNREACHED),
                                    _launch("gpu-03", "torchrun-gloo-2node-peer-killed-cpu-real")],
                                   ENDPOINT, "gpu-01", SUBJECT))
    assert one["gpu-02"].status is Status.FAIL and "while gpu-03 could" in one["gpu-02"].message
    assert one["gpu-01"].status is Status.ERROR and one["gpu-03"].status is Status.ERROR


def test_without_a_failure_of_its_own_anywhere_every_failed_launcher_fails() -> None:
    """The host timed out waiting and the other was stopped by the watchdog: nothing says which
    node is at fault, so neither is excused."""
    got = _by_node(judge_launchers([_launch("gpu-01", WAITED),
                                    _launch("gpu-02", exit_status=124, timed_out=True,
                                            stopped="gpu-01 failed (exit 1)")], ENDPOINT, "gpu-01", SUBJECT))
    assert [got[n].status for n in ("gpu-01", "gpu-02")] == [Status.FAIL, Status.FAIL]
    # and a node that hung (not stopped by the watchdog) is a cause: the host's wait follows from it
    hung = _by_node(judge_launchers([_launch("gpu-01", WAITED), _launch("gpu-02", exit_status=124, timed_out=True)],
                                    ENDPOINT, "gpu-01", SUBJECT))
    assert hung["gpu-02"].status is Status.FAIL and hung["gpu-01"].status is Status.ERROR
