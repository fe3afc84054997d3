"""`lspci -vvv`: each device's ACS control (ACSCtl) and AER status (UESta, CESta) flags.

A device starts at its header line ("0000:02:08.0 PCI bridge: PLX Technology ..."); its
capability lines are indented below it. Lines before the first header (a paste cut inside a
device, or `lspci -vvv | grep ACSCtl`) belong to a device whose bus id is not known: they are
kept, as device None, so a fault in them is still reported.

Flags print as `Name+` (set) or `Name-` (clear): `ACSCtl: SrcValid+ TransBlk- ReqRedir+ ...`.
The device kind comes from its PCI Express capability line ("Express (v2) Downstream Port",
"Root Port", "Upstream Port", "Endpoint") or, without one, from the header ("PCI bridge").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuctl.errors import ParseError
from gpuctl.parsers._common import require_text

TOOL = "lspci -vvv"

# "0000:02:08.0 PCI bridge: PLX ..." / "01:00.1 Audio device: ..."
_HEADER = re.compile(r"^((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.+?)\s*$")
# "\t\tACSCtl:\tSrcValid+ TransBlk- ..." / "\t\tCESta:\tRxErr- BadTLP+ ..."
_FLAGS = re.compile(r"^\s+(ACSCtl|UESta|CESta):\s*(.*)$")
_FLAG = re.compile(r"\b(\w+)([+-])(?=\s|$)")
# "\tCapabilities: [60] Express (v2) Downstream Port (Slot+), MSI 00"
# "\tKernel driver in use: pcieport"
_PCIEPORT = re.compile(r"^\s+Kernel driver in use: pcieport\s*$")
_EXPRESS = re.compile(r"Express \(v\d\) (Root Port|Downstream Port|Upstream Port|Endpoint|Legacy Endpoint"
                      r"|PCI-Express to PCI/PCI-X Bridge|Root Complex Integrated Endpoint)")


@dataclass(frozen=True)
class PciDevice:
    bus_id: str | None  # None: its header is not in the paste
    description: str | None  # "PCI bridge: PLX Technology, Inc. PEX 8725 ..."
    port_type: str | None  # "Downstream Port", "Root Port", ... (the Express capability)
    acs_ctl: dict[str, bool] | None  # ACSCtl flags; None: no ACSCtl line
    ue_status: dict[str, bool] | None  # AER uncorrectable error status
    ce_status: dict[str, bool] | None  # AER correctable error status
    line: int  # first line of the device in the input
    caps_denied: bool = False  # "Capabilities: <access denied>": lspci not run as root, ACS/AER unknown

    @property
    def is_bridge(self) -> bool | None:
        """True for a bridge or switch port, False for an endpoint, None when not known."""
        if self.port_type:
            return "Port" in self.port_type or "Bridge" in self.port_type or self.port_type == "PCIe port"
        if self.description:
            return self.description.startswith(("PCI bridge", "Host bridge"))
        return None

    @property
    def label(self) -> str:
        return self.bus_id or f"the device at line {self.line} (bus id not in the paste)"

    @property
    def acs_redirect(self) -> list[str]:
        """The request/completion redirect flags that are set ('ReqRedir', 'CmpltRedir')."""
        return [f for f in ("ReqRedir", "CmpltRedir") if (self.acs_ctl or {}).get(f)]


@dataclass(frozen=True)
class LspciResult:
    devices: tuple[PciDevice, ...]


def _flags(text: str) -> dict[str, bool]:
    return {name: sign == "+" for name, sign in _FLAG.findall(text)}


def parse_lspci(text: str) -> LspciResult:
    """Parse `lspci -vvv` (whole, cut, or grepped to its ACSCtl/UESta/CESta lines);
    ParseError when no device and no ACS/AER line is in it."""
    text = require_text(text, TOOL)
    devices: list[dict[str, object]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if m := _HEADER.match(line):
            devices.append({"bus_id": m.group(1), "description": m.group(2), "line": n})
            continue
        if m := _FLAGS.match(line):
            if not devices or (devices[-1]["bus_id"] is None and m.group(1) in devices[-1]):
                # before any header, or a grep: one unnamed device per repeated line kind
                devices.append({"bus_id": None, "description": None, "line": n})
            devices[-1][m.group(1)] = _flags(m.group(2))
        elif (m := _EXPRESS.search(line)) and line.startswith((" ", "\t")):
            if not devices:
                devices.append({"bus_id": None, "description": None, "line": n})
            devices[-1]["port_type"] = m.group(1)
        elif "Capabilities: <access denied>" in line and devices and line.startswith((" ", "\t")):
            devices[-1]["caps_denied"] = True
        elif _PCIEPORT.match(line) and devices:
            # a PCIe port (root or switch port); the Express line, when in the paste, says which
            devices[-1].setdefault("port_type", "PCIe port")
    if not devices:
        raise ParseError(f"{TOOL}: no device header ('0000:02:08.0 PCI bridge: ...') and no ACSCtl/UESta/CESta "
                         "line in the input")
    return LspciResult(tuple(PciDevice(
        bus_id=d["bus_id"], description=d["description"], port_type=d.get("port_type"),  # type: ignore[arg-type]
        acs_ctl=d.get("ACSCtl"), ue_status=d.get("UESta"), ce_status=d.get("CESta"),  # type: ignore[arg-type]
        line=d["line"], caps_denied=bool(d.get("caps_denied"))) for d in devices))  # type: ignore[arg-type]
