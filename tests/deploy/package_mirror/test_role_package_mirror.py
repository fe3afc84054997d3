"""roles/package_mirror on @fake hosts: apt-cacher-ng installed through the upstream proxy,
its drop-in written (AllowUserPorts with the NVIDIA repository's port), restarted only when
the drop-in changed; converged host: no changes."""

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
LAB_INVENTORY = Path(__file__).resolve().parents[2] / "data" / "inventories" / "lab-placeholder.yaml"
CONF = "/etc/apt-cacher-ng/gpuctl.conf"

pytestmark = pytest.mark.deploy


def cache_host_spec(repos: str = "repos: {cache_host: gpu-01, cache_address: 10.100.0.11, "
                                 "apt_proxy: 'http://10.0.2.2:3128'}\n", role_vars: str = ""):
    text = LAB_INVENTORY.read_text().replace("role_vars:\n", "role_vars:\n" + role_vars)
    loaded = load_inventory_text(text + repos, "inv.yaml", inventories_dir())
    return cache_spec(loaded)


def conf_lines(conf: str) -> dict[str, str]:
    pairs = (ln.partition(":") for ln in conf.splitlines() if ln and not ln.startswith("#"))
    return {k.strip(): v.strip() for k, _, v in pairs}


def test_fresh_cache_host(fake):
    spec = cache_host_spec()
    run = fake.run(load_delivery_role("package_mirror").install, [spec])
    h = run["gpu-01"]
    assert h.status == "ok", h.error
    install = next(c for c in h.execute_commands if "apt-get" in c and "install" in c)
    assert "Acquire::http::Proxy=http://10.0.2.2:3128" in install and "apt-cacher-ng" in install
    conf = h.files[CONF]
    assert "Port: 3142" in conf and "Proxy: http://10.0.2.2:3128" in conf and "BindAddress: 0.0.0.0" in conf
    assert h.op("Restart apt-cacher-ng after its configuration changed").status == "changed"


def test_allow_user_ports_include_the_nvidia_repository_port(fake):
    # apt-cacher-ng refuses upstream ports other than 80 unless AllowUserPorts lists them
    # (space-separated: a comma is a fatal "Bad port in AllowUserPorts")
    spec = cache_host_spec("repos: {cache_host: gpu-01, cache_address: 10.100.0.11, apt_proxy: 'http://10.0.2.2:3128', "
                           "mirror: 'http://10.0.2.2:43211/'}\n")
    conf = fake.run(load_delivery_role("package_mirror").install, [spec])["gpu-01"].files[CONF]
    assert conf_lines(conf)["AllowUserPorts"] == "80 43211"
    https = fake.run(load_delivery_role("package_mirror").install, [cache_host_spec()])["gpu-01"].files[CONF]
    assert conf_lines(https)["AllowUserPorts"] == "80 443"


def test_allow_user_ports_from_role_vars(fake):
    spec = cache_host_spec(role_vars="  package_mirror_user_ports: ['80', '8080']\n")
    conf = fake.run(load_delivery_role("package_mirror").install, [spec])["gpu-01"].files[CONF]
    assert conf_lines(conf)["AllowUserPorts"] == "80 443 8080"


def test_converged_cache_host_changes_nothing(fake):
    spec = cache_host_spec()
    first = fake.run(load_delivery_role("package_mirror").install, [spec])
    conf = first["gpu-01"].files[CONF]
    digest = hashlib.sha256(conf.encode()).hexdigest()
    run = fake.run(load_delivery_role("package_mirror").install, [spec], responses={
        "dpkg-query -W": "apt-cacher-ng\t3.7.4-1\tinstall ok installed",  # the shared listing (DPKG_QUERY)
        re.compile(r"for f in .*gpuctl\.conf"): f"{digest} 644 {CONF}",  # FileStates: sha256, mode, path
        "--property SubState": ["Id=apt-cacher-ng.service", "SubState=running"],
        "--property UnitFileState": ["Id=apt-cacher-ng.service", "UnitFileState=enabled"],
    })
    h = run["gpu-01"]
    assert h.status == "ok", h.error
    assert not any("apt-get" in c for c in h.execute_commands)
    assert CONF not in h.files
    assert not any(re.search(r"systemctl (re)?start", c) for c in h.commands)
    assert h.changed_ops == []


def test_no_upstream_proxy(fake):
    spec = cache_host_spec("repos: {cache_host: gpu-02, cache_address: 10.100.0.12}\n")
    run = fake.run(load_delivery_role("package_mirror").install, [spec])
    h = run["gpu-02"]
    conf = h.files[CONF]
    assert "Proxy:" not in conf
    assert not any("Acquire::http::Proxy" in c for c in h.commands)


def test_installed_packages_come_from_the_shared_dpkg_reader(fake):
    """The role read its own inline `dpkg-query` (issue 18): it now takes the provisioning fact's
    listing (`gpuctl.parsers.packages.DPKG_QUERY`, parsed by `parse_dpkg`), like every other role."""
    from gpuctl.parsers.packages import DPKG_QUERY

    h = fake.run(load_delivery_role("package_mirror").install, [cache_host_spec()])["gpu-01"]
    assert h.status == "ok", h.error
    assert any(DPKG_QUERY in c for c in h.commands)
    assert not any("${Package} ${Status}" in c for c in h.commands)


@pytest.mark.parametrize("knob", ["package_mirror_user_ports", "package_mirror_port", "package_mirror_expire_days"])
def test_a_port_or_count_that_is_no_whole_number_is_refused_naming_its_field(fake, knob):
    """A value that skipped validation (the injection walk's by-construction check) is refused with
    its field named; it died in the role's bare int() with `ValueError: invalid literal`."""
    spec = cache_host_spec()
    bad = ["80", "80\nPWN"] if knob == "package_mirror_user_ports" else "3142\nPWN"
    spec = spec.model_copy(update={"role_vars": {**spec.role_vars, knob: bad}})
    h = fake.run(load_delivery_role("package_mirror").install, [spec])["gpu-01"]
    assert h.status != "ok" and knob in h.error and "refusing" in h.error, h.error
    assert "invalid literal" not in h.error and CONF not in h.files
