"""Deploy tier: roles/nvidia_repo — verified key, deb822 source, origin pinning, update only on change."""

from __future__ import annotations

import pytest
from gpu_scenarios import KEY_SHA, converged_files, inventory, responses

from gpuctl.runner.roles import load_role

pytestmark = pytest.mark.deploy
KEY = "/etc/apt/keyrings/gpuctl-nvidia-cuda.pub"


def _repo():
    return load_role("nvidia_repo").install


def test_fresh_ubuntu2204(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    h = fake.run(_repo(), specs, responses=responses("ubuntu2204-fresh"))["gpu-01"]
    assert h.status == "ok", h.error
    cmds = h.execute_commands
    url = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
    dl = [c for c in cmds if c.startswith("mkdir -p /etc/apt/keyrings && curl")]
    assert len(dl) == 1
    assert f"{url}3bf863cc.pub" in dl[0]
    assert f"echo '{KEY_SHA}  {KEY}.gpuctl-download' | sha256sum -c --quiet" in dl[0]
    # the key is dearmored only after its checksum is checked again
    dearmor = [c for c in cmds if "gpg --dearmor" in c]
    assert len(dearmor) == 1 and dearmor[0].startswith(f"echo '{KEY_SHA}  {KEY}' | sha256sum -c --quiet && ")
    assert "/usr/share/keyrings/gpuctl-nvidia-cuda.gpg" in dearmor[0]
    src = h.files["/etc/apt/sources.list.d/gpuctl-nvidia.sources"]
    assert f"URIs: {url}\nSuites: /\nSigned-By: /usr/share/keyrings/gpuctl-nvidia-cuda.gpg\n" in src
    assert "Components" not in src
    pref = h.files["/etc/apt/preferences.d/gpuctl-nvidia"]
    assert 'Pin: origin "developer.download.nvidia.com"\nPin-Priority: 600' in pref
    assert "Pin: release o=Ubuntu\nPin-Priority: -1" in pref and "Pin: release o=Debian\nPin-Priority: -1" in pref
    stanzas = [st for st in pref.split("\n\n")]
    assert all("nvidia-*" in next(ln for ln in st.splitlines() if ln.startswith("Package:")) for st in stanzas)
    # first record: the driver's own version above everything (its unnamed dependencies too)
    first = [ln for ln in stanzas[0].splitlines() if not ln.startswith("#")]
    assert first[1:] == ["Pin: version 580.95.05-*", "Pin-Priority: 1001"]
    # no apt proxy in the inventory: nothing written
    assert "/etc/apt/apt.conf.d/01gpuctl-proxy" not in h.files
    assert cmds[-1] == "DEBIAN_FRONTEND=noninteractive apt-get update -q"
    assert sum("apt-get update" in c for c in cmds) == 1


def test_unverified_key_is_refused(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204", keyring_sha256=None), limit=["gpu-01", "gpu-02"])
    assert specs[0].repo.keyring_sha256 is None
    run = fake.run(_repo(), specs, responses=responses("ubuntu2204-fresh"))
    for node in ("gpu-01", "gpu-02"):
        h = run[node]
        assert h.status == "failed"
        assert "Refuse the unverified signing key" in h.error
        assert not any("curl" in c or "gpg" in c or "apt-get" in c for c in h.commands)
        assert h.files == {}


def test_apt_proxy_and_mirror(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "debian12", mirror="http://10.0.2.2:8080/",
                                 apt_proxy="http://10.0.2.2:3142"), limit=["gpu-01"])
    assert specs[0].repo.origin == "10.0.2.2"
    h = fake.run(_repo(), specs, responses=responses("debian12-fresh"))["gpu-01"]
    assert h.status == "ok", h.error
    proxy = h.files["/etc/apt/apt.conf.d/01gpuctl-proxy"]
    assert 'Acquire::http::Proxy "http://10.0.2.2:3142";' in proxy
    assert 'Acquire::http::Proxy::10.0.2.2 "DIRECT";' in proxy
    assert "URIs: http://10.0.2.2:8080/compute/cuda/repos/debian12/x86_64/" in \
        h.files["/etc/apt/sources.list.d/gpuctl-nvidia.sources"]
    assert 'Pin: origin "10.0.2.2"' in h.files["/etc/apt/preferences.d/gpuctl-nvidia"]


def _converged(fake, specs, scenario):
    first = fake.run(_repo(), specs, responses=responses(scenario))["gpu-01"]
    lines = converged_files(first)
    lines.append(f"{KEY_SHA} 644 {KEY}")  # the downloaded key (curl writes it, not an upload)
    return lines


def test_converged_ubuntu_changes_nothing_and_never_updates(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    files = _converged(fake, specs, "ubuntu2204-fresh")
    h = fake.run(_repo(), specs, responses=responses("ubuntu2204-fresh", files=files, repo=["match", "lists"]))
    h = h["gpu-01"]
    assert h.status == "ok"
    assert h.execute_commands == []
    assert h.changed_ops == []
    assert len(h.prepare_commands) == 2  # files + repo facts


def test_lists_missing_updates_even_without_file_changes(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    files = _converged(fake, specs, "ubuntu2204-fresh")
    h = fake.run(_repo(), specs, responses=responses("ubuntu2204-fresh", files=files, repo=["match"]))["gpu-01"]
    assert h.execute_commands == ["DEBIAN_FRONTEND=noninteractive apt-get update -q"]


def test_tampered_keyring_is_rewritten_from_the_verified_key(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"])
    files = _converged(fake, specs, "ubuntu2204-fresh")
    h = fake.run(_repo(), specs, responses=responses("ubuntu2204-fresh", files=files, repo=["lists"]))["gpu-01"]
    cmds = h.execute_commands
    assert len(cmds) == 2 and "gpg --dearmor" in cmds[0] and "apt-get update" in cmds[1]


def test_rocky9_repo_file_and_makecache(fake, tmp_path):
    specs = fake.specs(inventory(tmp_path, "rhel9"), limit=["gpu-01"])
    h = fake.run(_repo(), specs, responses=responses("rocky9-fresh"))["gpu-01"]
    assert h.status == "ok", h.error
    repo = h.files["/etc/yum.repos.d/gpuctl-nvidia.repo"]
    assert "baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/" in repo
    assert "gpgcheck=1" in repo and "gpgkey=file:///etc/pki/rpm-gpg/gpuctl-nvidia-cuda.pub" in repo
    assert h.execute_commands[-1] == "dnf makecache -y"
    assert any("D42D0685.pub" in c and "sha256sum -c" in c for c in h.execute_commands)
