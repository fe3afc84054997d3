"""Checks of the gds role: GPUDirect Storage packages pinned and held, nvidia_fs loaded."""

from __future__ import annotations

from gpuctl.checks.api import (
    check_module_loaded,
    check_package_held,
    check_package_pinned,
    for_each,
    modules_of,
    packages_of,
)

ROLE = "gds"


@for_each(packages_of(ROLE))
def test_package_pinned(host, spec, probe, item):
    check_package_pinned(spec, probe, item)


@for_each(packages_of(ROLE))
def test_package_held(host, spec, probe, item):
    check_package_held(spec, probe, item)


@for_each(modules_of(ROLE))
def test_module_loaded(host, spec, probe, item):
    check_module_loaded(spec, probe, item)
