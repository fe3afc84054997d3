"""systemd unit state: `systemctl show` blocks (verify) and `is-enabled|is-active` lines
(the provisioning fact `gpuctl.facts.system.ServiceStates`). Pure functions."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class UnitState:
    name: str
    load: str
    active: str
    sub: str
    unit_file: str


def parse_systemctl_show(text: str) -> dict[str, UnitState]:
    """`systemctl show --property=Id,LoadState,ActiveState,SubState,UnitFileState UNIT...`
    (blocks separated by a blank line) → unit name without '.service' → state."""
    out = {}
    for block in re.split(r"\n\s*\n", text.strip()):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "Id" not in kv:
            continue
        name = kv["Id"].removesuffix(".service")
        out[name] = UnitState(name, kv.get("LoadState", ""), kv.get("ActiveState", ""), kv.get("SubState", ""),
                              kv.get("UnitFileState", ""))
    return out


@dataclass(frozen=True)
class ServiceState:
    name: str
    enabled: str  # systemctl is-enabled output ("enabled", "disabled", "masked", "" if no unit)
    active: str   # systemctl is-active output ("active", "inactive", "failed", …)

    @property
    def exists(self) -> bool:
        return bool(self.enabled) and self.enabled != "not-found"


def parse_services(lines: list[str]) -> dict[str, ServiceState]:
    """Lines ``<unit>|<is-enabled>|<is-active>``."""
    out: dict[str, ServiceState] = {}
    for line in lines:
        parts = line.split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        out[parts[0]] = ServiceState(parts[0], parts[1].strip(), parts[2].strip())
    return out

