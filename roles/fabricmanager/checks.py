"""Checks of the fabricmanager role (NVSwitch SKUs only; the spec skips the role elsewhere):
packages at the driver's exact version and held, the service running, and every GPU's fabric
registration done (State Completed, Status Success — `gpuctl health`'s nvswitch_fabric check)."""

from __future__ import annotations

from gpuctl import healthpolicy
from gpuctl.catalog import load_sku
from gpuctl.checks.api import (
    component_checks,
    judge_health,
)

ROLE = "fabricmanager"

globals().update(component_checks(ROLE))  # packages pinned/held, services, modules (declared)


def test_health_nvswitch_fabric(host, spec, probe):
    """Every GPU's Fabric State Completed and Status Success (`gpuctl.healthpolicy.judge_fabric`,
    which is `gpuctl.verdicts.judge_fabric` as analyze applies it)."""
    judge_health(healthpolicy.judge_fabric(probe.gpus().gpus, load_sku(spec.sku)))
