"""InfiniBand port error counters: `perfquery` (infiniband-diags) and the kernel's sysfs
counters (`grep . /sys/class/infiniband/*/ports/*/counters/*`).

    # Port counters: Lid 10 port 1 (CapMask: 0x5300)        perfquery [-x]
    SymbolErrorCounter:..............0
    /sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0          sysfs

Both are read into one shape, counter names as perfquery prints them today (the sysfs file
names and perfquery's older short names are mapped). A port is "lid 10 port 1" (perfquery)
or "mlx5_0/1" (sysfs). The counters count since the last reset, so two outputs, concatenated
or given with `--baseline`, are two samples: a (port, counter) seen again starts the next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text

TOOL = "perfquery / sysfs IB counters"

# "# Port counters: Lid 10 port 1 (CapMask: 0x5300)" / "# Port extended counters: Lid 10 port 1 (...)"
_PQ_HEAD = re.compile(r"^#\s*Port (?:extended )?counters:\s*Lid (\d+) (?:port (\d+)|all ports)", re.I)
# "SymbolErrorCounter:..............0"
_PQ_LINE = re.compile(r"^(\w+):\.*\s*(\S+)\s*$")
# "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0" (also hw_counters)
_SYSFS = re.compile(r"^/sys/class/infiniband/([^/\s]+)/ports/(\d+)/(?:hw_)?counters/(\w+):\s*(\d+)\s*$")

# the kernel's sysfs names and older perfquery names, as perfquery prints them now
NAMES: dict[str, str] = {
    "symbol_error": "SymbolErrorCounter", "link_error_recovery": "LinkErrorRecoveryCounter",
    "link_downed": "LinkDownedCounter", "port_rcv_errors": "PortRcvErrors",
    "port_rcv_remote_physical_errors": "PortRcvRemotePhysicalErrors",
    "port_rcv_switch_relay_errors": "PortRcvSwitchRelayErrors", "port_xmit_discards": "PortXmitDiscards",
    "port_xmit_constraint_errors": "PortXmitConstraintErrors",
    "port_rcv_constraint_errors": "PortRcvConstraintErrors",
    "local_link_integrity_errors": "LocalLinkIntegrityErrors",
    "excessive_buffer_overrun_errors": "ExcessiveBufferOverrunErrors", "VL15_dropped": "VL15Dropped",
    "port_xmit_wait": "PortXmitWait", "port_xmit_data": "PortXmitData", "port_rcv_data": "PortRcvData",
    "port_xmit_packets": "PortXmitPkts", "port_rcv_packets": "PortRcvPkts",
    # perfquery before infiniband-diags 1.5 (e.g. "SymbolErrors:", "LinkRecovers:")
    "SymbolErrors": "SymbolErrorCounter", "LinkRecovers": "LinkErrorRecoveryCounter",
    "LinkDowned": "LinkDownedCounter", "RcvErrors": "PortRcvErrors",
    "RcvRemotePhysErrors": "PortRcvRemotePhysicalErrors", "RcvSwRelayErrors": "PortRcvSwitchRelayErrors",
    "XmtDiscards": "PortXmitDiscards", "XmtConstraintErrors": "PortXmitConstraintErrors",
    "RcvConstraintErrors": "PortRcvConstraintErrors", "LinkIntegrityErrors": "LocalLinkIntegrityErrors",
    "ExcBufOverrunErrors": "ExcessiveBufferOverrunErrors", "XmtData": "PortXmitData", "RcvData": "PortRcvData",
    "XmtPkts": "PortXmitPkts", "RcvPkts": "PortRcvPkts",
}
_NOT_COUNTERS = {"PortSelect", "CounterSelect", "CounterSelect2"}

Key = tuple[str, str]  # (port, counter)


@dataclass(frozen=True)
class IbCountersResult:
    samples: tuple[dict[Key, int], ...]
    ports: tuple[str, ...]


def parse_ib_counters(text: str) -> IbCountersResult:
    """Parse perfquery output(s) and/or sysfs counter lines; ParseError naming the line when
    a line is neither."""
    text = require_text(text, TOOL)
    samples: list[dict[Key, int]] = [{}]
    ports: list[str] = []
    port: str | None = None

    def put(key: Key, value: int) -> None:
        if key in samples[-1]:
            samples.append({})
        samples[-1][key] = value
        if key[0] not in ports:
            ports.append(key[0])

    for line in text.splitlines():
        if not line.strip():
            continue
        if m := _SYSFS.match(line.strip()):
            put((f"{m.group(1)}/{m.group(2)}", NAMES.get(m.group(3), m.group(3))), int(m.group(4)))
        elif m := _PQ_HEAD.match(line.strip()):
            port = f"lid {m.group(1)} port {m.group(2) or 'all'}"
        elif (m := _PQ_LINE.match(line.strip())) and port is not None:
            name, value = NAMES.get(m.group(1), m.group(1)), m.group(2)
            if name in _NOT_COUNTERS:
                continue
            if not value.isdigit():
                raise ParseError(f"{TOOL}: expected a count, got {value!r} in {quote(line)}")
            put((port, name), int(value))
        else:
            raise ParseError(f"{TOOL}: not a perfquery or sysfs counter line: {quote(line)}")
    if not samples[0]:
        raise ParseError(f"{TOOL}: no counter in the input")
    return IbCountersResult(tuple(samples), tuple(ports))
