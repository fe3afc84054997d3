"""Container lab nodes: planning (names, addresses, command lines, overlay, netns,
cgroups, per-node files), state round trip, the inventory they produce and how the
spec turns it into "not applicable in this node kind" — no root, no containers."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest

from gpuctl.components import container_reasons
from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory
from gpuctl.lab import containers as c
from gpuctl.lab.state import ProcessRecord
from gpuctl.spec import ROLE_ORDER, resolve

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"


def test_layout_names_and_addresses_are_unique_private_and_short(tmp_path: Path) -> None:
    layouts = [c.ContainerLayout(i, tmp_path) for i in range(1, c.MAX_NODES + 1)]
    addresses = [ipaddress.IPv4Address(x.address) for x in layouts]
    assert len(set(addresses)) == c.MAX_NODES
    assert all(a in c.NETWORK for a in addresses)
    assert ipaddress.IPv4Address(c.HOST_ADDRESS) not in addresses
    assert layouts[0].address == "10.251.1.1" and layouts[63].address == "10.251.1.64"
    assert layouts[0].name == "gpu-01" and layouts[63].name == "gpu-64"
    assert all(len(x.veth) <= 15 for x in layouts)  # IFNAMSIZ
    assert len({x.veth for x in layouts}) == len({x.netns for x in layouts}) == c.MAX_NODES
    assert layouts[4].merged == tmp_path / "nodes" / "gpu-05" / "root"


@pytest.mark.parametrize("index", [0, c.MAX_NODES + 1])
def test_layout_rejects_out_of_range(tmp_path: Path, index: int) -> None:
    with pytest.raises(InputError):
        c.ContainerLayout(index, tmp_path)


def test_overlay_mount_uses_the_image_as_lowerdir_and_per_node_upper(tmp_path: Path) -> None:
    lay = c.ContainerLayout(3, tmp_path)
    argv = c.overlay_mount_argv(Path("/cache/image/root"), lay)
    assert argv[:3] == ["mount", "-t", "overlay"]
    opts = argv[argv.index("-o") + 1]
    assert opts == f"lowerdir=/cache/image/root,upperdir={lay.upper},workdir={lay.work}"
    assert argv[-1] == str(lay.merged)


def test_netns_plan_puts_eth0_in_the_namespace_and_the_host_end_on_the_bridge(tmp_path: Path) -> None:
    lay = c.ContainerLayout(7, tmp_path)
    cmds = [" ".join(x) for x in c.netns_commands(lay)]
    assert cmds[0] == f"ip netns add {lay.netns}"
    assert f"ip link add {lay.veth} type veth peer name eth0 netns {lay.netns}" in cmds
    assert f"ip link set {lay.veth} master {c.BRIDGE} up" in cmds
    assert f"ip -n {lay.netns} addr add 10.251.1.7/16 dev eth0" in cmds
    assert not any("route" in x or "nat" in x.lower() for x in cmds)  # nothing routes out
    bridge = [" ".join(x) for x in c.bridge_commands()]
    assert bridge == [f"ip link add {c.BRIDGE} type bridge", f"ip addr add 10.251.0.1/16 dev {c.BRIDGE}",
                      f"ip link set {c.BRIDGE} up"]


def test_nspawn_command_line(tmp_path: Path) -> None:
    lay = c.ContainerLayout(2, tmp_path)
    argv = c.nspawn_argv(lay)
    assert argv[0] == "systemd-nspawn"
    for flag in ("--boot", "--register=no", "--keep-unit", f"--directory={lay.merged}",
                 f"--network-namespace-path=/run/netns/{lay.netns}", "--machine=gpu-02"):
        assert flag in argv
    assert not any(a.startswith("--private-network") or a.startswith("--bind") for a in argv)


def test_cgroup_hierarchies_unified_and_hybrid(tmp_path: Path) -> None:
    unified = tmp_path / "v2"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("cpu memory\n")
    assert c.cgroup_hierarchies(unified) == [unified]
    hybrid = tmp_path / "hybrid"
    for sub in ("systemd", "unified"):
        (hybrid / sub).mkdir(parents=True)
        (hybrid / sub / "cgroup.procs").write_text("")
    found = c.cgroup_hierarchies(hybrid)
    assert found == [hybrid / "systemd", hybrid / "unified"]
    assert c.cgroup_dirs("gpu-01", found) == [hybrid / "systemd" / c.CGROUP_NAME / "gpu-01",
                                              hybrid / "unified" / c.CGROUP_NAME / "gpu-01"]
    assert c.cgroup_hierarchies(tmp_path / "none") == []


def test_upper_files_key_proxy_and_masked_units(tmp_path: Path) -> None:
    lay = c.ContainerLayout(1, tmp_path)
    files = c.upper_files(lay, "http://10.251.0.1:3142", "10.251.0.1", "ssh-ed25519 AAAA gpuctl-lab")
    assert files["root/.ssh/authorized_keys"] == "ssh-ed25519 AAAA gpuctl-lab\n"
    assert files["etc/hostname"] == "gpu-01\n"
    proxy = files["etc/apt/apt.conf.d/00gpuctl-lab-proxy"]
    assert 'Acquire::http::Proxy "http://10.251.0.1:3142";' in proxy
    assert 'Acquire::http::Proxy::10.251.0.1 "DIRECT";' in proxy
    for unit in ("apt-daily.timer", "apt-daily-upgrade.timer", "networking.service", "gpuctl-lab-boot.service"):
        assert files[f"etc/systemd/system/{unit}"] == "->/dev/null"
    c.write_upper(lay, files)
    key = lay.upper / "root/.ssh/authorized_keys"
    assert key.stat().st_mode & 0o777 == 0o600 and key.parent.stat().st_mode & 0o777 == 0o700
    masked = lay.upper / "etc/systemd/system/apt-daily.timer"
    assert masked.is_symlink() and os.readlink(masked) == "/dev/null"
    c.write_upper(lay, files)  # idempotent: rewriting over existing files and links works


def _state(tmp_path: Path, nodes: int) -> c.ContainerLabState:
    st = c.ContainerLabState(state_dir=str(tmp_path), image_root="/img/root", key_path=str(tmp_path / "key"),
                             known_hosts=str(tmp_path / "known_hosts"), inventory_path=str(tmp_path / "inv.yaml"),
                             proxy_port=3142, repo_port=8080, keyring_file="abcd1234.pub", keyring_sha256="0" * 64)
    for i in range(1, nodes + 1):
        lay = c.ContainerLayout(i, tmp_path)
        st.nodes.append(c.ContainerNode(name=lay.name, index=i, address=lay.address, netns=lay.netns,
                                        veth=lay.veth, directory=str(lay.directory), merged=str(lay.merged),
                                        cgroups=[f"/sys/fs/cgroup/x/{lay.name}"],
                                        process=ProcessRecord(1000 + i, f"--directory={lay.merged}")))
    return st


def test_state_round_trip(tmp_path: Path) -> None:
    st = _state(tmp_path, 3)
    st.proxy = ProcessRecord(77, "--port-file=x")
    c.save_state(st)
    back = c.load_state(tmp_path)
    assert back == st
    assert set(back.processes()) == {"nspawn:gpu-01", "nspawn:gpu-02", "nspawn:gpu-03", "apt-proxy"}
    with pytest.raises(InputError):
        back.node("gpu-09")


def test_inventory_validates_and_marks_kernel_roles_not_applicable(tmp_path: Path) -> None:
    st = _state(tmp_path, 64)
    path = tmp_path / "inv.yaml"
    path.write_text(c.render_inventory(st))
    loaded = load_inventory(path)  # the rack power rule holds at 64 nodes (8 per rack)
    assert loaded.inventory.lab == {"kind": "container", "state": str(tmp_path / "state.json")}
    assert [n.address for n in loaded.inventory.nodes][:2] == ["10.251.1.1", "10.251.1.2"]
    assert loaded.inventory.repos.apt_proxy == "http://10.251.0.1:3142"
    specs = resolve(loaded)
    assert len(specs) == 64
    spec = specs[0]
    assert spec.node_kind == "container"
    for role in container_reasons():
        if role in ("lustre_client", "timesync"):  # not in this inventory (no Lustre; timesync off): that reason first
            continue
        assert spec.roles[role].startswith("not applicable in this node kind (container"), role
    for role in ("base", "nvidia_repo", "cuda", "cudnn", "nccl", "dcgm"):
        assert spec.roles[role] == "", role
    assert set(spec.roles) == set(ROLE_ORDER)


def test_machine_inventories_keep_node_kind_machine() -> None:
    specs = resolve(load_inventory(LAB_INVENTORY))
    assert {s.node_kind for s in specs} == {"machine"}
    assert not any("node kind" in r for s in specs for r in s.roles.values())


def test_known_hosts_and_ssh_argv(tmp_path: Path) -> None:
    st = _state(tmp_path, 2)
    lines = c.known_hosts_lines("ssh-ed25519 AAAAKEY root@image", ["10.251.1.1", "10.251.1.2"])
    assert lines == ["10.251.1.1 ssh-ed25519 AAAAKEY", "10.251.1.2 ssh-ed25519 AAAAKEY"]
    argv = c.ssh_argv(st, st.nodes[1], "hostname")
    assert argv[-2:] == ["root@10.251.1.2", "hostname"]
    assert "StrictHostKeyChecking=yes" in argv and f"UserKnownHostsFile={st.known_hosts}" in argv


def test_inotify_raised_then_restored_only_if_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sysctl = tmp_path / "max_user_instances"
    sysctl.write_text("128\n")
    monkeypatch.setattr(c, "INOTIFY_SYSCTL", sysctl)
    st = _state(tmp_path, 1)
    c._raise_inotify(st)
    assert sysctl.read_text().strip() == str(c.INOTIFY_WANTED) and st.inotify_saved == 128
    c._restore_inotify(st)
    assert sysctl.read_text().strip() == "128" and st.inotify_saved is None
    c._raise_inotify(st)
    sysctl.write_text("4096\n")  # someone else changed it meanwhile: leave theirs
    c._restore_inotify(st)
    assert sysctl.read_text().strip() == "4096"
    sysctl.write_text("2048\n")  # already high enough: untouched, nothing to restore
    c._raise_inotify(st)
    assert sysctl.read_text().strip() == "2048" and st.inotify_saved is None


def test_servers_bind_inside_the_lab_network_only(tmp_path: Path) -> None:
    for bind in ("0.0.0.0", "127.0.0.1", "192.168.1.1"):
        with pytest.raises(ValueError):
            c.serve("repo", tmp_path, bind, tmp_path / "port")


def test_up_refuses_bad_node_counts() -> None:
    with pytest.raises(InputError):
        c.up(0)
    with pytest.raises(InputError):
        c.up(c.MAX_NODES + 1)
