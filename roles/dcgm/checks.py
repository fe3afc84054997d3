"""Checks of the dcgm role: DCGM packages pinned and held, the host engine running."""

from __future__ import annotations

from gpuctl.checks.api import (
    check_package_held,
    check_package_pinned,
    check_service_active,
    for_each,
    packages_of,
    services_of,
)

ROLE = "dcgm"


@for_each(packages_of(ROLE))
def test_package_pinned(host, spec, probe, item):
    check_package_pinned(spec, probe, item)


@for_each(packages_of(ROLE))
def test_package_held(host, spec, probe, item):
    check_package_held(spec, probe, item)


@for_each(services_of(ROLE))
def test_service_active(host, spec, probe, item):
    check_service_active(spec, probe, item)
