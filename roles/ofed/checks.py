"""Checks of the ofed role: its packages at the matrix's exact versions, and held."""

from __future__ import annotations

from gpuctl.checks.api import check_package_held, check_package_pinned, for_each, packages_of

ROLE = "ofed"


@for_each(packages_of(ROLE))
def test_package_pinned(host, spec, probe, item):
    check_package_pinned(spec, probe, item)


@for_each(packages_of(ROLE))
def test_package_held(host, spec, probe, item):
    check_package_held(spec, probe, item)
