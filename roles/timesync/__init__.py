"""timesync: the clock kept in sync by chrony (installed, enabled, running) — Lustre, Slurm,
Kerberos and the run records' timestamps across nodes all assume synchronised clocks.
Off by default (role_vars `timesync_enabled: true` turns it on)."""

from gpuctl.components import Component, Service
from gpuctl.knobs import PACKAGE, UNIT


def _applies(w):
    return "" if w.knob("timesync_enabled") is True else "role_vars.timesync_enabled is not true"


COMPONENT = Component(
    name="timesync", order=15,
    summary="clock synchronisation (chrony)",
    services=(Service(knob="timesync_service"),),
    applies=_applies,
    container="shares the host kernel's clock; chronyd cannot set it",
    knobs={"timesync_packages": PACKAGE, "timesync_service": UNIT},
)
