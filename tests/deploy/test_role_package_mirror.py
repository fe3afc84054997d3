"""roles/package_mirror on @fake hosts: apt-cacher-ng installed through the upstream proxy,
its drop-in written, restarted only when the drop-in changed; converged host: no changes."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from gpuctl.inventory import load_inventory_text
from gpuctl.mirror import cache_spec
from gpuctl.paths import inventories_dir
from gpuctl.rolerun import load_delivery_role

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"

pytestmark = pytest.mark.deploy


def cache_host_spec(repos: str = "repos: {cache_host: gpu-01, apt_proxy: 'http://10.0.2.2:3128'}\n"):
    loaded = load_inventory_text((LAB_INVENTORY).read_text() + repos, "inv.yaml", inventories_dir())
    return cache_spec(loaded, [])


def test_fresh_cache_host(fake):
    spec = cache_host_spec()
    run = fake.run(load_delivery_role("package_mirror").install, [spec])
    h = run["gpu-01"]
    assert h.status == "ok", h.error
    install = next(c for c in h.execute_commands if "apt-get" in c and "install" in c)
    assert "Acquire::http::Proxy=http://10.0.2.2:3128" in install and "apt-cacher-ng" in install
    conf = h.files["/etc/apt-cacher-ng/gpuctl.conf"]
    assert "Port: 3142" in conf and "Proxy: http://10.0.2.2:3128" in conf and "BindAddress: 0.0.0.0" in conf
    assert h.op("Restart apt-cacher-ng after its configuration changed").status == "changed"


def test_converged_cache_host_changes_nothing(fake):
    spec = cache_host_spec()
    first = fake.run(load_delivery_role("package_mirror").install, [spec])
    conf = first["gpu-01"].files["/etc/apt-cacher-ng/gpuctl.conf"]
    digest = hashlib.sha256(conf.encode()).hexdigest()
    run = fake.run(load_delivery_role("package_mirror").install, [spec], responses={
        "dpkg-query -W": "apt-cacher-ng install ok installed",
        re.compile(r"sha256sum .*gpuctl\.conf"): f"{digest}  /etc/apt-cacher-ng/gpuctl.conf",
        "--property SubState": ["Id=apt-cacher-ng.service", "SubState=running"],
        "--property UnitFileState": ["Id=apt-cacher-ng.service", "UnitFileState=enabled"],
    })
    h = run["gpu-01"]
    assert h.status == "ok", h.error
    assert not any("apt-get" in c for c in h.execute_commands)
    assert "/etc/apt-cacher-ng/gpuctl.conf" not in h.files
    assert not any(re.search(r"systemctl (re)?start", c) for c in h.commands)
    assert h.changed_ops == []


def test_no_upstream_proxy(fake):
    spec = cache_host_spec("repos: {cache_host: gpu-02}\n")
    run = fake.run(load_delivery_role("package_mirror").install, [spec])
    h = run["gpu-02"]
    assert "Proxy:" not in h.files["/etc/apt-cacher-ng/gpuctl.conf"]
    assert not any("Acquire::http::Proxy" in c for c in h.commands)
