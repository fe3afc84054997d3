"""Package cache settings per node, and the offline check naming every missing package."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory_text
from gpuctl.mirror import (
    apply_cache,
    check_offline,
    fetch_index,
    missing_packages,
    parse_packages_index,
    via_cache,
)
from gpuctl.paths import inventories_dir
from gpuctl.spec import resolve

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"


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


def test_via_cache_forms():
    assert via_cache("http://deb.example/debian/", "http://10.0.0.1:3142") == "http://10.0.0.1:3142/deb.example/debian/"
    assert (via_cache("https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
                      "http://10.0.0.1:3142")
            == "http://10.0.0.1:3142/HTTPS///developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/")
    with pytest.raises(InputError):
        via_cache("ftp://x/", "http://c:3142")


def test_cache_host_points_other_nodes_at_it():
    loaded = loaded_with("repos: {cache_host: gpu-01, apt_proxy: 'http://10.0.2.2:3128'}\n")
    specs = {s.node: s for s in resolve(loaded)}  # resolve applies the cache
    head, other = specs["gpu-01"], specs["gpu-02"]
    assert head.repo.apt_proxy == "http://10.0.2.2:3128"  # the cache host keeps the upstream
    assert other.repo.apt_proxy == "http://127.0.0.1:3142"
    assert other.repo.url == "http://127.0.0.1:3142/HTTPS///developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
    assert other.repo.keyring_url.startswith("http://127.0.0.1:3142/HTTPS///")
    assert other.repo.origin == "127.0.0.1"
    assert other.repo.keyring_sha256 == head.repo.keyring_sha256  # the key is still verified


def test_no_cache_host_changes_nothing():
    loaded = loaded_with("")
    specs = resolve(loaded)
    assert apply_cache(loaded, specs) == specs


def test_cache_host_must_be_a_node():
    with pytest.raises(InputError, match=r"repos\.cache_host: 'head-01' is not a node"):
        loaded_with("repos: {cache_host: head-01}\n")


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
