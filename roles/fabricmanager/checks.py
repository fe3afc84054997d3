"""Checks of the fabricmanager role (NVSwitch SKUs only; the spec skips the role elsewhere):
packages at the driver's exact version and held, the service running, and every GPU's fabric
registration done (State Completed, Status Success — `gpuctl health`'s nvswitch_fabric check)."""

from __future__ import annotations

from gpuctl import healthpolicy
from gpuctl.catalog import load_sku
from gpuctl.checks.api import (
    check_package_held,
    check_package_pinned,
    check_service_active,
    for_each,
    judge_health,
    packages_of,
    services_of,
)

ROLE = "fabricmanager"


@for_each(packages_of(ROLE))
def test_package_pinned(host, spec, probe, item):
    check_package_pinned(spec, probe, item)


@for_each(packages_of(ROLE))
def test_package_held(host, spec, probe, item):
    check_package_held(spec, probe, item)


@for_each(services_of(ROLE))
def test_service_active(host, spec, probe, item):
    check_service_active(spec, probe, item)


def test_health_nvswitch_fabric(host, spec, probe):
    """Every GPU's Fabric State Completed and Status Success (`gpuctl.healthpolicy.judge_fabric`,
    which is `gpuctl.verdicts.judge_fabric` as analyze applies it)."""
    judge_health(healthpolicy.judge_fabric(probe.gpus().gpus, load_sku(spec.sku)))
