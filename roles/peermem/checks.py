"""Checks of the peermem role: the nvidia_peermem module (GPUDirect RDMA) is loaded."""

from __future__ import annotations

from gpuctl.checks.api import component_checks

ROLE = "peermem"

globals().update(component_checks(ROLE))  # packages pinned/held, services, modules (declared)
