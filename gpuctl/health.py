"""`gpuctl health`: fast, read-only passive health checks of every node at once.

Each node is read through verify's own machinery — a testinfra host on the `gpuctl://`
paramiko backend (known_hosts policy of `gpuctl.hostkeys`, the run's generated ssh_config)
and a `gpuctl.checks.probe.Probe`, which runs each command once and parses it once — and
judged by `gpuctl.healthpolicy` (the same functions verify's `health_*` checks call).
Nodes run in parallel threads; a node that has not answered within the per-node limit
(60 s) is cut and reported as could-not-run, without holding up the others (its remote
commands carry the same limit). Firmware is then compared across nodes and with the lock
file; counters are judged against the node's previous sample, kept under
`gpuctl.paths.state_dir()/health/<cluster>/<node>.json` and replaced after each run.

Output: per node pass / unhealthy / could-not-run, and for an unhealthy node one line usable
as a scheduler's drain reason: `gpuctl: <check>: <subject>: <detail> → <remediation>`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl import healthpolicy as hp
from gpuctl.catalog import Health, load_health, load_sku
from gpuctl.checks import paramiko_backend
from gpuctl.checks.model import CouldNotRun
from gpuctl.checks.probe import Probe
from gpuctl.checks.runner import _inventory_ssh
from gpuctl.checks.sshconfig import render_ssh_config
from gpuctl.errors import GpuctlError, InputError
from gpuctl.fileio import load_json, private_dir, write_private
from gpuctl.inventory import LoadedInventory
from gpuctl.lock.model import lock_firmware
from gpuctl.parsers.firmware import vbios_versions
from gpuctl.paths import state_dir
from gpuctl.runrecord import now_iso
from gpuctl.spec import NodeSpec

log = logging.getLogger(__name__)

PER_NODE_LIMIT_S = 60
#: nodes checked at once (in-process paramiko connections, as verify's DEFAULT_PARALLEL)
DEFAULT_PARALLEL = 64
HEALTHY, UNHEALTHY, COULD_NOT_RUN = "healthy", "unhealthy", "could_not_run"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass
class NodeHealth:
    node: str
    findings: list[hp.HealthFinding] = field(default_factory=list)
    could_not_run: dict[str, str] = field(default_factory=dict)  # check -> why
    unreachable: str = ""
    seconds: float = 0.0
    # what is kept for the next run (counters) and compared across nodes (firmware)
    sample: dict[str, Any] = field(default_factory=dict)
    firmware: dict[str, str] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if any(f.status == hp.FAIL for f in self.findings):
            return UNHEALTHY
        if self.unreachable or self.could_not_run:
            return COULD_NOT_RUN
        return HEALTHY if any(f.status == hp.PASS for f in self.findings) else COULD_NOT_RUN

    @property
    def failed(self) -> list[hp.HealthFinding]:
        order = {c: i for i, c in enumerate(hp.CHECKS)}
        return sorted((f for f in self.findings if f.status == hp.FAIL), key=lambda f: order.get(f.check, 99))

    def drain_line(self) -> str | None:
        """`gpuctl: <check>: <subject>: <detail> → <remediation>` for the node's first failure
        (checks in `healthpolicy.CHECKS` order), naming how many more there are; None if healthy."""
        failed = self.failed
        if not failed:
            return None
        f = failed[0]
        more = f" (+{len(failed) - 1} more: {', '.join(dict.fromkeys(x.check for x in failed[1:]))})" \
            if len(failed) > 1 else ""
        return (f"gpuctl: {f.check}: {_one_line(self.node + ' ' + f.subject)}: {_one_line(f.detail)}{more}"
                f" → {f.remediation.value}")

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "drain": self.drain_line(), "seconds": round(self.seconds, 2),
                "unreachable": self.unreachable, "could_not_run": dict(self.could_not_run),
                "failed": [f.as_dict() for f in self.failed],
                "findings": [f.as_dict() for f in self.findings]}


def _one_line(text: str) -> str:
    """No control character (a drain reason is one line; a node's output must not forge another)."""
    return _CONTROL.sub(" ", text).strip()


@dataclass
class HealthResult:
    nodes: dict[str, NodeHealth]
    duration_s: float = 0.0
    run_id: str | None = None

    @property
    def status(self) -> str:
        statuses = {n.status for n in self.nodes.values()}
        if UNHEALTHY in statuses:
            return UNHEALTHY
        if COULD_NOT_RUN in statuses or not statuses:
            return COULD_NOT_RUN
        return HEALTHY

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "run_id": self.run_id, "duration_s": round(self.duration_s, 2),
                "nodes": {n: h.as_dict() for n, h in sorted(self.nodes.items())}}


# ---------------------------------------------------------------- one node

def _attempt(out: NodeHealth, check: str, fn: Callable[[], list[hp.HealthFinding]]) -> None:
    try:
        out.findings += fn()
    except CouldNotRun as exc:
        out.could_not_run[check] = exc.message


def check_node(probe: Probe, spec: NodeSpec, previous: Mapping[str, Any] | None, health: Health) -> NodeHealth:
    """Every per-node check of one node (firmware is judged across nodes by the caller)."""
    limits = health.passive
    if limits is None:
        raise InputError("catalog/health.yaml has no `passive:` limits")
    out = NodeHealth(spec.node)
    previous = previous or {}
    _attempt(out, "xid", lambda: hp.judge_xid(probe.kernel_log(), health))
    if probe.unreachable:
        out.unreachable = probe.unreachable
        return out
    # the connection is open: the other commands go out at once, as channels of it (as verify's prefetch)
    nvlink = bool(spec.hardware.gpu_count and spec.hardware.nvlink_topo_code)
    steps: list[Callable[[], Any]] = [probe.pci_sysfs]
    if spec.hardware.gpu_count:
        # one `nvidia-smi -q -x` per node: clock events, load, VBIOS and fabric state are read from it
        steps += [probe.gpus] + ([probe.nvlink_errors] if nvlink else [])
    _fetch_at_once(steps)
    sku = load_sku(spec.sku)
    if spec.hardware.gpu_count:
        def clocks() -> list[hp.HealthFinding]:
            gpus = probe.gpus().gpus
            out.firmware.update(vbios_versions(gpus))
            return hp.judge_clock_events(gpus, limits)
        _attempt(out, "clock_events", clocks)
        if spec.hardware.nvswitch:
            _attempt(out, "nvswitch_fabric", lambda: hp.judge_fabric(probe.gpus().gpus, sku))
    boot_id = None
    with contextlib.suppress(CouldNotRun):
        boot_id = probe.pci_sysfs().boot_id
    base = comparable_previous(previous, boot_id)
    if boot_id:
        out.sample["boot_id"] = boot_id
    if base is not previous:
        out.findings.append(hp.HealthFinding("counters", "node", hp.NOT_JUDGED, REBOOTED))
    if nvlink:
        def nvlink_errors() -> list[hp.HealthFinding]:
            result = probe.nvlink_errors()
            out.sample["nvlink_errors"] = hp.nvlink_error_keep(result)
            return hp.judge_nvlink_errors(result, base.get("nvlink_errors"))
        _attempt(out, "nvlink_errors", nvlink_errors)

    def sysfs_checks() -> list[hp.HealthFinding]:
        sysfs = probe.pci_sysfs()
        out.firmware.update(hp.hca_firmware(sysfs))
        out.sample.update({"aer_correctable": hp.aer_correctable(sysfs),
                           "ib_counters": {p: dict(c) for p, c in sysfs.ib_counters.items()}})
        found = hp.judge_aer(sysfs, base.get("aer_correctable"))
        found += hp.judge_ib_counters(sysfs, base.get("ib_counters"))
        if spec.fabric.type != "none" and not sysfs.ib_counters:
            found.append(hp.HealthFinding("ib_counters", "node", hp.NOT_JUDGED,
                                          "not judged: no port error counters under /sys/class/infiniband"))
        found += hp.judge_numa(sysfs, sku.fabric.gpu_nic_max_path, spec.hardware.gpu_count)
        return found
    _attempt(out, "pcie_aer", sysfs_checks)
    # ACS only where a PCIe switch sits above a GPU or NIC (lspci is then needed, as root)
    with contextlib.suppress(CouldNotRun):
        if hp.switch_bridges(probe.pci_sysfs()):
            _attempt(out, "pcie_acs", lambda: hp.judge_acs(probe.pci_sysfs(), probe.pcie_acs()))
    if probe.unreachable:
        out.unreachable = probe.unreachable
    return out


def _fetch_at_once(steps: Sequence[Callable[[], Any]]) -> None:
    """Run the probe's fetches in parallel (their outputs and errors are cached by the probe and
    judged afterwards). Daemon threads: a fetch that hangs never keeps the process alive."""
    def quiet(step: Callable[[], Any]) -> None:
        with contextlib.suppress(Exception):
            step()

    threads = [threading.Thread(target=quiet, args=(step,), daemon=True) for step in steps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# ---------------------------------------------------------------- state (previous samples)

#: the kept counters that count since boot (or since the driver loaded, which a boot implies):
#: PCIe AER (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats) and `nvidia-smi nvlink -e`.
#: IB port counters live in the HCA and are not known to reset at a reboot: they keep the rule of a
#: fall (reset between the samples: warned, not judged).
SINCE_BOOT: tuple[str, ...] = ("aer_correctable", "nvlink_errors")
REBOOTED = ("rebooted since the previous sample (boot id changed): the since-boot counters (PCIe AER, NVLink) "
            "are judged from zero, every error they count came after that sample")


def comparable_previous(previous: Mapping[str, Any], boot_id: str | None) -> Mapping[str, Any]:
    """The previous sample as the baseline for this one: when the node rebooted since it (boot id
    changed) the since-boot counters start again from zero, so each kept counter of `SINCE_BOOT`
    is compared with 0 — a counter that fell is then a rise from zero, not a warning, and a counter
    that rose past its old value counts in full. Returns `previous` itself when nothing changed."""
    before = previous.get("boot_id")
    if not (boot_id and before and before != boot_id):
        return previous
    out = dict(previous)
    for key in SINCE_BOOT:
        kept = previous.get(key)
        if isinstance(kept, dict):
            out[key] = dict.fromkeys(kept, 0)
    return out


def state_file(cluster: str, node: str) -> Path:
    return state_dir() / "health" / cluster / f"{node}.json"


def load_previous(cluster: str, node: str) -> dict[str, Any] | None:
    """The node's last sample, or None (first run, or a file gpuctl cannot read: a new baseline)."""

    path = state_file(cluster, node)
    if not path.exists():
        return None
    try:
        data = load_json(path, what="health sample")
    except (OSError, GpuctlError) as exc:
        log.warning("%s: unreadable previous health sample (%s); a new baseline is recorded", path, exc)
        return None
    return data if isinstance(data, dict) else None


def save_sample(cluster: str, node: str, sample: Mapping[str, Any]) -> None:
    path = state_file(cluster, node)
    private_dir(path.parent.parent.parent)
    private_dir(path.parent.parent)
    private_dir(path.parent)
    write_private(path, json.dumps({"taken_at": now_iso(), **sample}, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------- all nodes

HostFactory = Callable[[NodeSpec], Any]


def _ssh_hosts(loaded: LoadedInventory, specs: Sequence[NodeSpec], work: Path) -> HostFactory:
    """testinfra hosts as verify makes them: `gpuctl://NODE` with the run's ssh_config."""
    import testinfra

    paramiko_backend.register()
    key, known_hosts, strict, connect_timeout = _inventory_ssh(loaded)
    control = work / "cm"
    control.mkdir(mode=0o700)
    config = work / "ssh_config"
    config.write_text(render_ssh_config(specs, key=key, known_hosts=known_hosts, strict_host_keys=strict,
                                        control_dir=control, connect_timeout_s=connect_timeout))
    config.chmod(0o600)

    def host(spec: NodeSpec) -> Any:
        if spec.address == "@local":
            return testinfra.get_host("local://")
        return testinfra.get_host(f"{paramiko_backend.NAME}://{spec.node}", ssh_config=str(config))
    return host


def run_health(loaded: LoadedInventory, specs: Sequence[NodeSpec], *, raw_dir: Path | None = None,
               per_node_s: float = PER_NODE_LIMIT_S, host_for: HostFactory | None = None,
               keep_state: bool = True, lock: Mapping[str, Mapping[str, str]] | None = None,
               parallel: int = DEFAULT_PARALLEL) -> HealthResult:
    """Check the nodes of `specs` at once (`parallel` at a time), each cut at `per_node_s`
    from its own start: a cut node's slot goes to the next node at once. `host_for` builds a
    node's testinfra host (default: verify's ssh hosts); `lock`: firmware per node from the
    lock file (default: read from the inventory's lock file when it exists)."""
    specs = list(specs)
    if not specs:
        raise InputError("no nodes to check")
    health = load_health()
    cluster = loaded.inventory.cluster.name
    if lock is None:
        lock = lock_firmware(loaded)
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="gpuctl-h-", dir="/tmp"))
    results: dict[str, NodeHealth] = {}
    started: dict[str, float] = {}
    slots = threading.Semaphore(max(1, parallel))
    cond = threading.Condition()
    try:
        hosts = host_for or _ssh_hosts(loaded, specs, work)

        def worker(spec: NodeSpec) -> None:
            slots.acquire()
            t0 = time.monotonic()
            with cond:
                started[spec.node] = t0
            try:
                probe = Probe(hosts(spec), spec, raw_dir, timeout_s=max(1, int(per_node_s)))
                res = check_node(probe, spec, load_previous(cluster, spec.node) if keep_state else None, health)
            except CouldNotRun as exc:
                res = NodeHealth(spec.node, unreachable=exc.message)
            except Exception as exc:  # one node's crash must not stop the others; reported, never a pass
                log.exception("health check of %s crashed", spec.node)
                res = NodeHealth(spec.node, could_not_run={"health": f"crashed: {type(exc).__name__}: {exc}"})
            res.seconds = time.monotonic() - t0
            with cond:
                if spec.node not in results:  # else it was cut and its slot already given back
                    results[spec.node] = res
                    slots.release()
                cond.notify_all()

        for s in specs:  # daemon threads: a node cut at its limit never keeps the process alive
            threading.Thread(target=worker, args=(s,), name=f"health-{s.node}", daemon=True).start()
        with cond:
            while len(results) < len(specs):
                now = time.monotonic()
                for name, t0 in started.items():
                    if name not in results and now - t0 >= per_node_s:
                        results[name] = NodeHealth(name, unreachable=f"no answer within the per-node limit of "
                                                   f"{per_node_s:g} s", seconds=now - t0)
                        slots.release()
                running = [t0 for n, t0 in started.items() if n not in results]
                wait = min((t0 + per_node_s - now for t0 in running), default=per_node_s)
                if len(results) < len(specs):
                    cond.wait(max(0.01, wait))
    finally:
        with contextlib.suppress(Exception):
            paramiko_backend.close_all()
        shutil.rmtree(work, ignore_errors=True)
    ordered = {s.node: results[s.node] for s in specs}
    fw = {n: r.firmware for n, r in ordered.items() if r.firmware}
    for f in hp.judge_firmware(fw, lock):
        ordered[f.node].findings.append(f)
    if keep_state:
        for name, r in ordered.items():
            if r.sample:
                # a family this run could not read (a tool that failed) keeps its previous baseline
                # (since-boot counters of another boot as zeros: `comparable_previous`)
                before = comparable_previous(load_previous(cluster, name) or {}, r.sample.get("boot_id"))
                kept = {k: v for k, v in before.items() if k != "taken_at"}
                save_sample(cluster, name, {**kept, **r.sample})
    return HealthResult(ordered, time.monotonic() - start)
