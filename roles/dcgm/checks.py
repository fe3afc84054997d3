"""Checks of the dcgm role: DCGM packages pinned and held, the host engine running."""

from __future__ import annotations

from gpuctl.checks.api import component_checks

ROLE = "dcgm"

globals().update(component_checks(ROLE))  # packages pinned/held, services, modules (declared)
