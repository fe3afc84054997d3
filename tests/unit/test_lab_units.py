"""Fast tests of the lab's plumbing: no QEMU, no guests (tier 1)."""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpuctl.errors import ExecutionError, ExitCode, InputError
from gpuctl.lab import (
    REQUIRED_BINARIES,
    REQUIRED_DEBIAN_PACKAGES,
    check_host_tools,
    missing_binaries,
    netcache,
    nodes,
    ssh,
)
from gpuctl.lab import image as lab_image
from gpuctl.lab.state import (
    LabState,
    NodeState,
    ProcessRecord,
    free_port,
    load_state,
    pid_alive,
    port_listening,
    save_state,
    stop_process,
)


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the developer's real lab cache or state."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _state(tmp_path: Path, n: int = 2, nvme: int = 3) -> LabState:
    state = LabState(
        sku="hgx-h100-80gb", smp=2, memory_mb=1536, nvme_count=nvme, nvme_size_gb=2,
        image_dir=str(tmp_path / "image"), key_path="/k/id_ed25519", known_hosts="/s/known_hosts",
        state_dir=str(tmp_path / "state"), vde_socket=str(tmp_path / "state/fabric.vde"),
        proxy_port=3142, repo_port=8080, profile_dir=str(tmp_path / "state/profiles"),
        public_key="ssh-ed25519 AAAAC3NzaLAB gpuctl-lab",
    )
    for i in range(1, n + 1):
        layout = nodes.NodeLayout(i)
        state.nodes.append(NodeState(
            name=layout.name, index=i, ssh_port=22000 + i, overlay=f"/s/nodes/{layout.name}/root.qcow2",
            nvme=[f"/s/nodes/{layout.name}/nvme{k}.img" for k in range(nvme)],
            mac_mgmt=layout.mac_mgmt, mac_fabric=layout.mac_fabric,
            serial_log=f"/s/logs/{layout.name}.serial.log", fabric_ip=layout.fabric_ip,
            vlan_ips={100: layout.vlan_ip}, process=ProcessRecord(1000 + i, "marker"),
        ))
    return state


def _image(tmp_path: Path) -> lab_image.Image:
    return lab_image.Image(tmp_path / "image", "6.1.0-99-amd64", "ssh-ed25519 AAAAHOSTKEY root@x")


# --- QEMU command line -------------------------------------------------------------------

def test_qemu_argv_is_tcg_with_loopback_forward_vde_fabric_and_nvme(tmp_path: Path) -> None:
    state = _state(tmp_path)
    node = state.nodes[0]
    argv = nodes.qemu_argv(node, _image(tmp_path), state)
    joined = " ".join(argv)
    assert argv[0] == "qemu-system-x86_64"
    assert argv[argv.index("-accel") + 1] == "tcg,thread=multi"
    assert argv[argv.index("-smp") + 1] == "2" and argv[argv.index("-m") + 1] == "1536"
    assert argv[argv.index("-cpu") + 1] == "qemu64"
    assert "user,id=mgmt,hostfwd=tcp:127.0.0.1:22001-:22" in argv
    assert f"vde,id=fabric,sock={state.vde_socket}" in argv
    assert "virtio-net-pci,netdev=mgmt,mac=52:54:00:6c:00:01" in argv
    assert "virtio-net-pci,netdev=fabric,mac=52:54:00:6c:01:01,speed=400000,duplex=full" in argv
    # mgmt NIC before fabric NIC: eth0 is management, eth1 the fabric.
    assert joined.index("netdev=mgmt,") < joined.index("netdev=fabric,")
    assert [a for a in argv if a.startswith("nvme,serial=")] == [
        "nvme,serial=GPUCTL01N0,drive=nvme0", "nvme,serial=GPUCTL01N1,drive=nvme1",
        "nvme,serial=GPUCTL01N2,drive=nvme2",
    ]
    assert "-no-reboot" not in argv and "-enable-kvm" not in argv
    assert "0.0.0.0" not in joined


def test_kernel_cmdline_sets_hostname_proxy_and_serial_console(tmp_path: Path) -> None:
    state = _state(tmp_path)
    line = nodes.kernel_cmdline(state.nodes[1], state.apt_proxy_url, "ssh-ed25519 AAAAC3Nza gpuctl-lab")
    words = line.split()
    assert "gpuctl.ssh_key=AAAAC3Nza" in words
    assert "systemd.hostname=gpu-02" in words
    assert "gpuctl.apt_proxy=http://10.0.2.2:3142" in words
    assert {"console=ttyS0", "root=/dev/vda", "net.ifnames=0"} <= set(words)


def test_node_layout_is_deterministic() -> None:
    layout = nodes.NodeLayout(12)
    assert (layout.name, layout.fabric_ip, layout.vlan_ip) == ("gpu-12", "192.168.50.22", "10.100.0.22")
    assert layout.mac_mgmt == "52:54:00:6c:00:0c" and layout.mac_fabric == "52:54:00:6c:01:0c"


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"nodes": 0}, "--nodes"), ({"nodes": 99}, "--nodes"), ({"nvme": 9}, "--nvme"),
    ({"smp": 0}, "--smp"), ({"memory_mb": 128}, "--memory"),
])
def test_up_rejects_bad_options_before_touching_anything(kwargs: dict[str, int], fragment: str) -> None:
    with pytest.raises(InputError) as err:
        nodes.up(**kwargs)  # type: ignore[arg-type]
    assert fragment in str(err.value)


# --- ports, state, processes ---------------------------------------------------------------

def test_free_port_is_on_loopback_and_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert not port_listening(port)


def test_free_port_refuses_non_loopback() -> None:
    with pytest.raises(ValueError):
        free_port("0.0.0.0")


def test_state_round_trip(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.vde = ProcessRecord(42, "fabric.vde")
    path = save_state(state)
    loaded = load_state(path)
    assert loaded == state
    assert loaded is not None and loaded.nodes[0].vlan_ips == {100: "10.100.0.11"}
    assert loaded.node("gpu-02").ssh_port == 22002
    assert set(loaded.processes()) == {"qemu:gpu-01", "qemu:gpu-02", "vde_switch"}


def test_unknown_node_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="gpu-01, gpu-02"):
        _state(tmp_path).node("gpu-07")


def test_load_state_without_a_lab_is_none(tmp_path: Path) -> None:
    assert load_state(tmp_path / "nope.json") is None
    assert nodes.down() == []


def test_pid_alive_checks_the_marker_and_stop_process_waits() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_alive(proc.pid, "sleep")
        assert not pid_alive(proc.pid, "qemu-system-x86_64")
        rec = ProcessRecord(proc.pid, "sleep")
        assert stop_process(rec, "sleeper", timeout=5)
        assert not rec.alive()
        assert not stop_process(rec, "sleeper")
    finally:
        proc.kill()
        proc.wait()


# --- inventory ---------------------------------------------------------------------------------

def test_render_lab_inventory_fills_the_checked_in_template(tmp_path: Path) -> None:
    from gpuctl.inventory import Inventory

    state = _state(tmp_path)
    state.keyring_file, state.keyring_sha256 = "gpuctl-lab.asc", "a" * 64
    text = nodes.render_lab_inventory(state, matrix="r570-cuda12.8")
    data = yaml.safe_load(text)
    Inventory.model_validate(data)  # the inventory model's owner defines the schema
    assert data["cluster"]["sku"] == "hgx-h100-80gb" and data["cluster"]["matrix"] == "r570-cuda12.8"
    assert data["ssh"]["key"] == "/k/id_ed25519" and data["ssh"]["known_hosts"] == "/s/known_hosts"
    assert data["repos"] == {"mirror": "http://10.0.2.2:8080/", "apt_proxy": "http://10.0.2.2:3142",
                             "keyring_file": "gpuctl-lab.asc", "keyring_sha256": "a" * 64}
    assert data["nodes"][1] == {"name": "gpu-02", "address": "127.0.0.1", "ssh_port": 22002, "rack": "lab",
                                "fabric_ips": ["192.168.50.12"], "vlan_ips": {100: "10.100.0.12"}}
    assert data["hardware"]["nvme_count"]["value"] == 3
    # Rendering its own output again changes nothing (lab up rewrites the file in place).
    again = tmp_path / "lab.yaml"
    again.write_text(text)
    assert nodes.render_lab_inventory(state, template=again) == text


def test_render_lab_inventory_without_template(tmp_path: Path) -> None:
    from gpuctl.inventory import Inventory

    data = yaml.safe_load(nodes.render_lab_inventory(_state(tmp_path), template=tmp_path / "none.yaml"))
    Inventory.model_validate(data)
    assert data["fabric"]["interfaces"] == ["eth1"] and "keyring_file" not in data["repos"]


# --- host tools --------------------------------------------------------------------------------

def test_missing_binaries_error_names_binary_and_package() -> None:
    wanted = {"definitely-not-a-binary-xyz": "pkg-xyz", "sh": "dash"}
    assert missing_binaries(wanted) == {"definitely-not-a-binary-xyz": "pkg-xyz"}
    with pytest.raises(ExecutionError) as err:
        check_host_tools(wanted)
    assert "definitely-not-a-binary-xyz (Debian package pkg-xyz)" in str(err.value)
    assert "apt-get install -y pkg-xyz" in str(err.value)


def test_every_required_binary_comes_from_a_listed_package() -> None:
    essential = {"coreutils"}
    assert set(REQUIRED_BINARIES.values()) - essential <= set(REQUIRED_DEBIAN_PACKAGES)


# --- ssh -------------------------------------------------------------------------------------

def test_ssh_argv_quotes_sequences_and_pins_key_and_known_hosts() -> None:
    argv = ssh.ssh_argv(2201, "/k/key", "/s/kh", ["echo", "a b; rm -rf /"])
    assert argv[:5] == ["ssh", "-p", "2201", "-i", "/k/key"]
    assert "UserKnownHostsFile=/s/kh" in argv and "StrictHostKeyChecking=accept-new" in argv
    assert "BatchMode=yes" in argv
    assert argv[-2] == "root@127.0.0.1"
    assert argv[-1] == "echo 'a b; rm -rf /'"


def test_known_hosts_lines_use_bracketed_loopback_ports() -> None:
    lines = ssh.known_hosts_lines("ssh-ed25519 AAAAKEY root@vm", [2201, 2202])
    assert lines == ["[127.0.0.1]:2201 ssh-ed25519 AAAAKEY", "[127.0.0.1]:2202 ssh-ed25519 AAAAKEY"]


def test_lab_key_is_made_once() -> None:
    first = ssh.ensure_lab_key()
    second = ssh.ensure_lab_key()
    assert first == second and first.public_key.startswith("ssh-ed25519 ")
    assert first.path.stat().st_mode & 0o077 == 0


# --- image recipe --------------------------------------------------------------------------

def test_recipe_hash_is_stable_and_holds_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    first = lab_image.recipe_hash()
    assert first == lab_image.recipe_hash() and len(first) == 12
    assert "key" not in " ".join(lab_image.recipe())
    monkeypatch.setattr(lab_image, "CHROOT_PACKAGES", (*lab_image.CHROOT_PACKAGES, "extra"))
    assert lab_image.recipe_hash() != first


def test_debootstrap_argv_is_minbase_with_required_packages(tmp_path: Path) -> None:
    argv = lab_image.debootstrap_argv(tmp_path / "root")
    assert argv[:2] == ["debootstrap", "--variant=minbase"]
    include = argv[2].removeprefix("--include=").split(",")
    for pkg in ("systemd", "openssh-server", "mdadm", "perftest", "rdma-core", "nvme-cli", "xfsprogs"):
        assert pkg in include
    assert argv[-3:] == ["bookworm", str(tmp_path / "root"), "http://deb.debian.org/debian"]


def test_image_root_before_build_is_a_clear_error() -> None:
    with pytest.raises(ExecutionError, match="not built"):
        lab_image.image_root()


def test_kernel_cmdline_refuses_other_key_types(tmp_path: Path) -> None:
    with pytest.raises(ExecutionError, match="ed25519"):
        nodes.kernel_cmdline(_state(tmp_path).nodes[0], "http://10.0.2.2:1", "ssh-rsa AAAAB3 x")


def test_configure_writes_network_masks_timers_and_bakes_no_key(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "root/.ssh").mkdir(parents=True)
    (root / "root/.ssh/authorized_keys").write_text("ssh-ed25519 STALE\n")
    lab_image._configure(root)
    assert not (root / "root/.ssh/authorized_keys").exists()
    assert "gpuctl.ssh_key=" in (root / "usr/local/sbin/gpuctl-lab-boot").read_text()
    assert "address 10.0.2.15/24" in (root / "etc/network/interfaces").read_text()
    assert "gateway 10.0.2.2" in (root / "etc/network/interfaces").read_text()
    assert (root / "etc/systemd/system/apt-daily.timer").resolve() == Path("/dev/null")
    assert (root / "etc/systemd/system/multi-user.target.wants/gpuctl-lab-boot.service").is_symlink()
    assert "PermitRootLogin prohibit-password" in (root / "etc/ssh/sshd_config.d/gpuctl-lab.conf").read_text()


# --- caches and servers ------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "ok"), [
    ("http://deb.debian.org/debian/pool/main/h/hello/hello.deb", True),
    ("http://deb.debian.org/debian/../../etc/passwd", False),
    ("https://deb.debian.org/debian/dists/bookworm/InRelease", False),
    ("http://deb.debian.org/", False),
])
def test_cache_file_for(tmp_path: Path, url: str, ok: bool) -> None:
    path = netcache.cache_file_for(tmp_path, url)
    assert (path is not None) == ok
    if path is not None:
        assert tmp_path in path.parents


def test_immutable_archive_files() -> None:
    assert netcache.is_immutable("/debian/pool/main/h/hello/hello_2.10-3_amd64.deb")
    assert netcache.is_immutable("/debian/dists/bookworm/main/binary-amd64/by-hash/SHA256/abc")
    assert not netcache.is_immutable("/debian/dists/bookworm/InRelease")


def test_proxy_refuses_other_hosts_and_repo_server_serves_files(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    port, proxy = netcache.start_server("proxy", tmp_path / "apt", run_dir)
    repo = tmp_path / "repo"
    (repo / "dists").mkdir(parents=True)
    (repo / "dists/hello.txt").write_text("stand-in\n")
    rport, rrec = netcache.start_server("repo", repo, run_dir)
    try:
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{port}"}))
        with pytest.raises(urllib.error.HTTPError) as err:
            opener.open("http://example.com/", timeout=5)
        assert err.value.code == 403
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(f"http://127.0.0.1:{rport}/dists/hello.txt", timeout=5) as resp:
            assert resp.read() == b"stand-in\n"
    finally:
        stop_process(proxy, "proxy")
        stop_process(rrec, "repo")
    assert not port_listening(port) and not port_listening(rport)


# --- CLI -----------------------------------------------------------------------------------------

def test_cli_status_without_lab() -> None:
    from gpuctl.cli.main import main

    result = CliRunner().invoke(main, ["lab", "status", "--json"])
    assert result.exit_code == 0, result.output
    assert '"running": false' in result.output


def test_cli_ssh_without_lab_is_an_execution_error() -> None:
    from gpuctl.cli.main import main

    result = CliRunner().invoke(main, ["lab", "ssh", "gpu-01", "--", "true"])
    assert result.exit_code == ExitCode.EXECUTION
    assert "no lab is running" in result.output
