"""Tier 3: the fault finding of `gpuctl bench` names a real slow link (issue 19).

Needs a lab of at least three nodes (`GPUCTL_LAB_NODES=3`: with two, a slow link cannot be
pinned on one end — tests/unit/test_localise.py covers what two nodes can tell). The last
node's RDMA interface is shaped with tc (`gpuctl lab fault NODE slow_link`, 4 mbit/s each
way); `gpuctl bench --suite localise` then runs the loopback, ring pairs (the stand-in
nccl-tests moving real bytes between the guests over their fabric addresses), the retest
against a known-good node, the per-rail run and ib_write_bw over Soft-RoCE, and the report
must name that node and its interface, nothing else, with the rounds used.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from labrun import ensure_provisioned

from gpuctl.cli.main import main
from gpuctl.lab.standin.faults import apply_fault
from gpuctl.lab.state import LabState

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_slow_link_named_on_its_node_and_interface(lab: LabState, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if len(lab.nodes) < 3:
        pytest.skip("telling one node from another needs three lab nodes (GPUCTL_LAB_NODES=3)")
    ensure_provisioned(lab.inventory_path, tmp_path / "provision-runs")
    bad = lab.nodes[-1].name
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path / "runs"))
    apply_fault(bad, "slow_link", state=lab)
    start = time.monotonic()
    try:
        r = CliRunner().invoke(main, ["bench", str(lab.inventory_path), "--suite", "localise", "--json"])
    finally:
        apply_fault(bad, "slow_link", clear=True, state=lab)
    took = time.monotonic() - start
    assert r.exit_code == 1, r.output[-3000:]  # a named fault fails the bench
    data = json.loads(r.output)
    loc = data["localisation"]
    named = [(f["kind"], f["nodes"], f["hcas"], f["interfaces"]) for f in loc["findings"]
             if f["kind"] in ("node", "link")]
    assert named == [("node", [bad], ["rxe0"], ["eth1"])], json.dumps(loc["findings"], indent=1)
    assert 0 < loc["rounds"] <= loc["bound"]
    report = CliRunner().invoke(main, ["report", "latest", "--format", "md"])
    assert report.exit_code == 0, report.output[-2000:]
    md = report.output  # the report on stdout
    assert "## Fault finding" in md and f"| {bad} | node | rxe0 (eth1) |" in md
    assert f"**{loc['rounds']} rounds**" in md
    print(f"\nfault finding on {len(lab.nodes)} lab nodes: {loc['rounds']} rounds (bound {loc['bound']}), "
          f"{len(loc['steps'])} measurements, {took:.0f} s")
