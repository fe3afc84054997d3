#!/usr/bin/env python3
"""Scale measurement: gpuctl plan / first provision / no-op provision / verify on N
container lab nodes, beside plain pyinfra running the same remote commands.

For each N it brings up a fresh container lab (`gpuctl lab up --kind container`), then
runs each gpuctl command as a child process and records:

- wall time; the gpuctl process tree's own CPU time (user+sys from ``os.wait4`` — that
  includes its waited-for children such as verify's ssh clients); the machine-wide CPU
  time over the same interval (``/proc/stat`` deltas: the containers run on the same two
  cores, so their CPU shows here); the 1-minute load average before the step;
- remote commands per node from the run record (``raw/<host>/commands.log`` for plan and
  provision, ``raw/<host>/verify-commands.jsonl`` for verify);
- peak RSS (``ru_maxrss`` of the child) and the most open file descriptors (sampling
  ``/proc/<pid>/fd`` every 50 ms).

The baseline replays exactly the remote commands of the no-op provision and of verify
(per host, from those run records) with the plain pyinfra CLI: a generated inventory and
a deploy of one ``server.shell`` operation per command, on the same N nodes.

Results: ``<out>/scale-<timestamp>.json`` and ``.md`` (the Markdown table and the bound
checks of issue 8), plus the latest copy as ``<out>/scale-latest.{json,md}``.

Reproduce (root, the lab image cached; 8 minutes on a quiet two-core machine, 19 on a loaded one)::

    python bench/scale.py --nodes 1,8,32,64

Exit status: 0 when every bound holds, 1 when one does not, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import compileall
import json
import logging
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

log = logging.getLogger("bench.scale")

DEFAULT_ROLES = "base,nvidia_repo,cuda,cudnn,nccl,dcgm"
#: Issue 8: CPU per node at the largest N ≤ 1.2 × at 1 node; no-op provision and verify
#: wall time ≤ 1.5 × plain pyinfra running the same remote commands.
CPU_PER_NODE_FACTOR = 1.2
WALL_VS_PYINFRA_FACTOR = 1.5
STEPS = ("plan", "provision-first", "provision-noop", "verify")
BASELINE_OF = {"provision-noop": "pyinfra-noop", "verify": "pyinfra-verify"}


@dataclass
class Measurement:
    """One measured command on N nodes."""

    step: str
    nodes: int
    wall_s: float
    cpu_s: float  # the measured process tree's user+sys
    machine_cpu_s: float  # all CPUs of the machine, busy time over the same interval
    peak_rss_mib: float
    max_fds: int
    commands_per_node: float | None
    exit_code: int
    load1: float
    run: str = ""
    note: str = ""

    @property
    def cpu_per_node_s(self) -> float:
        return self.cpu_s / self.nodes


@dataclass
class Bound:
    name: str
    limit: float
    value: float
    holds: bool
    detail: str


@dataclass
class ScaleReport:
    measurements: list[Measurement] = field(default_factory=list)
    bounds: list[Bound] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    command: str = ""

    def get(self, step: str, nodes: int) -> Measurement | None:
        for m in self.measurements:
            if m.step == step and m.nodes == nodes:
                return m
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "machine": self.machine,
            "measurements": [asdict(m) | {"cpu_per_node_s": round(m.cpu_per_node_s, 3)} for m in self.measurements],
            "bounds": [asdict(b) for b in self.bounds],
            "all_bounds_hold": all(b.holds for b in self.bounds),
        }


# ---------------------------------------------------------------------------- pure: bounds and table


def check_bounds(report: ScaleReport) -> list[Bound]:
    """Issue 8's bounds over whatever was measured (a bound needs both of its figures)."""
    bounds: list[Bound] = []
    sizes = sorted({m.nodes for m in report.measurements})
    if len(sizes) >= 2 and sizes[0] == 1:
        big = sizes[-1]
        for step in STEPS:
            one, many = report.get(step, 1), report.get(step, big)
            if one is None or many is None or one.cpu_s <= 0:
                continue
            ratio = many.cpu_per_node_s / one.cpu_per_node_s
            bounds.append(Bound(
                name=f"{step}: gpuctl CPU per node at {big} vs 1 node", limit=CPU_PER_NODE_FACTOR,
                value=round(ratio, 3), holds=ratio <= CPU_PER_NODE_FACTOR,
                detail=f"{many.cpu_per_node_s:.3f} s/node at {big} nodes, {one.cpu_per_node_s:.3f} s/node at 1 node"))
    for step, base in BASELINE_OF.items():
        for n in sizes:
            ours, theirs = report.get(step, n), report.get(base, n)
            if ours is None or theirs is None or theirs.wall_s <= 0:
                continue
            ratio = ours.wall_s / theirs.wall_s
            bounds.append(Bound(
                name=f"{step}: wall vs plain pyinfra, {n} node(s)", limit=WALL_VS_PYINFRA_FACTOR,
                value=round(ratio, 3), holds=ratio <= WALL_VS_PYINFRA_FACTOR,
                detail=f"gpuctl {ours.wall_s:.1f} s, pyinfra {theirs.wall_s:.1f} s"))
    return bounds


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render_markdown(report: ScaleReport) -> str:
    """The results table (one row per step and N), then the bounds."""
    head = ("| nodes | step | wall s | gpuctl CPU s | CPU s/node | machine CPU s | remote cmds/node "
            "| peak RSS MiB | max fds | exit | load1 |")
    lines = [head, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    order = {s: i for i, s in enumerate([*STEPS, "pyinfra-noop", "pyinfra-verify"])}
    for m in sorted(report.measurements, key=lambda m: (m.nodes, order.get(m.step, 99))):
        lines.append(
            f"| {m.nodes} | {m.step} | {m.wall_s:.1f} | {m.cpu_s:.1f} | {m.cpu_per_node_s:.2f} | "
            f"{m.machine_cpu_s:.1f} | {_fmt(m.commands_per_node)} | {m.peak_rss_mib:.0f} | {m.max_fds} | "
            f"{m.exit_code} | {m.load1:.2f} |")
    out = "\n".join(lines) + "\n"
    if report.bounds:
        out += "\n| bound | limit | measured | holds | figures |\n|---|---:|---:|---|---|\n"
        for b in report.bounds:
            out += f"| {b.name} | ≤ {b.limit:g}× | {b.value:.2f}× | {'yes' if b.holds else '**no**'} | {b.detail} |\n"
    return out


# ---------------------------------------------------------------------------- measuring


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot (all CPUs), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _count_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def measure(argv: list[str], step: str, nodes: int, log_path: Path, env: dict[str, str] | None = None) -> Measurement:
    """Run argv to completion, sampling its open fds; wall, CPU, RSS from wait4."""
    load1 = os.getloadavg()[0]
    busy0 = machine_busy_s()
    t0 = time.monotonic()
    with log_path.open("w") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=REPO)
    peak_fds = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_fds
        while not done.is_set():
            peak_fds = max(peak_fds, _count_fds(proc.pid))
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    busy = machine_busy_s() - busy0
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Measurement(step=step, nodes=nodes, wall_s=round(wall, 2),
                       cpu_s=round(usage.ru_utime + usage.ru_stime, 2), machine_cpu_s=round(busy, 2),
                       peak_rss_mib=round(usage.ru_maxrss / 1024, 1), max_fds=peak_fds,
                       commands_per_node=None, exit_code=proc.returncode, load1=round(load1, 2))


def _latest_run(before: set[str], log_path: Path | None = None) -> Path | None:
    """The run record the step wrote: the id it printed ("run record: ID" / "run record ID"),
    else the newest new one (runs/ is shared: someone else's run may be newer)."""
    runs = REPO / "runs"
    if log_path is not None and log_path.exists():
        import re

        found = re.findall(r"run record:? (\d{8}T\d{6}-[a-z]+\S*)", log_path.read_text(errors="replace"))
        if found and (runs / found[-1]).is_dir():
            return runs / found[-1]
    new = sorted(p for p in runs.iterdir() if p.is_dir() and p.name not in before) if runs.exists() else []
    return new[-1] if new else None


def _runs_now() -> set[str]:
    runs = REPO / "runs"
    return {p.name for p in runs.iterdir()} if runs.exists() else set()


def parse_commands_log(text: str) -> list[str]:
    """Commands of a runner commands.log: an entry starts with ``$ [stage] `` at column 0;
    the command runs until the line ``  exit=…`` (a command may span lines)."""
    commands: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("$ [") and "] " in line and current is None:
            current = [line.split("] ", 1)[1]]
        elif current is not None and line.startswith("  exit="):
            commands.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return commands


def run_commands(run_dir: Path) -> dict[str, list[str]]:
    """host → remote commands of a run record, in order (uploads left out)."""
    found: dict[str, list[str]] = {}
    raw = run_dir / "raw"
    if not raw.exists():
        return found
    for host_dir in sorted(p for p in raw.iterdir() if p.is_dir()):
        jsonl = host_dir / "verify-commands.jsonl"
        log_file = host_dir / "commands.log"
        if jsonl.exists():
            found[host_dir.name] = [json.loads(x)["command"] for x in jsonl.read_text().splitlines() if x.strip()]
        elif log_file.exists():
            found[host_dir.name] = [c for c in parse_commands_log(log_file.read_text())
                                    if not c.startswith("<upload ")]
    return found


def commands_per_node(run_dir: Path | None, nodes: int) -> float | None:
    if run_dir is None:
        return None
    cmds = run_commands(run_dir)
    return round(sum(len(v) for v in cmds.values()) / nodes, 1) if cmds else None


PYINFRA_DEPLOY = '''"""Generated by bench/scale.py: replay recorded remote commands, one operation each."""
import json

from pyinfra import host
from pyinfra.operations import server

COMMANDS = json.load(open({commands!r}))
MINE = COMMANDS.get(host.name, [])
for i in range({count}):
    server.shell(name=f"command {{i + 1}}", commands=[MINE[i] if i < len(MINE) else "true"],
                 _ignore_errors=True)
'''


def write_baseline(workdir: Path, commands: dict[str, list[str]], state: Any) -> tuple[Path, Path]:
    """A pyinfra inventory of the lab's nodes and a deploy replaying `commands`."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfile = workdir / "commands.json"
    cfile.write_text(json.dumps(commands))
    hosts = [(n.name, {"ssh_hostname": n.address, "ssh_user": "root", "ssh_key": state.key_path,
                       "ssh_known_hosts_file": state.known_hosts, "ssh_strict_host_key_checking": "yes"})
             for n in state.nodes if n.name in commands]
    inv = workdir / "inventory.py"
    inv.write_text("hosts = " + repr(hosts) + "\n")
    deploy = workdir / "deploy.py"
    deploy.write_text(PYINFRA_DEPLOY.format(commands=str(cfile), count=max(map(len, commands.values()))))
    return inv, deploy


def median_of(samples: list[Measurement]) -> Measurement:
    """The sample with the median wall time; the others' wall times in its note."""
    ordered = sorted(samples, key=lambda m: m.wall_s)
    chosen = ordered[(len(ordered) - 1) // 2]
    if len(samples) > 1:
        walls = ", ".join(f"{m.wall_s:.1f}" for m in samples)
        chosen.note = (chosen.note + "; " if chosen.note else "") + f"median of {len(samples)} runs (wall s: {walls})"
    return chosen


def measure_sizes(sizes: list[int], roles: str, out: Path, keep_up: bool, repeat: int = 1) -> ScaleReport:
    from gpuctl.lab import containers

    report = ScaleReport()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="dumb", COLUMNS="160")
    gpuctl = [sys.executable, "-m", "gpuctl"]
    pyinfra_cli = [str(Path(sys.executable).with_name("pyinfra"))]
    for n in sizes:
        containers.down()
        t0 = time.monotonic()
        state = containers.up(n)
        log.info("%d container node(s) up in %.1f s", n, time.monotonic() - t0)
        inv = state.inventory_path
        only = ["--only", roles]
        steps = [
            ("plan", [*gpuctl, "plan", inv, *only]),
            ("provision-first", [*gpuctl, "provision", inv, *only, "--yes", "--no-verify"]),
            ("provision-noop", [*gpuctl, "provision", inv, *only, "--yes", "--no-verify"]),
            ("verify", [*gpuctl, "verify", inv]),
        ]
        runs: dict[str, Path | None] = {}
        samples: dict[str, list[Measurement]] = {}

        def gpuctl_step(step: str, argv: list[str], k: int, n: int = n, runs: dict[str, Path | None] = runs,
                        samples: dict[str, list[Measurement]] = samples) -> None:
            before = _runs_now()
            log_path = logs / f"{n:03d}-{step}-{k}.log"
            m = measure(argv, step, n, log_path, env)
            run = _latest_run(before, log_path)
            runs[step] = run
            m.run = run.name if run else ""
            m.commands_per_node = commands_per_node(run, n)
            samples.setdefault(step, []).append(m)
            log.info("%3d nodes %-16s wall %6.1f s cpu %6.1f s machine %6.1f s cmds/node %s rss %.0f MiB "
                     "fds %d exit %d", n, step, m.wall_s, m.cpu_s, m.machine_cpu_s, m.commands_per_node,
                     m.peak_rss_mib, m.max_fds, m.exit_code)

        def baseline_step(step: str, base: str, k: int, n: int = n, runs: dict[str, Path | None] = runs,
                          samples: dict[str, list[Measurement]] = samples, state: Any = state) -> None:
            run = runs.get(step)
            cmds = run_commands(run) if run else {}
            if not cmds:
                log.warning("%s: no recorded commands, no baseline", step)
                return
            with tempfile.TemporaryDirectory(prefix="gpuctl-scale-") as tmp:
                pinv, pdeploy = write_baseline(Path(tmp), cmds, state)
                m = measure([*pyinfra_cli, "-y", str(pinv), str(pdeploy)], base, n,
                            logs / f"{n:03d}-{base}-{k}.log", dict(env, PYINFRA_PROGRESS="off"))
            m.commands_per_node = round(sum(len(v) for v in cmds.values()) / n, 1)
            m.note = f"replays {step}'s recorded commands ({run.name if run else ''})"
            samples.setdefault(base, []).append(m)
            log.info("%3d nodes %-16s wall %6.1f s cpu %6.1f s machine %6.1f s exit %d", n, base, m.wall_s, m.cpu_s,
                     m.machine_cpu_s, m.exit_code)

        for step, argv in steps[:2]:  # plan and the first provision happen once
            gpuctl_step(step, argv, 0)
        # The compared steps alternate with their baselines, `repeat` times: the median of
        # each goes in the table (other work on the machine comes and goes).
        for k in range(repeat):
            for step, argv in steps[2:]:
                gpuctl_step(step, argv, k)
                baseline_step(step, BASELINE_OF[step], k)
        for name in [s for s, _ in steps] + list(BASELINE_OF.values()):
            if name in samples:
                report.measurements.append(median_of(samples[name]))
    if not keep_up:
        containers.down()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1,8,32,64", help="comma-separated node counts (default: 1,8,32,64)")
    parser.add_argument("--roles", default=DEFAULT_ROLES, help=f"roles for plan/provision (default: {DEFAULT_ROLES})")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="results directory")
    parser.add_argument("--keep-up", action="store_true", help="leave the last container lab running")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of no-op provision, verify and their baselines, alternating; median kept")
    args = parser.parse_args(argv)
    try:
        sizes = sorted({int(x) for x in args.nodes.split(",") if x.strip()})
    except ValueError:
        parser.error(f"--nodes: not a list of integers: {args.nodes}")
    if not sizes or sizes[0] < 1:
        parser.error("--nodes: at least one count ≥ 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if args.repeat < 1:
        parser.error("--repeat: at least 1")
    # Like against like: plain pyinfra runs from site-packages with its bytecode compiled
    # at install; the tree measured here is byte-compiled first, as an installed gpuctl
    # would be (with PYTHONDONTWRITEBYTECODE set, each command compiled ~130 modules).
    compiled = compileall.compile_dir(str(REPO / "gpuctl"), quiet=1, workers=0) and all(
        compileall.compile_dir(str(REPO / d), quiet=1, workers=0) for d in ("roles", "deploy"))
    report = measure_sizes(sizes, args.roles, args.out, args.keep_up, args.repeat)
    report.command = "python bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report.machine = {"cpus": os.cpu_count(), "load_after": os.getloadavg(), "nofile_limit_of_bench": [soft, hard],
                      "kernel": os.uname().release, "started_from": str(REPO), "bytecode_compiled": bool(compiled)}
    report.bounds = check_bounds(report)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    md = render_markdown(report)
    for name in (f"scale-{stamp}", "scale-latest"):
        (args.out / f"{name}.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
        (args.out / f"{name}.md").write_text(f"Command: `{report.command}`\n\n" + md)
    print(md)
    return 0 if all(b.holds for b in report.bounds) else 1


if __name__ == "__main__":
    sys.exit(main())
