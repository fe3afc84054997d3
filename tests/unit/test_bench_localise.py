"""Fault finding inside `gpuctl bench` (gpuctl.bench.run + gpuctl.bench.localise): every
measurement a real command run through bash on this machine, the run's SSH trust set up and
removed, the result in bench.json (typed), as verdicts and in the report.

Four lab nodes, each an `@local` target with a home folder of its own (as in
test_bench_mpissh.py). Stand-in tools on PATH print real recorded outputs
(tests/data/fixtures/*/SOURCES.md): `all_reduce_perf` the 8-GPU A100 run (233 GB/s) on every
node; `mpirun` the 2-node CX8 run (49.8 GB/s) when its hostfile holds gpu-03's fabric
address, else the 2-node A100 run (220.9 GB/s); `ib_write_bw` the 100G RoCE run (98 Gb/s) as a
client of or on gpu-03, else the NDR run (392 Gb/s). So gpu-03's port is slow and its
loopback is not: the shape of a slow cable, or of the lab's shaped interface.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuctl.bench import localise, suites
from gpuctl.bench.run import BenchRun
from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory
from gpuctl.report.gather import build_report
from gpuctl.report.render import render
from gpuctl.runrecord import RunRecord
from gpuctl.spec import resolve
from tests.unit.test_bench_mpissh import OTHER, HomeTarget, home_with

DATA = Path(__file__).resolve().parents[1] / "data"
FIX = DATA / "fixtures"
BAD_ADDR = "192.168.50.13"


def _inventory(tmp: Path) -> Path:
    text = (DATA / "inventories" / "lab-placeholder.yaml").read_text()
    text = re.sub(r"(?m)^  multi_node_busbw_gb_s: .*$", '  multi_node_busbw_gb_s: {min: 100, source: "test: a '
                  'floor between the two recorded 2-node runs"}', text)
    assert "min: 100," in text
    text += "".join(f"  - {{name: gpu-0{i}, address: 127.0.0.1, ssh_port: 2220{i}, rack: lab, fabric_ips: "
                    f"[192.168.50.1{i}], vlan_ips: {{100: 10.100.0.1{i}}}}}\n" for i in (3, 4))
    path = tmp / "inv.yaml"
    path.write_text(text)
    return path


def _tool(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@dataclass(frozen=True)
class Bench:
    make: Callable[..., BenchRun]
    record: RunRecord
    homes: dict[str, Path]
    log: Path
    tmp: Path


@pytest.fixture()
def bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bench:
    monkeypatch.setattr(suites, "SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("HOME", str(tmp_path / "controller-home"))
    loaded = load_inventory(_inventory(tmp_path))
    specs = resolve(loaded)
    homes = {s.node: home_with(tmp_path / "homes", s.node, OTHER, 0o644) for s in specs}
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    _tool(bindir, "all_reduce_perf", f'echo "all_reduce_perf $HOME $(env | grep ^NCCL_ | sort | tr "\\n" " ")" '
          f">> {log}\ncat {FIX / 'nccl' / 'nccl-allreduce-a100-1node-8gpu-oci.txt'}\n")
    _tool(bindir, "mpirun", f'echo "mpirun $*" >> {log}\n'
          'hostfile=$(echo "$*" | sed -n "s/.*--hostfile \\([^ ]*\\) .*/\\1/p")\n'
          f'cat "$hostfile" >> {log}\n'
          f'if grep -q "^{BAD_ADDR} " "$hostfile"; then '
          f"cat {FIX / 'nccl' / 'nccl-allreduce-2.18.3-2node-16gpu-cx8-mpirun-warnings.txt'}; else "
          f"cat {FIX / 'nccl' / 'nccl-allreduce-a100-2node-16gpu-oci.txt'}; fi\n")
    _tool(bindir, "ib_write_bw", f'echo "ib_write_bw $HOME $*" >> {log}\n'
          'for last; do :; done\n'
          'case "$last" in 192.168.*) ;; *) exit 0;; esac\n'  # the server: the client prints the figure
          f'if [ "$last" = {BAD_ADDR} ] || [ "$(basename "$HOME")" = gpu-03 ]; then '
          f"cat {FIX / 'perftest' / 'ib_write_bw-bidirectional-roce100-cpufreq-warning-between-rows.txt'}; else "
          f"cat {FIX / 'perftest' / 'ib_write_bw-ndr-gbits-client-synthetic.txt'}; fi\n")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    record = RunRecord.create("bench", loaded.path, root=tmp_path / "runs")
    targets = {s.node: HomeTarget(name=s.node, address="@local", home=str(homes[s.node])) for s in specs}

    def make(suite: str = "localise") -> BenchRun:
        return BenchRun(loaded, specs, suites.SUITES[suite], record, targets=targets, progress=lambda m: None)

    return Bench(make, record, homes, log, tmp_path)


def test_localise_suite_names_the_node_and_its_interface(bench: Bench) -> None:
    data = bench.make().run()
    loc = data["localisation"]
    named = [f for f in loc["findings"] if f["kind"] in ("node", "link")]
    assert [(f["kind"], f["nodes"], f["hcas"], f["interfaces"]) for f in named] == \
        [("node", ["gpu-03"], ["rxe0"], ["eth1"])]
    assert loc["rounds"] <= loc["bound"] == localise.round_bound(4)
    # loopback (1), the ring's pairs (2 for 4 nodes), the retest (1), rails (1), perftest (1)
    assert loc["rounds"] == 6
    chain = [loc["steps"][i] for i in named[0]["evidence"]]
    assert [(s["stage"], s["nodes"], s["slow"]) for s in chain] == [
        ("pair", ["gpu-03", "gpu-04"], True), ("pair", ["gpu-02", "gpu-03"], True),
        ("retest", ["gpu-03", "gpu-01"], True),  # against a known-good node
        ("rails", ["gpu-03", "gpu-01"], True), ("rails", ["gpu-02", "gpu-04"], False),  # beside a known-good pair
        ("perftest", ["gpu-03", "gpu-01"], True), ("perftest", ["gpu-02", "gpu-04"], False)]
    assert chain[5]["value"] == pytest.approx(98.02) and chain[5]["unit"] == "Gb/s"
    assert chain[6]["value"] == pytest.approx(392.31)
    # every figure's raw output is in the run record
    assert all((bench.record.path / s["raw"]).is_file() for s in loc["steps"])
    verdicts = [r for r in data["cluster"]["results"] if r["check"] == "fault_finding"]
    assert [(r["status"], r["subject"]) for r in verdicts] == [("fail", "gpu-03 rxe0")]
    assert data["status"] == "fail"
    # the commands that ran: loopback without SHM/P2P, rails one rank per node on one HCA
    calls = bench.log.read_text()
    assert calls.count("NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1") == 4
    rail = [line for line in calls.splitlines() if line.startswith("mpirun") and "CUDA_VISIBLE_DEVICES=0" in line]
    assert len(rail) == 2 and all("-np 2 " in line and "ppr:1:node" in line and "NCCL_IB_HCA==rxe0" in line
                                  for line in rail)
    assert "slots=1" in calls
    # every pair run names its bootstrap root on its first node's fabric address
    pairs = [line for line in calls.splitlines() if line.startswith("mpirun") and "-np 16 " in line]
    assert pairs and all("NCCL_COMM_ID=192.168.50.1" in line and ":29600 " in line for line in pairs)


def test_rank_0_and_the_bootstrap_root_on_the_launcher_when_it_is_in_the_pair(bench: Bench) -> None:
    """Open MPI maps rank 0 onto the launching node when the hostfile holds it (seen in the
    lab: a pair (gpu-03, gpu-01) launched from gpu-01 ran rank 0 on gpu-01, which cannot bind
    gpu-03's address); the bootstrap root follows rank 0, the hostfile leads with it."""
    run = bench.make()
    s = {x.node: x for x in run.specs}
    script = suites.pair_script(s["gpu-03"], s["gpu-01"], run.suite, "r", "-o BatchMode=yes", launcher="gpu-01")
    assert "NCCL_COMM_ID=192.168.50.11:29600" in script
    assert "192.168.50.11 slots=8\n192.168.50.13 slots=8\n" in script
    other = suites.pair_script(s["gpu-03"], s["gpu-02"], run.suite, "r", "-o BatchMode=yes", 0, launcher="gpu-01")
    assert "NCCL_COMM_ID=192.168.50.13:29600" in other and "192.168.50.13 slots=1\n192.168.50.12 slots=1\n" in other
    # the run's SSH trust is gone from every node
    assert all((h / ".ssh" / "authorized_keys").read_text() == OTHER for h in bench.homes.values())


def test_fault_finding_starts_when_the_multi_node_run_is_slow(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    run = bench.make("quick")
    run.run_multi_node()  # the 4-node hostfile holds gpu-03: the slow recorded run, below the floor of 100
    assert [r["status"] for r in run.cluster.results if r["check"] == "multi_node_busbw_gb_s"] == ["fail"]
    assert "below" in run.localisation["trigger"] or "minimum" in run.localisation["trigger"]
    assert [f["nodes"] for f in run.localisation["findings"] if f["kind"] == "node"] == [["gpu-03"]]
    assert all((h / ".ssh" / "authorized_keys").read_text() == OTHER for h in bench.homes.values())


def test_no_fault_finding_when_the_run_is_fine(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(localise, "localise", lambda *a, **k: pytest.fail("fault finding started"))
    run = bench.make("quick")
    run.specs = [s for s in run.specs if s.node != "gpu-03"]
    run.run_multi_node()
    assert [r["status"] for r in run.cluster.results if r["check"] == "multi_node_busbw_gb_s"] == ["pass"]
    assert run.localisation == {}


def test_trigger_rule() -> None:
    fail = {"check": "multi_node_busbw_gb_s", "status": "fail", "message": "3 nodes: 49.8 GB/s below 100"}
    assert localise.trigger([fail], 0.25) == fail["message"]
    pairs = [{"check": "ib_write_bw_gbit_s", "status": "pass", "subject": f"a↔{x} rxe0", "value": v}
             for x, v in (("b", 390.0), ("c", 380.0), ("d", 250.0))]
    assert "a↔d rxe0: 250 Gb/s" in (localise.trigger(pairs, 0.25) or "")
    assert localise.trigger([*pairs[:2], {**fail, "status": "pass"}], 0.25) is None


def test_report_section_and_record_shape(bench: Bench) -> None:
    data = bench.make().run()
    bench.record.stage("bench", data)
    report = build_report(bench.record.id, bench.tmp / "runs", "2026-12-05T00:00:00Z")
    ff = report["fault_finding"]
    assert ff["available"] and ff["within_bound"] and ff["rounds"] == 6
    assert [(f["nodes"], f["hcas"]) for f in ff["suspects"]] == [("gpu-03", "rxe0 (eth1)")]
    md = render(report, "md")
    assert "## Fault finding" in md and "**6 rounds** (bound for 4 nodes: 15)" in md
    assert "| gpu-03 | node | rxe0 (eth1) |" in md
    html = render(report, "html")
    assert '<section id="fault-finding">' in html and "rxe0 (eth1)" in html
    # a hand-edited record: an input error naming the field, not a traceback
    bad = json.loads((bench.record.path / "stages" / "bench.json").read_text())
    bad["localisation"]["rounds"] = "six"
    (bench.record.path / "stages" / "bench.json").write_text(json.dumps(bad))
    with pytest.raises(InputError, match=r"localisation\.rounds"):
        build_report(bench.record.id, bench.tmp / "runs", "2026-12-05T00:00:00Z")
