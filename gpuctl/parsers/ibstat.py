"""`ibstat`: every RDMA adapter (CA) and its ports.

Rate is in Gb/s as ibstat prints it (400 = NDR, 200 = HDR, 100 = EDR or 100GbE).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text, to_float

TOOL = "ibstat"

# "CA 'mlx5_0'"
_CA = re.compile(r"^CA '([^']+)'\s*$")
# "\tPort 1:"
_PORT = re.compile(r"^\s+Port (\d+):\s*$")
# "\t\tState: Active"  /  "\tFirmware version: 28.41.1000"
_KV = re.compile(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$")
# "ibpanic: [12345] main: stat of IB device 'mlx5_9' failed: No such file or directory"
_ERROR = re.compile(r"^(ibpanic|ibwarn|ibstat: )|Failed|No such file|umad_init", re.I)


@dataclass(frozen=True)
class IbPort:
    ca: str
    number: int
    state: str  # Active, Down, Initializing, Armed
    physical_state: str  # LinkUp, Polling, Disabled, ...
    rate_gbps: float | None  # None: not printed (`ibv_devinfo` without -v)
    link_layer: str  # InfiniBand or Ethernet ("unknown" where a grepped paste lost the line)
    base_lid: int | None
    sm_lid: int | None
    port_guid: str | None

    @property
    def name(self) -> str:
        """'mlx5_0/1'."""
        return f"{self.ca}/{self.number}"

    @property
    def active(self) -> bool:
        return self.state == "Active" and self.physical_state == "LinkUp"


@dataclass(frozen=True)
class IbCa:
    name: str
    ca_type: str | None
    firmware: str | None
    hardware_version: str | None
    node_guid: str | None
    system_image_guid: str | None
    ports: tuple[IbPort, ...]
    board_id: str | None = None  # ibv_devinfo's board_id (the PSID: MT_0000000838)


@dataclass(frozen=True)
class IbstatResult:
    cas: tuple[IbCa, ...]

    @property
    def ports(self) -> tuple[IbPort, ...]:
        return tuple(p for ca in self.cas for p in ca.ports)


def _opt_int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _build_port(ca: str, number: int, kv: dict[str, str]) -> IbPort:
    for key in ("State", "Physical state", "Rate", "Link layer"):
        if key not in kv:
            raise ParseError(f"{TOOL}: {ca} port {number} has no '{key}:' line (truncated output?)")
    return IbPort(
        ca=ca,
        number=number,
        state=kv["State"],
        physical_state=kv["Physical state"],
        rate_gbps=to_float(kv["Rate"], TOOL, f"Rate: {kv['Rate']}"),
        link_layer=kv["Link layer"],
        base_lid=_opt_int(kv.get("Base lid")),
        sm_lid=_opt_int(kv.get("SM lid")),
        port_guid=kv.get("Port GUID"),
    )


def parse_ibstat(text: str) -> IbstatResult:
    """Parse the output of `ibstat` (all CAs) or `ibstat <ca>`."""
    text = require_text(text, TOOL)
    cas: list[tuple[str, dict[str, str], list[tuple[int, dict[str, str]]]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if m := _CA.match(line):
            if any(name == m.group(1) for name, _, _ in cas):
                raise ParseError(f"{TOOL}: CA {m.group(1)!r} appears twice (two pastes or two nodes' outputs "
                                 "joined?); give one node's ibstat")
            cas.append((m.group(1), {}, []))
        elif m := _PORT.match(line):
            if not cas:
                raise ParseError(f"{TOOL}: port before any CA: {quote(line)}")
            cas[-1][2].append((int(m.group(1)), {}))
        elif (m := _KV.match(line)) and cas:
            target = cas[-1][2][-1][1] if cas[-1][2] else cas[-1][1]
            target.setdefault(m.group(1), m.group(2))
        elif _ERROR.search(line):
            raise ParseError(f"{TOOL}: {quote(line)}")
        else:
            raise ParseError(f"{TOOL}: unexpected line {quote(line)}")
    if not cas:
        raise ParseError(f"{TOOL}: no \"CA '...'\" line in the output")
    out = []
    for name, kv, ports in cas:
        if not ports:
            raise ParseError(f"{TOOL}: CA {name} lists no ports (truncated output?)")
        out.append(IbCa(
            name=name,
            ca_type=kv.get("CA type"),
            firmware=kv.get("Firmware version"),
            hardware_version=kv.get("Hardware version"),
            node_guid=kv.get("Node GUID"),
            system_image_guid=kv.get("System image GUID"),
            ports=tuple(_build_port(name, n, pkv) for n, pkv in ports),
        ))
    return IbstatResult(tuple(out))


# ---------------------------------------------------------------- sysfs (preflight)

# /sys/class/infiniband/<dev>/ports/<n>/state: "4: ACTIVE" → ibstat's word
_SYSFS_STATE = {"ACTIVE": "Active", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed",
                "ACTIVE_DEFER": "ActiveDefer", "NOP": "Nop"}
# "400 Gb/sec (4X NDR)" (spaces made '_' by the script) → 400
_SYSFS_RATE = re.compile(r"^(\d+(?:\.\d+)?)_Gb/sec")


def parse_sysfs_ports(lines: list[str]) -> IbstatResult:
    """Lines ``<dev> <port> <hca_type> <link_layer> <state> <rate>`` (sysfs values, spaces made
    '_', '-' where unreadable; preflight's script) read into the same `IbstatResult` as
    `ibstat`: state in ibstat's words, the rate in Gb/s, no physical state."""
    cas: dict[str, tuple[str | None, list[IbPort]]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) != 6 or not parts[1].isdigit():
            continue
        dev, port, hca_type, layer, state, rate = parts
        word = state.split(":", 1)[-1].strip("_")
        m = _SYSFS_RATE.match(rate)
        ca_type = None if hca_type == "-" else hca_type.replace("_", " ")
        cas.setdefault(dev, (ca_type, []))[1].append(IbPort(
            ca=dev, number=int(port), state=_SYSFS_STATE.get(word, word), physical_state="",
            rate_gbps=float(m.group(1)) if m else None, link_layer="unknown" if layer == "-" else layer,
            base_lid=None, sm_lid=None, port_guid=None))
    return IbstatResult(tuple(IbCa(name, ca_type, None, None, None, None, tuple(ports))
                              for name, (ca_type, ports) in cas.items()))

