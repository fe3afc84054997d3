"""Checks of the bench_tools role: every program `gpuctl bench` runs is found where the bench
looks (the PATH plus gpuctl's tool folders): the acceptance suite's nccl-tests, perftest on a
fabric, fio, MPI, the bandwidth probe."""

from __future__ import annotations

from gpuctl.bench.suites import SUITES, TOOL_DIRS, preamble
from gpuctl.checks.api import Remediation, expect, for_each
from gpuctl.shellcmd import sh

ROLE = "bench_tools"


def tool_items(spec) -> list[str]:
    suite = SUITES["acceptance"]
    tools = list(suite.nccl_tests)
    if suite.multi_node:
        tools.append("mpirun")
    if suite.ib and spec.fabric.type != "none":
        tools += ["ib_write_bw", "ib_write_lat"]
    if suite.fio:
        tools.append("fio")
    if suite.bwprobe:
        tools.append("gpuctl-bwprobe")
    return tools


def _paths(spec, probe) -> dict[str, str]:
    names = sh(*tool_items(spec))
    # the PATH the bench's scripts run with (its preamble adds gpuctl's tool folders)
    search = preamble().replace("\n", "; ")
    lookup = f'for t in {names}; do printf "%s\\t%s\\n" "$t" "$(command -v "$t")"; done'
    out = probe.output("bench-tools", search + lookup)
    return dict(line.split("\t", 1) for line in out.stdout.splitlines() if "\t" in line)


def prefetch(spec, probe) -> None:
    """Run the tool lookup during verify's parallel prefetch (see gpuctl.checks.plugin)."""
    _paths(spec, probe)


@for_each(tool_items)
def test_tool_installed(host, spec, probe, item):
    path = _paths(spec, probe).get(item, "")
    expect(bool(path), f"{item} is not on the PATH nor in gpuctl's tool folders (gpuctl bench needs it)",
           expected=f"{item} on the PATH or in {', '.join(TOOL_DIRS)}", found="not found",
           remediation=Remediation.RECONFIGURE)
