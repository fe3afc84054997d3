"""What the network role writes is what the lock hashes, wherever the inventory's knobs put it
(issue 18: the lock hashed each managed file at its default path, so `network_nccl_conf` and the
other path knobs moved the real file out of `gpuctl lock` / `drift`)."""

from __future__ import annotations

from typing import Any

import pytest
import test_role_network as network

from gpuctl.deploy_context import RunOptions
from gpuctl.lock.managed import in_glob, managed_files
from gpuctl.runner.roles import load_role

pytestmark = pytest.mark.deploy

SITE = {"network_nccl_conf": "/etc/gpuctl/nccl.conf", "network_modules_file": "/etc/modules-load.d/site-net.conf",
        "network_ifupdown_prefix": "site-"}


def _hashed(path: str, patterns: list[str]) -> bool:
    return any(in_glob(path, p) for p in patterns)


def _written(fake: Any, **role_vars: Any) -> tuple[set[str], list[str]]:
    sp = [s.model_copy(update={"role_vars": {**s.role_vars, **role_vars}}) for s in network.specs(fake)]
    h = fake.run(load_role("network").install, sp, responses=network.fresh())[sp[0].node]
    assert h.status == "ok", h.error
    return set(h.files), managed_files(sp[0])


def test_every_file_the_role_writes_stays_in_the_lock_when_its_path_is_overridden(fake: Any) -> None:
    files, lock = _written(fake)
    hashed = {f for f in files if _hashed(f, lock)}
    assert "/etc/nccl.conf" in hashed and "/etc/network/interfaces.d/gpuctl-eth1" in hashed
    site_files, site_lock = _written(fake, **SITE)
    assert "/etc/gpuctl/nccl.conf" in site_files and "/etc/network/interfaces.d/site-eth1" in site_files
    left_out = sorted(f for f in site_files if not _hashed(f, site_lock))
    assert len(left_out) == len(files - hashed), f"written but not hashed by the lock: {left_out}"


def test_a_file_knob_from_extra_is_refused(fake: Any) -> None:
    """--extra reaches install only: a path there would move the file away from verify and the lock."""
    h = fake.run(load_role("network").install, network.specs(fake), responses=network.fresh(),
                 options=RunOptions(extra={"network_nccl_conf": "/etc/gpuctl/nccl.conf"}), dry=True)["gpu-01"]
    assert h.status != "ok" and "role_vars" in h.error, h.error
