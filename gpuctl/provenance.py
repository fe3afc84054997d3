"""Where a benchmark figure came from: real hardware, or a lab stand-in / emulated device.

`emulated_reason(stdout, stderr, rdma_device=...)` reads the tool's own output (never the
cluster's or a node's name) and returns why the figure is not a measurement of real hardware,
or None when nothing says so (`gpuctl.kinds.emulated_source` asks it for one tool kind):

- a lab stand-in tool (``gpuctl/lab/standin/tools/labhw.py``: nccl-tests, the bandwidth
  probe, gdsio, ``dcgmi diag``) declares itself on stderr with one line that starts with
  `STANDIN_MARK`, naming the tool and the stand-in package it came from;
- perftest (the kinds with `rdma_device`) names the RDMA device it ran on (``Device : rxe0``): the kernel's software
  RDMA providers (Soft-RoCE ``rdma_rxe`` devices ``rxe*``, soft-iWARP ``siw*``; rdma-core
  ``providers/rxe``, ``providers/siw``) have no HCA behind them;
- the fio script prints the model of every block device under the RAID mount on stderr
  (`DEVICE_MARK` lines, ``lsblk -P`` pairs, see `gpuctl.bench.suites.fio_script`); a
  model QEMU gives its emulated disks ("QEMU NVMe Ctrl", QEMU hw/nvme/ctrl.c; "QEMU
  HARDDISK", hw/ide and hw/scsi) is emulated storage.

The report, the bench table and `gpuctl analyze` mark every such figure (a banner and a
marker per row), so a lab report can never pass for a customer's acceptance.
"""

from __future__ import annotations

import re

# The line a lab stand-in tool writes to stderr (labhw.py writes the same prefix; a unit
# test runs the stand-ins and checks this module recognises what they print).
STANDIN_MARK = "gpuctl-lab-standin:"
# The lines the fio script writes to stderr: `gpuctl-device: NAME="nvme0n1" MODEL="QEMU NVMe Ctrl"`.
DEVICE_MARK = "gpuctl-device:"
EMULATED_MODELS = ("QEMU NVMe Ctrl", "QEMU HARDDISK", "QEMU DVD-ROM", "QEMU CD-ROM")
# " Dual-port       : OFF\t\tDevice         : rxe0"
_PERFTEST_DEVICE = re.compile(r"\bDevice\s*:\s*(\S+)")
_SOFT_RDMA = re.compile(r"^(rxe|siw)\d*$")
_MODEL = re.compile(r'\bMODEL="([^"]*)"')
_NAME = re.compile(r'\bNAME="([^"]*)"')


def standin_declaration(text: str) -> str | None:
    """The stand-in tool's own words after `STANDIN_MARK` up to the first ';' (which tool, from
    which package), when `text` holds its line."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(STANDIN_MARK):
            return line[len(STANDIN_MARK):].split(";")[0].strip() or "a lab stand-in tool"
    return None


def soft_rdma_device(text: str) -> str | None:
    """The perftest device when it is a software RDMA device (rxe*, siw*)."""
    for m in _PERFTEST_DEVICE.finditer(text):
        if _SOFT_RDMA.match(m.group(1)):
            return m.group(1)
    return None


def emulated_disks(text: str) -> list[str]:
    """'nvme0n1 (QEMU NVMe Ctrl)' for each `DEVICE_MARK` line naming an emulated model."""
    found = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(DEVICE_MARK):
            continue
        model = _MODEL.search(line)
        name = _NAME.search(line)
        if model and model.group(1).strip() in EMULATED_MODELS:
            found.append(f"{name.group(1) if name else '?'} ({model.group(1).strip()})")
    return found


def emulated_reason(stdout: str, stderr: str = "", *, rdma_device: bool = False) -> str | None:
    """Why the figures of this output are emulated, or None (see the module docstring);
    `rdma_device`: the tool names the RDMA device it ran on (perftest)."""
    both = stdout + "\n" + stderr
    declared = standin_declaration(both)
    if declared is not None:
        return declared
    if rdma_device and (dev := soft_rdma_device(stdout)):
        return f"software RDMA device {dev} (Soft-RoCE/soft-iWARP, no HCA)"
    disks = emulated_disks(both)
    if disks:
        return "emulated disk " + ", ".join(disks)
    return None
