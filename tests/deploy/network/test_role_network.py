"""network role on @fake hosts: per-OS renderers, management interface protection, Soft-RoCE,
ConnectX "not applicable" reporting, firewall detection, nccl.conf with a discovered GID index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuctl.parsers.net import parse_firewall, parse_ip_addr, parse_route_dev
from gpuctl.parsers.rdma import parse_rdma, roce_v2_ipv4_gid_index
from gpuctl.runner.roles import load_role
from gpuctl.spec import NodeSpec

pytestmark = pytest.mark.deploy

DATA = Path(__file__).parents[1] / "data" / "network"  # tests/deploy/data: shared recordings
FAMILIES = {
    "debian12": {},
    "ubuntu2204": {"os_family": "ubuntu2204", "os": "ubuntu-22.04"},
    "rhel9": {"os_family": "rhel9", "os": "rocky-9", "package_manager": "dnf"},
}
RXE_ABSENT = "absent rxe0"
RXE_PRESENT = (DATA / "rxe0-gids.txt").read_text()
LINKS_CONVERGED = (DATA / "ip-addr-converged.json").read_text()
LINKS_FRESH = (DATA / "ip-addr-fresh.json").read_text()
NCCL = ("# Managed by gpuctl (network role) from the inventory's fabric (no node-specific content).\n"
        "# NCCL_IB_GID_INDEX discovered: RoCE v2 IPv4 GID of rxe0\n"
        "NCCL_IB_GID_INDEX=3\nNCCL_IB_HCA==rxe0\nNCCL_IB_TC=106\nNCCL_SOCKET_IFNAME==eth1\n")


def specs(fake: Any, family: str = "debian12", inventory: str = "lab.yaml") -> list[NodeSpec]:
    return fake.specs(inventory, limit=("gpu-01",) if inventory == "lab.yaml" else ("*01",), **FAMILIES[family])


def rdma_after_start() -> Any:
    """rxe0 absent until the Soft-RoCE unit has been started in this run (as on a fresh host)."""
    started = {"yes": False}

    def answer(command: str) -> str:
        if "systemctl enable --now gpuctl-soft-roce-rxe0.service" in command:
            started["yes"] = True
            return ""
        if "/sys/class/infiniband/" in command:
            return RXE_PRESENT if started["yes"] else RXE_ABSENT
        return ""
    return answer


def units_show(enabled: str, active: str) -> str:
    """`systemctl show` (parsers.systemd.unit_show_command) of the network role's units, all in one state."""
    units = [f"gpuctl-soft-roce-rxe{i}.service" for i in range(8)] + ["gpuctl-roce-qos.service"]
    return "\n".join(f"Id={u}\nLoadState=loaded\nActiveState={active}\nSubState=x\nUnitFileState={enabled}\n"
                     for u in units)


def fresh() -> dict[Any, Any]:
    rdma = rdma_after_start()
    return {
        "SSH_CONNECTION": "10.0.2.2 via 10.0.2.2 dev eth0 src 10.0.2.15 uid 0",
        "dpkg -l": "",
        "ip -d -j addr show": LINKS_FRESH,
        "systemctl enable --now gpuctl-soft-roce": rdma,
        "/sys/class/infiniband/": rdma,
        "systemctl show": units_show("disabled", "inactive"),
        "svc $s": "svc firewalld inactive\nsvc ufw inactive\nsvc nftables inactive\nufw \nrules",
    }


def converged(files: dict[str, Any]) -> dict[Any, Any]:
    """The host after a first run: every file as that run uploaded it, links up, units active, rxe0 present."""
    out: dict[Any, Any] = {f"cat {path} 2>/dev/null": content for path, content in files.items()}
    out["cat /etc/network/interfaces 2>/dev/null"] = "source /etc/network/interfaces.d/*\nauto eth0\n"
    out.update({
        "SSH_CONNECTION": "10.0.2.2 via 10.0.2.2 dev eth0 src 10.0.2.15 uid 0",
        "dpkg -l": ["ii  iproute2  6.1.0-3  amd64  x", "ii  vlan  2.0.5  all  x",
                    "ii  rdma-core  44.0-2  amd64  x", "ii  ibverbs-utils  44.0-2  amd64  x"],
        "rpm --queryformat": ["iproute 6.2.0-5.el9", "rdma-core 46.0-1.el9", "libibverbs-utils 46.0-1.el9"],
        "ip -d -j addr show": LINKS_CONVERGED,
        "/sys/module/": ["8021q", "rdma_rxe"],
        "/sys/class/infiniband/": RXE_PRESENT,
        "systemctl show": units_show("enabled", "active"),
        "svc $s": "svc firewalld inactive\nsvc ufw inactive\nsvc nftables inactive\nufw \nrules",
    })
    return out


def run(fake: Any, responses: dict[Any, Any], family: str = "debian12", inventory: str = "lab.yaml") -> Any:
    sp = specs(fake, family, inventory)
    return fake.run(load_role("network").install, sp, responses=responses)[sp[0].node]


def names(ops: list[str]) -> list[str]:
    return [o.split(" | ", 1)[-1] for o in ops]


def touches(h: Any, ifname: str) -> list[str]:
    return [c for c in h.execute_commands + list(h.files) if ifname in c.replace("SSH_CONNECTION", "")
            and "route" not in c]


# ------------------------------------------------------------------ per OS family

def test_debian_fresh_ifupdown_vlan_soft_roce_and_nccl_conf(fake: Any) -> None:
    h = run(fake, fresh())
    assert h.status == "ok", h.error
    f = h.files
    eth1 = f["/etc/network/interfaces.d/gpuctl-eth1"]
    assert "auto eth1\niface eth1 inet static\n    address 192.168.50.11/24\n    mtu 1500\n" in eth1
    vlan = f["/etc/network/interfaces.d/gpuctl-eth1.100"]
    assert "address 10.100.0.11/24" in vlan and "vlan-raw-device eth1" in vlan
    assert "ifup eth1.100" in "\n".join(h.execute_commands)
    unit = f["/etc/systemd/system/gpuctl-soft-roce-rxe0.service"]
    assert "rdma link add rxe0 type rxe netdev eth1" in unit and "WantedBy=multi-user.target" in unit
    assert f["/etc/modules-load.d/gpuctl-network.conf"].splitlines()[1:] == ["rdma_rxe", "8021q"]
    # GID index read at execution time, after rxe0 appeared
    assert f["/etc/nccl.conf"] == NCCL
    assert any("not applicable" in n and "rxe0" in n for n in names(h.op_names))
    assert "Let fabric traffic through the active firewall" in names(h.op_names)
    assert not any("mlnx_qos -i" in c or "cma_roce_mode -d" in c for c in h.execute_commands)
    assert "/usr/local/sbin/gpuctl-roce-qos" not in f


@pytest.mark.parametrize("family", list(FAMILIES))
def test_converged_host_changes_nothing(fake: Any, family: str) -> None:
    first = run(fake, fresh(), family)
    assert first.status == "ok", first.error and first.changed_ops
    h = run(fake, converged(first.files), family)
    assert h.status == "ok", h.error
    assert h.changed_ops == []
    assert set(h.execute_commands) <= set(h.prepare_commands)


def test_ubuntu_netplan_generate_never_netplan_apply(fake: Any) -> None:
    h = run(fake, fresh(), "ubuntu2204")
    assert h.status == "ok", h.error
    plan = h.files["/etc/netplan/60-gpuctl.yaml"]
    assert "    eth1:\n      dhcp4: false\n      addresses: [192.168.50.11/24]\n      mtu: 1500\n" in plan
    assert "    eth1.100:\n      id: 100\n      link: eth1\n      addresses: [10.100.0.11/24]\n" in plan
    cmds = "\n".join(h.execute_commands)
    assert "netplan generate" in cmds and "networkctl reconfigure eth1.100" in cmds
    assert "netplan apply" not in cmds


def test_rhel_networkmanager_keyfiles(fake: Any) -> None:
    h = run(fake, fresh(), "rhel9")
    assert h.status == "ok", h.error
    k = h.files["/etc/NetworkManager/system-connections/gpuctl-eth1.100.nmconnection"]
    assert "type=vlan" in k and "[vlan]\nid=100\nparent=eth1\n" in k and "address1=10.100.0.11/24" in k
    assert "nmcli connection up gpuctl-eth1.100" in "\n".join(h.execute_commands)
    assert "dnf" in "\n".join(h.execute_commands) or "yum" in "\n".join(h.execute_commands)


def test_infiniband_ipoib_connected_mode_and_mtu(fake: Any) -> None:
    resp = fresh()
    resp["SSH_CONNECTION"] = "10.0.0.1 dev eno1 src 10.0.0.11"
    sp = fake.specs("a100-8x2.yaml", limit=("*01",))
    h = fake.run(load_role("network").install, sp, responses=resp)[sp[0].node]
    assert h.status == "ok", h.error
    f = sp[0].fabric
    port = f.ports[0]
    text = h.files[f"/etc/network/interfaces.d/gpuctl-{port.interface}"] if sp[0].os_family == "debian12" else \
        h.files["/etc/netplan/60-gpuctl.yaml"]
    assert str(f.mtu) in text
    if f.ipoib_mode == "connected":
        assert "connected" in text
    assert "NCCL_IB_HCA" in h.files["/etc/nccl.conf"]


# ------------------------------------------------------------------ management interface

def test_management_interface_is_never_touched(fake: Any) -> None:
    h = run(fake, fresh())
    assert h.status == "ok", h.error
    assert touches(h, "eth0") == []


def test_inventory_that_would_reconfigure_the_management_interface_is_refused(fake: Any) -> None:
    resp = fresh()
    resp["SSH_CONNECTION"] = "10.0.2.2 dev eth1 src 192.168.50.11"  # the session arrives over eth1
    h = run(fake, resp)
    assert h.status == "failed"
    assert "Refuse to reconfigure the network" in names(h.failed_ops)
    assert any("eth1 carries the SSH session" in c for c in h.execute_commands)
    assert not [c for c in h.execute_commands if "ifup" in c or "rdma link" in c]
    assert h.files == {}


def test_the_inventorys_management_interface_is_never_reconfigured_either(fake: Any) -> None:
    """management.interface (issue 18: read by no one before): the interface the inventory names
    as the management network is refused like the one carrying this SSH session, e.g. when gpuctl
    reaches the node another way (a jump host) and the file lists the management NIC as a port."""
    sp = [s.model_copy(update={"management_interface": "eth1"}) for s in specs(fake)]  # eth1: lab fabric port
    h = fake.run(load_role("network").install, sp, responses=fresh())["gpu-01"]  # SSH arrives over eth0
    assert h.status == "failed"
    assert "Refuse to reconfigure the network" in names(h.failed_ops)
    assert any("eth1 is the management interface the inventory names" in c for c in h.execute_commands)
    assert h.files == {}
    ok = fake.run(load_role("network").install, specs(fake), responses=fresh())["gpu-01"]  # lab.yaml: eth0
    assert ok.status == "ok", ok.error


def test_unknown_management_interface_is_refused(fake: Any) -> None:
    resp = fresh()
    resp["SSH_CONNECTION"] = ""
    h = run(fake, resp)
    assert h.status == "failed" and h.files == {}


# ------------------------------------------------------------------ ConnectX vs not applicable, firewall

def test_connectx_ports_get_roce_mode_trust_pfc_ecn(fake: Any) -> None:
    resp = fresh()
    resp["SSH_CONNECTION"] = "10.3.0.1 dev eno1 src 10.3.0.11"
    resp["/sys/class/infiniband/"] = (DATA / "mlx5-8port.txt").read_text()
    sp = fake.specs("h200-roce-8x8.yaml", limit=("h200-01",))
    h = fake.run(load_role("network").install, sp, responses=resp)["h200-01"]
    assert h.status == "ok", h.error
    script = h.files["/usr/local/sbin/gpuctl-roce-qos"]
    assert "cma_roce_mode -d mlx5_0 -p 1 -m 2" in script
    assert "mlnx_qos -i ens1f0np0 --trust dscp --pfc 0,0,0,1,0,0,0,0" in script
    assert "echo 1 > /sys/class/net/ens1f0np0/ecn/roce_np/enable/3" in script
    assert "echo 106 > /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos" in script
    assert "systemctl restart gpuctl-roce-qos.service" in "\n".join(h.execute_commands)
    assert "NCCL_IB_GID_INDEX=3" in h.files["/etc/nccl.conf"]
    assert touches(h, "eno1 ") == [] and "eno1.200" in h.files["/etc/netplan/60-gpuctl.yaml"]


@pytest.mark.parametrize("fw,expect", [
    ("firewalld", "firewall-cmd --permanent --zone=trusted --add-interface=eth1"),
    ("ufw", "ufw allow in on eth1 comment gpuctl-fabric"),
    ("nftables", "nft insert rule inet filter input udp dport 4791 accept"),
])
def test_active_firewall_is_opened_for_the_fabric(fake: Any, fw: str, expect: str) -> None:
    resp = fresh()
    resp["svc $s"] = "\n".join(f"svc {s} {'active' if s == fw else 'inactive'}" for s in
                               ("firewalld", "ufw", "nftables")) + "\nufw Status: active\nrules"
    h = run(fake, resp)
    assert h.status == "ok", h.error
    assert expect in "\n".join(h.execute_commands)


def test_gid_index_never_guessed(fake: Any) -> None:
    resp = fresh()
    resp["/sys/class/infiniband/"] = RXE_ABSENT
    resp["systemctl enable --now gpuctl-soft-roce"] = ""
    h = run(fake, resp)
    assert h.status == "failed"
    assert "/etc/nccl.conf" not in h.files
    assert any("no RoCE v2 IPv4 GID on rxe0" in c for c in h.execute_commands)


# ------------------------------------------------------------------ parsers

def test_parse_route_dev() -> None:
    assert parse_route_dev("10.0.2.2 dev eth0 src 10.0.2.15 uid 0 \\    cache") == "eth0"
    assert parse_route_dev("default via 10.0.2.2 dev eno1 proto static") == "eno1"
    assert parse_route_dev("") == ""


def test_parse_ip_addr_and_rdma_gid_discovery() -> None:
    links = parse_ip_addr(LINKS_CONVERGED)
    assert links["eth1.100"].addresses == ("10.100.0.11/24",) and links["eth1.100"].kind == "vlan"
    rdma = parse_rdma(RXE_PRESENT)
    dev = rdma.devices["rxe0"]
    assert not dev.is_connectx and rdma.tools == frozenset()
    assert roce_v2_ipv4_gid_index(dev, "eth1", "192.168.50.11/24") == 3
    assert roce_v2_ipv4_gid_index(dev, "eth1.100") == 5
    assert roce_v2_ipv4_gid_index(dev, "eth1", "192.168.50.99/24") is None


def test_parse_firewall() -> None:
    assert parse_firewall("svc firewalld inactive\nsvc ufw active\nufw Status: inactive\nrules").active is None
    assert parse_firewall("svc ufw active\nufw Status: active\nrules\n4791/udp ALLOW").active == "ufw"
