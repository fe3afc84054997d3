"""`gpuctl rebuild`: bring a replaced node to the lock (provision with the lock's pins, read,
compare with the lock and its peers, verify, bench).
"""


from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl.bench.suites import SUITES
from gpuctl.errors import InputError
from gpuctl.inventory import LoadedInventory
from gpuctl.lock import read as reading
from gpuctl.lock.compare import Drift, DriftReport, diff_entry, diff_peers
from gpuctl.lock.managed import per_node_file
from gpuctl.lock.model import load_lock, lock_path, now_iso, write_lock
from gpuctl.lock.pins import consensus_entry, pin_from_lock, pins_changed
from gpuctl.runner.roles import select_roles
from gpuctl.runrecord import RunRecord
from gpuctl.spec import NodeSpec, resolve
from gpuctl.verdicts import Status

log = logging.getLogger(__name__)


@dataclass
class RebuildOutcome:
    node: str
    pins: list[str]
    provision: dict[str, Any]
    drift: DriftReport
    verify: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.provision.get("status") == "ok" and self.drift.clean
                and (self.verify is None or self.verify.get("status") == "pass")
                and (self.bench is None or self.bench.get("status") in ("pass", "warn")))

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "status": "ok" if self.ok else "failed", "pins_from_lock": self.pins,
                "provision": self.provision, "drift": self.drift.as_dict(), "verify": self.verify,
                "bench": self.bench, "notes": self.notes}


def rebuild(loaded: LoadedInventory, host: str, record: RunRecord | None = None, *,
            path: str | Path | None = None, verify: bool = True, bench: str | None = "quick",
            options: Any = None) -> RebuildOutcome:
    """Bring a replaced node to the lock: provision it with package pins from the lock,
    read it, compare with the lock and its peers, then verify and bench it.

    Pins come from the node's own lock entry when it has one, else from its peers'
    majority (`consensus_entry`). Node-specific files (mdadm.conf of a new array, …)
    are re-recorded in the lock for this node after a clean rebuild; everything else
    must equal the lock."""
    from gpuctl.rolerun import run_deploy
    from gpuctl.runner.run import load_provision_deploy

    target_path = Path(path) if path else lock_path(loaded.path)
    lockfile = load_lock(target_path)
    loaded.inventory.node(host)  # InputError for an unknown node
    specs = {s.node: s for s in resolve(loaded)}
    spec = specs[host]
    peers = [n for n in lockfile.nodes if n != host]
    entry = consensus_entry(lockfile, exclude=host) if peers else lockfile.nodes.get(host)
    if entry is None:
        raise InputError(f"the lock file {target_path} has no entry to rebuild {host} from")
    pinned = pin_from_lock(spec, entry)
    pins = pins_changed(spec, pinned)
    choices = select_roles([pinned])
    deploy = load_provision_deploy()
    prov = run_deploy(loaded, [pinned], deploy.provision, command="rebuild-provision", args=(choices,),
                      record=record, options=options, compose=True)
    read = reading.read_nodes(loaded, [pinned], record)
    found = dict(read.nodes)
    # compare the rebuilt node with the lock (shared keys) and with its peers' lock entries
    expected = lockfile.nodes.get(host) or entry
    items: list[Drift] = []
    if host not in found:
        items.append(Drift(host, "missing", "node", "locked", read.errors.get(host, "not read")))
    else:
        mine = found[host]
        for d in diff_entry(host, expected, mine):
            if d.key.startswith("file ") and per_node_file(d.key[5:], spec):
                continue  # new hardware: a new array UUID is expected; re-recorded below
            items.append(d)
        peer_view = {n: e for n, e in lockfile.nodes.items() if n != host}
        peer_view[host] = mine
        items.extend(d for d in diff_peers(peer_view, spec) if d.node == host)
    report = DriftReport(list(dict.fromkeys(items)), [host])
    out = RebuildOutcome(host, pins, prov.as_dict(), report)
    if report.clean and host in found and prov.ok:
        nodes = dict(lockfile.nodes)
        nodes[host] = found[host]
        write_lock(lockfile.model_copy(update={"nodes": nodes, "generated": now_iso()}), target_path)
        out.notes.append(f"lock entry of {host} re-recorded in {target_path}")
    if verify and prov.ok:
        out.verify = _verify(loaded, pinned, record)
    if bench and prov.ok:
        out.bench = _bench(loaded, pinned, [s for n, s in specs.items() if n != host], bench, record, out.notes)
    if record is not None:
        record.stage("rebuild", out.as_dict())
    return out


def _verify(loaded: LoadedInventory, spec: NodeSpec, record: RunRecord | None) -> dict[str, Any]:
    from gpuctl.checks.runner import run_verify  # an import error is a broken install: never "verify not run"

    result = run_verify(loaded, [spec], record)
    return result.as_dict()


def _bench(loaded: LoadedInventory, spec: NodeSpec, peers: list[NodeSpec], suite_name: str,
           record: RunRecord | None, notes: list[str]) -> dict[str, Any] | None:
    """Bench the rebuilt node together with one peer (so the pairwise fabric tests run
    between them), judged on the SKU thresholds; per check, the node's and the peer's
    measured values side by side."""
    from gpuctl.bench.run import run_bench  # an import error is a broken install: never "bench not run"

    if record is None:
        notes.append("bench not run: no run record to keep its outputs")
        return None
    if suite_name not in SUITES:
        raise InputError(f"unknown bench suite {suite_name!r}; suites: {', '.join(SUITES)}")
    chosen = [spec, *peers[:1]]
    result = run_bench(loaded, chosen, SUITES[suite_name], record)  # the typed result
    values: dict[str, dict[str, Any]] = {}
    for node, h in result.hosts.items():
        for r in h.results:
            if isinstance(r.value, (int, float)):
                values.setdefault(f"{r.check} {r.subject}", {})[node] = r.value
    return {"suite": suite_name, "status": _value(result.status), "nodes": [s.node for s in chosen],
            "hosts": {h: _value(b.status) for h, b in result.hosts.items()},
            "cluster": _value(result.cluster.status), "values": values}


def _value(status: Status | None) -> str | None:
    return None if status is None else status.value
