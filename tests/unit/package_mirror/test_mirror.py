"""Package cache settings per node, and the offline check naming every missing package."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory_text
from gpuctl.mirror import (
    cache_spec,
    check_offline,
    fetch_index,
    missing_packages,
    parse_packages_index,
)
from gpuctl.paths import inventories_dir
from gpuctl.repocache import apply_cache, user_ports, via_cache
from gpuctl.spec import resolve

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[2] / "data" / "inventories" / "lab-placeholder.yaml"


def loaded_with(repos: str):
    text = (LAB_INVENTORY).read_text() + repos
    return load_inventory_text(text, "inv.yaml", inventories_dir())


def index_for(specs, drop: tuple[str, ...] = (), other_version: dict[str, str] | None = None) -> str:
    stanzas = []
    for p in {p.name: p for s in specs for p in s.all_packages()}.values():
        if p.name in drop:
            continue
        version = (other_version or {}).get(p.name, p.version)
        stanzas.append(f"Package: {p.name}\nVersion: {version}\nArchitecture: amd64\nFilename: ./{p.name}.deb\n")
    return "\n".join(stanzas)


NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
# the lab's nodes are 127.0.0.1 to gpuctl (forwarded SSH ports); they reach each other on the VLAN
VLAN = "repos: {cache_host: gpu-01, cache_address: 10.100.0.11, apt_proxy: 'http://10.0.2.2:3128'}\n"


def test_via_cache_forms():
    assert via_cache("http://deb.example/debian/", "http://10.0.0.1:3142") == "http://10.0.0.1:3142/deb.example/debian/"
    assert (via_cache(NVIDIA, "http://10.0.0.1:3142")
            == "http://10.0.0.1:3142/HTTPS///developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/")
    with pytest.raises(InputError):
        via_cache("ftp://x/", "http://c:3142")


def test_via_cache_keeps_the_upstream_port_in_the_host_part():
    # apt-cacher-ng reads http://cache:3142/<host>:<port>/<path> (and checks <port> against AllowUserPorts)
    assert (via_cache("http://10.0.2.2:43211/debian12/x86_64/", "http://10.100.0.11:3142")
            == "http://10.100.0.11:3142/10.0.2.2:43211/debian12/x86_64/")
    assert (via_cache("https://mirror.example:8443/cuda/", "http://c:3142/")
            == "http://c:3142/HTTPS///mirror.example:8443/cuda/")


def test_other_nodes_fetch_through_the_cache_address():
    specs = {s.node: s for s in resolve(loaded_with(VLAN))}  # resolve applies the cache
    other = specs["gpu-02"]
    assert other.repo.apt_proxy == "http://10.100.0.11:3142"
    assert other.repo.url == "http://10.100.0.11:3142/HTTPS///developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
    assert other.repo.keyring_url.startswith("http://10.100.0.11:3142/HTTPS///")
    assert other.repo.origin == "10.100.0.11"
    assert other.repo.keyring_sha256 == cache_spec(loaded_with(VLAN)).repo.keyring_sha256  # still verified


def test_the_cache_node_fetches_through_its_own_cache():
    # its installs fill the cache: with 2 nodes the uplink carries each .deb once, not twice
    head = {s.node: s for s in resolve(loaded_with(VLAN))}["gpu-01"]
    assert head.repo.apt_proxy == "http://127.0.0.1:3142"
    assert head.repo.url == "http://127.0.0.1:3142/HTTPS///developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
    assert head.repo.keyring_url.startswith("http://127.0.0.1:3142/HTTPS///")
    assert head.repo.origin == "127.0.0.1"


def test_cache_address_defaults_to_the_cache_hosts_address():
    text = LAB_INVENTORY.read_text().replace("address: 127.0.0.1, ssh_port: 22201", "address: 10.0.0.11")
    loaded = load_inventory_text(text + "repos: {cache_host: gpu-01}\n", "inv.yaml", inventories_dir())
    other = {s.node: s for s in resolve(loaded)}["gpu-02"]
    assert other.repo.apt_proxy == "http://10.0.0.11:3142" and other.repo.origin == "10.0.0.11"


def test_cache_port_from_role_vars():
    text = LAB_INVENTORY.read_text().replace("role_vars:\n", "role_vars:\n  package_mirror_port: 3999\n")
    loaded = load_inventory_text(text + VLAN, "inv.yaml", inventories_dir())
    specs = {s.node: s for s in resolve(loaded)}
    assert specs["gpu-02"].repo.apt_proxy == "http://10.100.0.11:3999"
    assert specs["gpu-01"].repo.apt_proxy == "http://127.0.0.1:3999"


def test_mirror_up_installs_the_cache_with_upstream_settings():
    # the cache does not exist yet when roles/package_mirror runs: its spec must not point at it
    spec = cache_spec(loaded_with(VLAN))
    assert spec.node == "gpu-01"
    assert spec.repo.apt_proxy == "http://10.0.2.2:3128"
    assert spec.repo.url == NVIDIA and spec.repo.origin == "developer.download.nvidia.com"
    assert cache_spec(loaded_with("")) is None


def test_mirror_up_runs_the_role_with_the_upstream_spec(monkeypatch):
    import gpuctl.rolerun
    from gpuctl.mirror import mirror_up

    seen = []

    def fake_run_deploy(loaded, specs, deploy, **kw):
        seen.extend(specs)
        return gpuctl.rolerun.DeployRun(command="mirror")

    monkeypatch.setattr(gpuctl.rolerun, "run_deploy", fake_run_deploy)
    mirror_up(loaded_with(VLAN))
    assert [s.node for s in seen] == ["gpu-01"]
    assert seen[0].repo.apt_proxy == "http://10.0.2.2:3128" and seen[0].repo.url == NVIDIA


def test_cache_with_an_upstream_proxy_port_apt_cacher_ng_misreads_is_an_inventory_error():
    from gpuctl.errors import InputError

    with pytest.raises(InputError, match=r"inv\.yaml:\d+: repos\.apt_proxy: port 42655: .* at most 32767"):
        loaded_with(VLAN.replace("http://10.0.2.2:3128", "http://10.0.2.2:42655"))
    # without a cache host the port means nothing to apt-cacher-ng
    loaded_with("repos: {apt_proxy: 'http://10.0.2.2:42655'}\n")


def test_no_cache_host_changes_nothing():
    loaded = loaded_with("")
    specs = resolve(loaded)
    assert apply_cache(loaded, specs) == specs


def test_file_repositories_are_not_cached():
    specs = {s.node: s for s in resolve(loaded_with(
        "repos: {cache_host: gpu-01, cache_address: 10.100.0.11, mirror: 'file:///srv/nvidia'}\n"))}
    assert specs["gpu-02"].repo.url.startswith("file:///srv/nvidia/") and specs["gpu-02"].repo.apt_proxy is None


def test_cache_host_must_be_a_node():
    with pytest.raises(InputError, match=r"repos\.cache_host: 'head-01' is not a node"):
        loaded_with("repos: {cache_host: head-01}\n")


def test_cache_address_needs_a_cache_host():
    with pytest.raises(InputError) as exc:
        loaded_with("repos: {cache_address: 10.100.0.11}\n")
    line = len(LAB_INVENTORY.read_text().splitlines()) + 1
    assert f"inv.yaml:{line}: repos.cache_address: only means something with repos.cache_host" in str(exc.value)


@pytest.mark.parametrize("bad", ["http://10.100.0.11:3142", "10.100.0.11:3142", "cache host", "-bad-", "a/b"])
def test_cache_address_must_be_an_address_or_host_name(bad):
    with pytest.raises(InputError, match=r"repos\.cache_address: must be an IP address or a host name"):
        loaded_with(f"repos: {{cache_host: gpu-01, cache_address: '{bad}'}}\n")


@pytest.mark.parametrize("good", ["10.100.0.11", "cache-01.cluster.internal", "fd00::11"])
def test_cache_address_accepts_addresses_and_host_names(good):
    loaded = loaded_with(f"repos: {{cache_host: gpu-01, cache_address: '{good}'}}\n")
    other = {s.node: s for s in resolve(loaded)}["gpu-02"]
    expected = f"[{good}]" if ":" in good else good
    assert other.repo.apt_proxy == f"http://{expected}:3142"


def test_a_loopback_cache_host_needs_a_cache_address():
    # gpu-01 is 127.0.0.1 to gpuctl (a forwarded port): gpu-02 cannot reach the cache there
    with pytest.raises(InputError, match=r"repos\.cache_host: 'gpu-01' has the address 127\.0\.0\.1.*cache_address"):
        loaded_with("repos: {cache_host: gpu-01}\n")


def test_allow_user_ports_for_the_nvidia_repository():
    https = cache_spec(loaded_with(VLAN)).repo
    assert user_ports(https) == [80, 443]
    lab = cache_spec(loaded_with("repos: {cache_host: gpu-01, cache_address: 10.100.0.11, "
                                 "mirror: 'http://10.0.2.2:43211/'}\n")).repo
    assert user_ports(lab) == [80, 43211]
    plain = cache_spec(loaded_with("repos: {cache_host: gpu-01, cache_address: 10.100.0.11, "
                                   "mirror: 'http://mirror/'}\n")).repo
    assert user_ports(plain, always=[80]) == [80]


def test_parse_packages_index():
    text = "Package: a\nVersion: 1-1\n\nPackage: a\nVersion: 2-1\n\nPackage: b\nVersion: 1:3.0-1\n"
    assert parse_packages_index(text) == {"a": {"1-1", "2-1"}, "b": {"1:3.0-1"}}


def test_offline_names_every_missing_package():
    specs = resolve(loaded_with("repos: {offline: true, mirror: 'http://10.0.0.5/nvidia'}\n"))
    cuda = specs[0].components["cuda"].packages[0]
    nccl = specs[0].components["nccl"].packages[0]
    index = parse_packages_index(index_for(specs, drop=(cuda.name,), other_version={nccl.name: "2.0.0-1+cuda13.0"}))
    report = missing_packages(specs, index, "http://10.0.0.5/nvidia")
    names = [m["package"] for m in report.missing]
    assert names == sorted([cuda.name, nccl.name])
    with pytest.raises(InputError) as exc:
        check_offline(specs, index)
    msg = str(exc.value)
    assert "lacks 2 of the" in msg and "nothing was installed" in msg
    assert f"{cuda.name}={cuda.version} (needed by gpu-01, gpu-02; the mirror has no version at all)" in msg
    assert f"{nccl.name}={nccl.version}" in msg and "the mirror has 2.0.0-1+cuda13.0" in msg


def test_offline_complete_mirror_passes():
    specs = resolve(loaded_with("repos: {offline: true}\n"))
    report = check_offline(specs, parse_packages_index(index_for(specs)))
    assert report.ok and report.checked == len({(p.name, p.version) for p in specs[0].all_packages()})


def test_fetch_index_from_a_file_mirror(tmp_path):
    specs = resolve(loaded_with(""))
    (tmp_path / "Packages.gz").write_bytes(gzip.compress(index_for(specs, drop=("libnccl2",)).encode()))
    index = fetch_index(tmp_path.as_uri())
    assert "libnccl2" not in index and "cuda-toolkit-13-0" in index
    with pytest.raises(Exception, match="cannot read the mirror's package index"):
        fetch_index((tmp_path / "nope").as_uri())


def test_cli_mirror_check(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from gpuctl.cli.main import main

    specs = resolve(loaded_with(""))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "Packages").write_text(index_for(specs, drop=("libnccl-dev",)))
    inv = tmp_path / "inv.yaml"
    inv.write_text((LAB_INVENTORY).read_text()
                   + f"repos: {{offline: true, mirror: '{repo.as_uri()}'}}\n")
    monkeypatch.setattr("gpuctl.mirror.fetch_index",
                        lambda url, timeout_s=30: parse_packages_index((repo / "Packages").read_text()))
    r = CliRunner().invoke(main, ["mirror", "check", str(inv), "--json"])
    assert r.exit_code == 1, r.output
    data = json.loads(r.output)
    assert [m["package"] for m in data["missing"]] == ["libnccl-dev"]
