"""Issue 17 item 5: on the nodes, a file that holds a credential (a mirror or apt proxy URL
with a password) is not world-readable: the apt proxy drop-in, the deb822 source and the dnf
.repo file 0600 root:root, apt-cacher-ng's drop-in 0640 root:apt-cacher-ng (its service reads
it as that group). Files without a credential keep 0644. A converged file with the right
content but a world-readable mode is chmodded (hosts provisioned before this change)."""

from __future__ import annotations

import hashlib
import re

import pytest
from gpu_scenarios import converged_files, inventory, responses
from test_role_package_mirror import CONF, cache_host_spec

from gpuctl.rolerun import load_delivery_role
from gpuctl.runner.roles import load_role

pytestmark = pytest.mark.deploy

MIRROR = "http://alice:p@ss:w0rd@10.0.2.2:8080/"
PROXY = "http://px:pr@xy@10.0.2.2:3142"
PROXY_FILE = "/etc/apt/apt.conf.d/01gpuctl-proxy"
SOURCES = "/etc/apt/sources.list.d/gpuctl-nvidia.sources"
DNF_REPO = "/etc/yum.repos.d/gpuctl-nvidia.repo"


def _modes(h) -> dict[str, tuple[str, str]]:
    """{path: (owner, mode)} from the chown/chmod commands run on a fake host."""
    out: dict[str, tuple[str, str]] = {}
    for cmd in h.commands:
        m = re.search(r"chown (\S+) (\S+) && chmod (\d{3,4}) \S+$", cmd)
        if m:
            out[m.group(2).strip("'")] = (m.group(1), m.group(3).lstrip("0"))
    return out


def _repo():
    return load_role("nvidia_repo").install


def test_apt_files_with_credentials_are_0600_root(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "debian12", mirror=MIRROR, apt_proxy=PROXY), limit=["gpu-01"])
    h = fake.run(_repo(), specs, responses=responses("debian12-fresh"))["gpu-01"]
    assert h.status == "ok", h.error
    assert PROXY in h.files[PROXY_FILE] and "p@ss:w0rd" in h.files[SOURCES]
    modes = _modes(h)
    assert modes[PROXY_FILE] == ("root:root", "600")
    assert modes[SOURCES] == ("root:root", "600")
    assert modes["/etc/apt/preferences.d/gpuctl-nvidia"] == ("root:root", "644")  # no credential


def test_apt_files_without_credentials_stay_0644(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "debian12", mirror="http://10.0.2.2:8080/",
                                 apt_proxy="http://10.0.2.2:3142"), limit=["gpu-01"])
    h = fake.run(_repo(), specs, responses=responses("debian12-fresh"))["gpu-01"]
    modes = _modes(h)
    assert modes[PROXY_FILE] == ("root:root", "644") and modes[SOURCES] == ("root:root", "644")


def test_world_readable_credential_file_is_chmodded_when_converged(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "debian12", mirror=MIRROR, apt_proxy=PROXY), limit=["gpu-01"])
    first = fake.run(_repo(), specs, responses=responses("debian12-fresh"))["gpu-01"]
    lines = [re.sub(r" 600 ", " 644 ", ln) for ln in converged_files(first)]  # as written before
    h = fake.run(_repo(), specs, responses=responses("debian12-fresh", files=lines, repo=["match", "lists"]))
    cmds = h["gpu-01"].execute_commands
    assert f"chmod 600 {PROXY_FILE}" in cmds and f"chmod 600 {SOURCES}" in cmds


def test_dnf_repo_file_with_credentials_is_0600_root(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "rhel9", mirror=MIRROR), limit=["gpu-01"])
    h = fake.run(_repo(), specs, responses=responses("rocky9-fresh"))["gpu-01"]
    assert h.status == "ok", h.error
    assert "p@ss:w0rd" in h.files[DNF_REPO]
    assert _modes(h)[DNF_REPO] == ("root:root", "600")


def test_cache_drop_in_with_proxy_credentials_is_0640_for_apt_cacher_ng(fake):
    spec = cache_host_spec(f"repos: {{cache_host: gpu-01, cache_address: 10.100.0.11, apt_proxy: '{PROXY}'}}\n")
    h = fake.run(load_delivery_role("package_mirror").install, [spec])["gpu-01"]
    assert h.status == "ok", h.error
    assert f"Proxy: {PROXY}" in h.files[CONF]
    assert _modes(h)[CONF] == ("root:apt-cacher-ng", "640")


def test_cache_drop_in_without_credentials_stays_0644(fake):
    h = fake.run(load_delivery_role("package_mirror").install, [cache_host_spec()])["gpu-01"]
    assert _modes(h)[CONF] == ("root:root", "644")


def test_cache_drop_in_world_readable_is_fixed_when_converged(fake):
    spec = cache_host_spec(f"repos: {{cache_host: gpu-01, cache_address: 10.100.0.11, apt_proxy: '{PROXY}'}}\n")
    first = fake.run(load_delivery_role("package_mirror").install, [spec])["gpu-01"]
    digest = hashlib.sha256(first.files[CONF].encode()).hexdigest()
    h = fake.run(load_delivery_role("package_mirror").install, [spec], responses={
        "dpkg-query -W": "apt-cacher-ng install ok installed",
        re.compile(r"for f in .*gpuctl\.conf"): f"{digest} 644 {CONF}",
        "--property SubState": ["Id=apt-cacher-ng.service", "SubState=running"],
        "--property UnitFileState": ["Id=apt-cacher-ng.service", "UnitFileState=enabled"],
    })["gpu-01"]
    assert CONF not in h.files  # content unchanged: not uploaded again
    assert f"chown root:apt-cacher-ng {CONF} && chmod 640 {CONF}" in h.execute_commands
