"""Checks of the cudnn role: its packages at the matrix's exact versions, and held."""

from __future__ import annotations

from gpuctl.checks.api import component_checks

ROLE = "cudnn"

globals().update(component_checks(ROLE))  # packages pinned/held, services, modules (declared)
