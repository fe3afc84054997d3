"""systemd unit state: one reading (`systemctl show`, `unit_show_command`) for verify's probe and
the provisioning fact `gpuctl.facts.system.ServiceStates`, one parser, one type. Pure apart from
the command builder."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuctl.shellcmd import sh

PROPERTIES = "Id,LoadState,ActiveState,SubState,UnitFileState"


@dataclass(frozen=True)
class UnitState:
    name: str
    load: str  # LoadState: "loaded", "not-found", "masked"
    active: str  # ActiveState: "active", "inactive", "failed", …
    sub: str  # SubState: "running", "dead", "exited", …
    unit_file: str  # UnitFileState: "enabled", "disabled", "static", "masked", "" when no unit file

    @property
    def enabled(self) -> str:
        """What `systemctl is-enabled` prints ("enabled", "disabled", "static", "" for no unit)."""
        return self.unit_file

    @property
    def exists(self) -> bool:
        return self.load not in ("", "not-found")


def unit_show_command(names: Iterable[str]) -> str:
    """`systemctl show` of the units ('nvidia-dcgm' means nvidia-dcgm.service)."""
    units = [n if "." in n else f"{n}.service" for n in names]
    return sh("systemctl", "show", f"--property={PROPERTIES}", "--", *units)


def parse_systemctl_show(text: str) -> dict[str, UnitState]:
    """`systemctl show --property=Id,LoadState,ActiveState,SubState,UnitFileState UNIT...` (one
    block per unit, blank lines between, Id first) → unit name without '.service' → state."""
    blocks: list[dict[str, str]] = []
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep:
            if blocks and blocks[-1]:
                blocks.append({})
            continue
        if key == "Id" or not blocks:
            blocks.append({})
        blocks[-1].setdefault(key, value)
    out = {}
    for kv in blocks:
        if "Id" not in kv:
            continue
        name = kv["Id"].removesuffix(".service")
        out[name] = UnitState(name, kv.get("LoadState", ""), kv.get("ActiveState", ""), kv.get("SubState", ""),
                              kv.get("UnitFileState", ""))
    return out
