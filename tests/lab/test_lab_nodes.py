"""Tier 3: the lab's nodes themselves — SSH, NVMe drives, fabric, reboot, power loss."""

from __future__ import annotations

import time
import uuid

import pytest

from gpuctl.lab.nodes import kill_node, start_node, status
from gpuctl.lab.ssh import ssh_reachable, ssh_run, wait_for_ssh
from gpuctl.lab.state import LabState

pytestmark = pytest.mark.lab


def _nodes(lab: LabState) -> list[str]:
    return lab.node_names


def test_ssh_answers_on_every_node_with_its_own_hostname(lab: LabState) -> None:
    for name in _nodes(lab):
        result = ssh_run(name, ["hostname"], state=lab)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == name


def test_nvme_drives_are_visible(lab: LabState) -> None:
    for node in lab.nodes:
        out = ssh_run(node.name, ["lsblk", "-dn", "-o", "NAME,TYPE,SERIAL"], state=lab, check=True).stdout
        drives = sorted(line.split()[0] for line in out.splitlines() if line.startswith("nvme"))
        assert drives == [f"nvme{k}n1" for k in range(lab.nvme_count)], out


def test_fabric_passes_traffic_between_nodes(lab: LabState) -> None:
    if len(lab.nodes) < 2:
        pytest.skip("needs two nodes")
    a, b = lab.nodes[0], lab.nodes[1]
    # Temporary /32-free test addresses outside the inventory's fabric range.
    addrs = {a.name: "192.168.99.1", b.name: "192.168.99.2"}
    try:
        for name, ip in addrs.items():
            ssh_run(name, f"ip link set eth1 up && ip addr add {ip}/24 dev eth1", state=lab, check=True)
        ping = ssh_run(a.name, ["ping", "-c", "3", "-W", "3", addrs[b.name]], state=lab)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert " 0% packet loss" in ping.stdout
    finally:
        for name, ip in addrs.items():
            ssh_run(name, f"ip addr del {ip}/24 dev eth1", state=lab)


def test_fabric_nic_reports_the_inventory_rate(lab: LabState) -> None:
    name = lab.nodes[0].name
    out = ssh_run(name, "ip link set eth1 up && cat /sys/class/net/eth1/speed", state=lab, check=True)
    assert out.stdout.strip() == "400000"


def test_guest_apt_goes_through_the_lab_cache(lab: LabState) -> None:
    conf = ssh_run(lab.nodes[0].name, ["cat", "/etc/apt/apt.conf.d/00gpuctl-lab-proxy"],
                   state=lab, check=True).stdout
    assert f'Acquire::http::Proxy "{lab.apt_proxy_url}";' in conf


def test_guest_reboot_comes_back(lab: LabState) -> None:
    name = lab.nodes[-1].name
    before = ssh_run(name, ["cat", "/proc/sys/kernel/random/boot_id"], state=lab, check=True).stdout
    ssh_run(name, "systemctl reboot", state=lab, timeout=30)
    deadline = time.monotonic() + 60
    while ssh_reachable(name, lab, timeout=3) and time.monotonic() < deadline:
        time.sleep(1)
    wait_for_ssh(name, 300, state=lab)
    after = ssh_run(name, ["cat", "/proc/sys/kernel/random/boot_id"], state=lab, check=True).stdout
    assert after != before
    assert ssh_run(name, ["hostname"], state=lab).stdout.strip() == name


@pytest.mark.slow
def test_killed_node_restarts_on_its_own_disk(lab: LabState) -> None:
    name = lab.nodes[0].name
    marker = uuid.uuid4().hex
    ssh_run(name, f"echo {marker} > /root/survives && sync", state=lab, check=True)
    kill_node(name, state=lab)
    info = {n["name"]: n for n in status(check_ssh=False)["nodes"]}
    assert not info[name]["alive"]
    start_node(name, wait=True, timeout=300, state=lab)
    assert ssh_run(name, ["cat", "/root/survives"], state=lab, check=True).stdout.strip() == marker
