"""Checks of the timesync role: the chrony daemon's unit exists, is enabled and is running
(the checks every component's declaration implies: `gpuctl.checks.api.component_checks`)."""

from __future__ import annotations

from gpuctl.checks.api import component_checks

ROLE = "timesync"

globals().update(component_checks(ROLE))
