"""Checks of the peermem role: the nvidia_peermem module (GPUDirect RDMA) is loaded."""

from __future__ import annotations

from gpuctl.checks.api import check_module_loaded, for_each, modules_of

ROLE = "peermem"


@for_each(modules_of(ROLE))
def test_module_loaded(host, spec, probe, item):
    check_module_loaded(spec, probe, item)
