"""Lab tier for the network and nvme_raid roles on real QEMU guests (real mdadm over emulated
NVMe, real 802.1Q, Soft-RoCE with real verbs), driven through `gpuctl provision`.

Order matters (module-scoped, one provision shared): provision → checks → write a file to
/raid → provision again (zero changes, same sha256) → ib_write_bw between the two nodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from gpuctl.lab.ssh import ssh_run

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROLES = "network,nvme_raid"


def provision(lab: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuctl", "provision", lab.inventory_path, "--only", ROLES, "--yes", "--no-verify",
         "--json"], capture_output=True, text=True, timeout=1800)


def sh(lab: Any, node: str, cmd: str) -> str:
    return ssh_run(node, cmd, state=lab, check=True, timeout=300).stdout


@pytest.fixture(scope="module")
def provisioned(lab: Any) -> Any:
    p = provision(lab)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    return lab


def test_raid0_over_four_nvme_mounted_at_raid(provisioned: Any) -> None:
    for n in provisioned.nodes:
        mdstat = sh(provisioned, n.name, "cat /proc/mdstat")
        assert "md0 : active raid0" in mdstat
        assert sum(f"nvme{i}n1" in mdstat for i in range(4)) == 4
        assert sh(provisioned, n.name, "findmnt -n -o SOURCE,FSTYPE /raid").split() == ["/dev/md0", "xfs"]
        assert "nofail" in sh(provisioned, n.name, "grep ' /raid ' /etc/fstab")
        assert "ARRAY /dev/md0" in sh(provisioned, n.name, "cat /etc/mdadm/mdadm.conf")


def test_vlan_interface_up_with_its_address(provisioned: Any) -> None:
    vlan_ips = ("10.100.0.11/24", "10.100.0.12/24")
    for n, ip in zip(provisioned.nodes, vlan_ips, strict=False):
        link = json.loads(sh(provisioned, n.name, "ip -d -j addr show dev eth1.100"))[0]
        assert link["linkinfo"]["info_data"]["id"] == 100
        assert "UP" in link["flags"]
        assert ip in [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"]]
    # tagged frames cross the fabric: each node reaches its peer's sshd on the VLAN address
    first, second = provisioned.nodes[0].name, provisioned.nodes[1].name
    for src, dst in ((first, vlan_ips[1]), (second, vlan_ips[0])):
        sh(provisioned, src, f"timeout 10 bash -c 'exec 3<>/dev/tcp/{dst.split('/')[0]}/22'")


def test_soft_roce_on_the_fabric_and_nccl_conf_consistent(provisioned: Any) -> None:
    for n in provisioned.nodes:
        assert "rxe0" in sh(provisioned, n.name, "rdma link show rxe0/1") and "eth1" in \
            sh(provisioned, n.name, "rdma link show rxe0/1")
        assert "PORT_ACTIVE" in sh(provisioned, n.name, "ibv_devinfo -d rxe0")
        conf = dict(line.split("=", 1) for line in sh(provisioned, n.name, "cat /etc/nccl.conf").splitlines()
                    if line and not line.startswith("#"))
        assert conf["NCCL_IB_HCA"] == "=rxe0" and conf["NCCL_SOCKET_IFNAME"] == "=eth1"
        idx = conf["NCCL_IB_GID_INDEX"]
        base = "/sys/class/infiniband/rxe0/ports/1"
        assert sh(provisioned, n.name, f"cat {base}/gid_attrs/types/{idx}").strip() == "RoCE v2"
        assert sh(provisioned, n.name, f"cat {base}/gid_attrs/ndevs/{idx}").strip() == "eth1"
        assert ":ffff:c0a8:32" in sh(provisioned, n.name, f"cat {base}/gids/{idx}")  # ::ffff:192.168.50.x


def test_data_on_raid_survives_reprovision_and_second_run_changes_nothing(provisioned: Any) -> None:
    node = provisioned.nodes[0].name
    sh(provisioned, node, "head -c 8M /dev/urandom > /raid/keep.bin && sync")
    before = sh(provisioned, node, "sha256sum /raid/keep.bin").split()[0]
    p = provision(provisioned)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    summary = json.loads(p.stdout)
    changed = [o for h in summary["hosts"].values() for o in h.get("ops", []) if o.get("status") == "changed"]
    assert changed == []
    assert sh(provisioned, node, "sha256sum /raid/keep.bin").split()[0] == before


def test_ib_write_bw_between_two_nodes_over_the_fabric(provisioned: Any) -> None:
    a, b = provisioned.nodes[0], provisioned.nodes[1]
    gid = sh(provisioned, a.name, "sed -n 's/^NCCL_IB_GID_INDEX=//p' /etc/nccl.conf").strip()
    assert gid.isdigit()
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys; from gpuctl.lab.ssh import ssh_run; "
         "r = ssh_run(sys.argv[1], f'timeout 120 ib_write_bw -d rxe0 -x {sys.argv[2]} -s 65536 -n 200'); "
         "print(r.stdout); sys.exit(r.returncode)", a.name, gid],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = ""
        for _ in range(20):
            r = ssh_run(b.name, f"sleep 3; timeout 120 ib_write_bw -d rxe0 -x {gid} -s 65536 -n 200 192.168.50.11",
                        state=provisioned, timeout=200)
            out = r.stdout
            if r.returncode == 0:
                break
        assert "BW average" in out or "#bytes" in out, out
        rows = [line.split() for line in out.splitlines() if line.strip().startswith("65536")]
        assert rows and float(rows[0][3]) > 0  # BW average [MB/sec]
    finally:
        server.wait(timeout=200)
