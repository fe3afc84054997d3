"""Checks of the gds role: GPUDirect Storage packages pinned and held, nvidia_fs loaded."""

from __future__ import annotations

from gpuctl.checks.api import component_checks

ROLE = "gds"

globals().update(component_checks(ROLE))  # packages pinned/held, services, modules (declared)
