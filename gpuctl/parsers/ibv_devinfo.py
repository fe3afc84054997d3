"""`ibv_devinfo` and `ibv_devinfo -v` (rdma-core): the same facts as `ibstat`, read into the
same `IbstatResult` so one judgement (`judge_ibstat`) rules both.

Port state and physical state are mapped to ibstat's words (rdma-core `enum ibv_port_state`,
and the physical states devinfo.c prints): PORT_ACTIVE → Active, PORT_DOWN → Down, PORT_INIT →
Initializing, PORT_ARMED → Armed; LINK_UP → LinkUp, POLLING → Polling, DISABLED → Disabled.
The rate is active_width × active_speed as ibstat computes it (4X × 25.0 Gbps = 100); plain
`ibv_devinfo` prints neither, so its ports have no rate and no physical state. The CA type is
ibstat's "MT<vendor_part_id>" (MT4129). A grep of the output (ports without their `port:` line)
is read with port 1 per hca_id.
"""

from __future__ import annotations

import re

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text, to_float
from gpuctl.parsers.ibstat import IbCa, IbPort, IbstatResult

TOOL = "ibv_devinfo"

# "hca_id: mlx5_0" / "hca_id:\tmlx5_0"
_HCA = re.compile(r"^hca_id:\s*(\S+)\s*$")
# "\t\tport:\t1"
_PORT = re.compile(r"^\s+port:\s*(\d+)\s*$")
# "\t\t\tstate:\t\t\tPORT_ACTIVE (4)" / "\tfw_ver:\t\t\t\t28.39.2048"
_KV = re.compile(r"^\s+([a-z_]+):\s*(.*?)\s*$")
_STATE = {"PORT_ACTIVE": "Active", "PORT_DOWN": "Down", "PORT_INIT": "Initializing", "PORT_ARMED": "Armed",
          "PORT_ACTIVE_DEFER": "ActiveDefer", "PORT_NOP": "Nop"}
_PHYS = {"LINK_UP": "LinkUp", "POLLING": "Polling", "DISABLED": "Disabled", "SLEEP": "Sleep",
         "PORT_CONFIGURATION_TRAINING": "PortConfigurationTraining", "LINK_ERROR_RECOVERY": "LinkErrorRecovery",
         "PHY_TEST": "PhyTest"}
# "Failed to get IB devices list: ..." / "No IB devices found"
_ERROR = re.compile(r"Failed to get IB devices|No IB devices found|Failed to open device", re.I)


def _word(value: str) -> str:
    """'PORT_ACTIVE (4)' → 'PORT_ACTIVE'."""
    return value.split("(", 1)[0].strip()


def _port(ca: str, number: int, kv: dict[str, str]) -> IbPort:
    if "state" not in kv:
        raise ParseError(f"{TOOL}: {ca} port {number} has no 'state:' line (truncated output?)")
    state = _STATE.get(_word(kv["state"]))
    if state is None:
        raise ParseError(f"{TOOL}: {ca} port {number}: unknown state {kv['state']!r}")
    phys = _PHYS.get(_word(kv["phys_state"]), _word(kv["phys_state"])) if "phys_state" in kv else None
    rate = None
    if "active_width" in kv and "active_speed" in kv:
        width = re.match(r"(\d+)X", kv["active_width"])
        speed = re.match(r"([\d.]+)\s*Gbps", kv["active_speed"])
        if not width or not speed:
            raise ParseError(f"{TOOL}: {ca} port {number}: width/speed {kv['active_width']!r} "
                             f"{kv['active_speed']!r} not understood")
        rate = int(width.group(1)) * to_float(speed.group(1), TOOL, kv["active_speed"])
    # without -v the physical state is not printed: an Active port is linked up, others unknown
    if phys is None:
        phys = "LinkUp" if state == "Active" else "unknown"
    lid = kv.get("port_lid")
    sm = kv.get("sm_lid")
    return IbPort(ca=ca, number=number, state=state, physical_state=phys, rate_gbps=rate,
                  link_layer=kv.get("link_layer", "unknown"),
                  base_lid=int(lid) if lid and lid.isdigit() else None,
                  sm_lid=int(sm) if sm and sm.isdigit() else None, port_guid=None)


def parse_ibv_devinfo(text: str) -> IbstatResult:
    """Parse `ibv_devinfo [-v]` (all devices or `-d DEV`); ParseError naming the line when
    it is not that output."""
    text = require_text(text, TOOL)
    cas: list[tuple[str, dict[str, str], list[tuple[int, dict[str, str]]]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if m := _HCA.match(line):
            cas.append((m.group(1), {}, []))
        elif _ERROR.search(line):
            raise ParseError(f"{TOOL}: {quote(line)}")
        elif not cas:
            raise ParseError(f"{TOOL}: a line before any 'hca_id:': {quote(line)}")
        elif m := _PORT.match(line):
            cas[-1][2].append((int(m.group(1)), {}))
        elif m := _KV.match(line):
            key, value = m.group(1), m.group(2)
            if key in ("state", "phys_state", "active_width", "active_speed", "link_layer", "sm_lid", "port_lid") \
                    and not cas[-1][2]:
                cas[-1][2].append((1, {}))  # a grep without the 'port:' line
            target = cas[-1][2][-1][1] if cas[-1][2] else cas[-1][1]
            target.setdefault(key, value)
        # other lines (capability flag lists, GIDs, "core clock not supported") carry nothing judged
    if not cas:
        raise ParseError(f"{TOOL}: no 'hca_id:' line in the output")
    out = []
    for name, kv, ports in cas:
        if not ports:
            raise ParseError(f"{TOOL}: {name} lists no ports (truncated output?)")
        part = kv.get("vendor_part_id")
        out.append(IbCa(name=name, ca_type=f"MT{part}" if part and part.isdigit() and part != "0" else None,
                        firmware=kv.get("fw_ver"), hardware_version=kv.get("hw_ver"), node_guid=kv.get("node_guid"),
                        system_image_guid=kv.get("sys_image_guid"),
                        ports=tuple(_port(name, n, pkv) for n, pkv in ports), board_id=kv.get("board_id")))
    return IbstatResult(tuple(out))
