"""roles/package_mirror with package_mirror_wheels: the cache host serves the training
environment's wheelhouse (python3 -m http.server on its folder) as a unit; converged: no change;
off (the default): none of it."""

from __future__ import annotations

import hashlib
import re

import pytest
from test_role_package_mirror import CONF, cache_host_spec

from gpuctl.rolerun import load_delivery_role

pytestmark = pytest.mark.deploy
UNIT = "/etc/systemd/system/gpuctl-wheels.service"
ON = "  package_mirror_wheels: true\n"


def test_fresh_cache_host_serves_the_wheelhouse(fake):
    h = fake.run(load_delivery_role("package_mirror").install, [cache_host_spec(role_vars=ON)])["gpu-01"]
    assert h.status == "ok", h.error
    assert ("ExecStart=/usr/bin/python3 -m http.server 3143 --bind 0.0.0.0 --directory /var/cache/gpuctl-wheels"
            in h.files[UNIT])
    assert any(c.startswith("mkdir -p /var/cache/gpuctl-wheels/simple") for c in h.execute_commands)
    assert any("apt-get" in c and c.endswith(" python3") for c in h.execute_commands)
    assert h.op("Reload systemd units").status == "changed"
    assert h.op("Restart gpuctl-wheels after its unit changed").status == "changed"


def test_converged_wheelhouse_changes_nothing(fake):
    spec = cache_host_spec(role_vars=ON)
    first = fake.run(load_delivery_role("package_mirror").install, [spec])["gpu-01"]
    conf, unit = (hashlib.sha256(first.files[p].encode()).hexdigest() for p in (CONF, UNIT))
    h = fake.run(load_delivery_role("package_mirror").install, [spec], responses={
        "dpkg-query -W": "apt-cacher-ng\t3.7.4-1\tinstall ok installed",  # the shared listing (DPKG_QUERY)
        re.compile(r"for f in .*gpuctl\.conf"): f"{conf} 644 {CONF}",  # FileStates: sha256, mode, path
        re.compile(r"for f in .*gpuctl-wheels\.service"): f"{unit} 644 {UNIT}",
        ": gpuctl-fact commands;": ["/var/cache/gpuctl-wheels/simple=/var/cache/gpuctl-wheels/simple",
                                    "/usr/bin/python3=/usr/bin/python3"],
        "--property SubState": ["Id=apt-cacher-ng.service", "SubState=running", "Id=gpuctl-wheels.service",
                                "SubState=running"],
        "--property UnitFileState": ["Id=apt-cacher-ng.service", "UnitFileState=enabled",
                                     "Id=gpuctl-wheels.service", "UnitFileState=enabled"],
    })["gpu-01"]
    assert h.status == "ok", h.error
    assert h.changed_ops == [] and not h.files


def test_off_by_default(fake):
    h = fake.run(load_delivery_role("package_mirror").install, [cache_host_spec()])["gpu-01"]
    assert UNIT not in h.files and not any("gpuctl-wheels" in c for c in h.commands)
