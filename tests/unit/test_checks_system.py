"""Package, service, module, file, network and RAID checks against recorded or
hand-built system outputs: a converged case passes, each fault fails with expected,
found and remediation."""

from __future__ import annotations

import json
import shlex

import pytest

from gpuctl.checks.model import CouldNotRun, Remediation
from gpuctl.parsers.kernel import parse_proc_modules, sysctl_path
from gpuctl.parsers.net import parse_ip_addr
from tests.unit.checks_support import bundle, failure, fixture, inventory_spec, probe, role

LAB = inventory_spec("lab")  # gpu-01: Soft-RoCE rxe0 on eth1, VLAN 100, RAID0 of 4 NVMe


def dpkg_lines(spec, overrides=None, unheld=()):
    """What the packages listing (parsers.packages.DPKG_QUERY) prints: every pinned package
    installed and held (dpkg's 'hold' selection, what `apt-mark hold` sets) unless `unheld`."""
    overrides = overrides or {}
    rows = []
    for p in spec.all_packages():
        version = overrides.get(p.name, p.version)
        if version is not None:
            rows.append(f"{p.name}\t{version}\t{'install' if p.name in unheld else 'hold'} ok installed")
    rows.append("bash\t5.2.15-2+b2\tinstall ok installed")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------- packages

@pytest.mark.parametrize("role_name", ["nvidia_driver", "cuda", "nccl", "dcgm", "gds", "ofed", "fabricmanager"])
def test_converged_packages_pass(role_name):
    mod = role(role_name)
    p = probe(LAB, {"dpkg-query": dpkg_lines(LAB)})
    items = mod.test_package_pinned._gpuctl_items(LAB)
    assert items
    for item in items:
        mod.test_package_pinned(None, LAB, p, item)
        mod.test_package_held(None, LAB, p, item)


def test_package_at_another_version_fails_with_both_versions():
    p = probe(LAB, {"dpkg-query": dpkg_lines(LAB, {"libnccl2": "2.26.2-1+cuda12.8"})})
    f = failure(role("nccl").test_package_pinned, LAB, p, "libnccl2")
    assert f.expected.startswith("libnccl2 2.27.7-1+cuda13.0") and f.found == "libnccl2 2.26.2-1+cuda12.8"
    assert f.remediation is Remediation.RECONFIGURE


def test_epoch_is_part_of_the_pin():
    p = probe(LAB, {"dpkg-query": dpkg_lines(LAB, {"datacenter-gpu-manager-4-core": "4.5.2-1"})})
    f = failure(role("dcgm").test_package_pinned, LAB, p, "datacenter-gpu-manager-4-core")
    assert "1:4.5.2-1" in f.expected and f.found.endswith(" 4.5.2-1")


def test_missing_and_unheld_packages_fail():
    p = probe(LAB, {"dpkg-query": dpkg_lines(LAB, {"cuda-toolkit-13-0": None})})
    assert failure(role("cuda").test_package_pinned, LAB, p, "cuda-toolkit-13-0").found == "not installed"
    f = failure(role("cuda").test_package_held, LAB, p, "cuda-toolkit-13-0")
    assert "apt-mark showhold" in f.expected and f.found.startswith("not held")


# ---------------------------------------------------------------- services and modules

def units(**states):
    blocks = []
    for name, (active, sub, enabled) in states.items():
        blocks.append(f"Id={name}.service\nLoadState=loaded\nActiveState={active}\nSubState={sub}\n"
                      f"UnitFileState={enabled}\n")
    return "\n".join(blocks)


def test_fabric_manager_down_fails_with_reboot():
    text = units(**{"nvidia-persistenced": ("active", "running", "enabled"),
                    "nvidia-dcgm": ("active", "running", "enabled"),
                    "nvidia-fabricmanager": ("failed", "failed", "enabled")})
    p = probe(LAB, {"systemctl show": text})
    role("dcgm").test_service_active(None, LAB, p, "nvidia-dcgm")
    f = failure(role("fabricmanager").test_service_active, LAB, p, "nvidia-fabricmanager")
    assert (f.expected, f.found, f.remediation) == ("active (running)", "failed (failed)", Remediation.REBOOT)


PROC_MODULES = (
    "nvidia_uvm 2076672 0 - Live 0xffffffffc0a00000 (PO)\n"
    "nvidia 14299136 - - Live 0x0000000000000000 (O)\n"  # '-' use count, as on the H200 machine
    "rdma_rxe 151552 0 - Live 0xffffffffc0b00000\n"
    "8021q 45056 0 - Live 0xffffffffc0c00000\n"
)


def test_modules_with_dash_use_count_are_loaded():
    p = probe(LAB, {"/proc/modules": bundle({"/proc/modules": PROC_MODULES})})
    role("nvidia_driver").test_module_loaded(None, LAB, p, "nvidia")
    role("network").test_module_loaded(None, LAB, p, "rdma_rxe")
    f = failure(role("peermem").test_module_loaded, LAB, p, "nvidia_peermem")
    assert f.found == "not loaded" and f.remediation is Remediation.RECONFIGURE


def test_proc_modules_parser_keeps_dash_as_none():
    mods = parse_proc_modules(PROC_MODULES)
    assert mods["nvidia"].use_count is None and mods["nvidia_uvm"].use_count == 0


# ---------------------------------------------------------------- base

def test_sysctl_blacklist_and_memory():
    files = {sysctl_path(k): v for k, v in LAB.sysctl.items()}
    files["/etc/modprobe.d/gpuctl-blacklist.conf"] = "# written by gpuctl\nblacklist nouveau\n"
    files["/proc/modules"] = PROC_MODULES
    files["/proc/meminfo"] = "MemTotal:        1505432 kB\nMemFree:          900000 kB\n"
    p = probe(LAB, {"/proc/modules": bundle(files)})
    base = role("base")
    for key in LAB.sysctl:
        base.test_sysctl(None, LAB, p, key)
    base.test_module_blacklisted(None, LAB, p, "nouveau")
    base.test_cpu_memory(None, LAB, p)
    files[sysctl_path("vm.max_map_count")] = "65530\n"
    files["/proc/meminfo"] = "MemTotal:         512000 kB\n"
    p = probe(LAB, {"/proc/modules": bundle(files)})
    f = failure(base.test_sysctl, LAB, p, "vm.max_map_count")
    assert (f.expected, f.found) == (">= 1048576", "65530")
    f = failure(base.test_cpu_memory, LAB, p)
    assert f.expected == ">= 1 GiB" and f.found == "0.5 GiB"


def test_sysctl_floors_pass_above_and_exact_values_do_not():
    """Seen on a real H200 VM: vm.max_map_count 8250340 failed against gpuctl's 1048576. A
    limit or buffer size is a floor: higher passes, lower fails; numa_balancing stays exact."""
    files = {sysctl_path(k): v for k, v in LAB.sysctl.items()}
    files[sysctl_path("vm.max_map_count")] = "8250340\n"
    files[sysctl_path("net.core.rmem_max")] = "4194304\n"
    files[sysctl_path("kernel.numa_balancing")] = "1\n"
    p = probe(LAB, {"/proc/modules": bundle(files)})
    base = role("base")
    base.test_sysctl(None, LAB, p, "vm.max_map_count")
    f = failure(base.test_sysctl, LAB, p, "net.core.rmem_max")
    assert (f.expected, f.found) == (">= 134217728", "4194304")
    f = failure(base.test_sysctl, LAB, p, "kernel.numa_balancing")
    assert (f.expected, f.found) == ("0", "1")


def test_kernel_cmdline_without_grub_is_not_applicable_not_passed():
    p = probe(LAB, {"/proc/modules": bundle({"/proc/cmdline": "console=ttyS0 root=/dev/vda rw\n"}),
                    "uname -r": "grub=\nrunning=6.1.0-41-amd64\nboot=6.1.0-41-amd64\n"})
    with pytest.raises(pytest.skip.Exception, match="not applicable"):
        role("base").test_kernel_cmdline(None, LAB, p, "iommu=pt")
    p = probe(LAB, {"/proc/modules": bundle({"/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro quiet\n"}),
                    "uname -r": "grub=debian\nrunning=6.1.0-41-amd64\n"})
    assert failure(role("base").test_kernel_cmdline, LAB, p, "iommu=pt").remediation is Remediation.REBOOT


# ---------------------------------------------------------------- network

RDMA_UP = json.dumps([{"ifindex": 1, "ifname": "rxe0", "port": 1, "state": "ACTIVE", "physical_state": "LINK_UP",
                       "netdev": "eth1", "netdev_index": 3}])
RDMA_DOWN = RDMA_UP.replace('"ACTIVE"', '"DOWN"').replace("LINK_UP", "DISABLED")
IBV = """hca_id:	rxe0
	transport:			InfiniBand (0)
	fw_ver:				0.0.0
	node_guid:			5054:00ff:fe6c:0101
	phys_port_cnt:			1
		port:	1
			state:			PORT_ACTIVE (4)
			max_mtu:		4096 (5)
			active_mtu:		1024 (3)
			sm_lid:			0
			port_lid:		0
			port_lmc:		0x00
			link_layer:		Ethernet
"""


def ip_json(vlan_up=True, vlan_addr="10.100.0.11", fabric_addr="192.168.50.11"):
    eth1 = {"ifname": "eth1", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "mtu": 1500,
            "operstate": "UP", "addr_info": [{"family": "inet", "local": fabric_addr, "prefixlen": 24}]}
    vlan = {"ifname": "eth1.100", "link": "eth1", "mtu": 1500, "operstate": "UP" if vlan_up else "DOWN",
            "flags": ["BROADCAST", "MULTICAST"] + (["UP", "LOWER_UP"] if vlan_up else []),
            "linkinfo": {"info_kind": "vlan", "info_data": {"protocol": "802.1Q", "id": 100}},
            "addr_info": [{"family": "inet", "local": vlan_addr, "prefixlen": 24}]}
    return json.dumps([eth1, vlan])


def gid_bundle(address="192.168.50.11", ndev="eth1"):
    """What `gpuctl.parsers.rdma.rdma_command` prints for rxe0 on eth1 (the network role's reading)."""
    a, b, c, d = (int(x) for x in address.split("."))
    v4 = f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"
    return ("tool cma_roce_mode\ndev rxe0 none eth1\n"
            "gid rxe0 0 fe80:0000:0000:0000:5054:00ff:fe6c:0101 eth1 RoCE v2\n"
            f"gid rxe0 1 {v4} {ndev} RoCE v2\n")


def net_probe(rdma=RDMA_UP, ip=None, gids=None):
    return probe(LAB, {"rdma -j link": rdma, "ibv_devinfo": IBV, "ip -j -d addr": ip or ip_json(),
                       "/gids/": gids or gid_bundle()})


def test_healthy_soft_roce_fabric_and_vlan_pass():
    net = role("network")
    p = net_probe()
    net.test_fabric_port_state(None, LAB, p, "rxe0")
    net.test_fabric_link_layer(None, LAB, p, "rxe0")
    net.test_fabric_address(None, LAB, p, "eth1")
    net.test_roce_gid(None, LAB, p, "rxe0")
    net.test_vlan_up(None, LAB, p, "eth1.100")
    net.test_vlan_address(None, LAB, p, "eth1.100")


def test_soft_roce_rate_is_the_netdev_speed_or_not_applicable():
    net = role("network")
    speed = "/sys/class/net/eth1/speed"
    p = probe(LAB, {"/proc/modules": bundle({speed: "400000\n"})})
    net.test_fabric_port_rate(None, LAB, p, "rxe0")
    p = probe(LAB, {"/proc/modules": bundle({speed: "200000\n"})})
    f = failure(net.test_fabric_port_rate, LAB, p, "rxe0")
    assert (f.expected, f.found) == ("400 Gb/s", "eth1 200 Gb/s (netdev speed)")
    for unknown in ("-1\n", None):
        p = probe(LAB, {"/proc/modules": bundle({speed: unknown} if unknown else {"/proc/meminfo": ""})})
        with pytest.raises(pytest.skip.Exception, match="not applicable: soft-roce device"):
            net.test_fabric_port_rate(None, LAB, p, "rxe0")


def test_port_down_fails_naming_the_port():
    f = failure(role("network").test_fabric_port_state, LAB, net_probe(rdma=RDMA_DOWN), "rxe0")
    assert (f.expected, f.found) == ("ACTIVE/LINK_UP", "rxe0/1 DOWN/DISABLED")
    f = failure(role("network").test_fabric_port_state, LAB, net_probe(rdma="[]"), "rxe0")
    assert "devices: none" in f.found


def test_missing_gid_and_vlan_faults_fail():
    net = role("network")
    f = failure(net.test_roce_gid, LAB, net_probe(gids=gid_bundle("192.168.50.99")), "rxe0")
    assert f.expected == "RoCE v2 GID ::ffff:192.168.50.11" and "192.168.50.99" in f.found
    f = failure(net.test_vlan_up, LAB, net_probe(ip=ip_json(vlan_up=False)), "eth1.100")
    assert "DOWN" in f.found
    f = failure(net.test_vlan_address, LAB, net_probe(ip=ip_json(vlan_addr="10.100.0.99")), "eth1.100")
    assert (f.expected, f.found) == ("10.100.0.11/24", "10.100.0.99/24")


IBSTAT_NDR = fixture("ibstat/ibstat-cx7-ndr-ib-8port-active.txt")


def test_infiniband_rate_from_ibstat():
    spec = inventory_spec("h100-8x4")
    net = role("network")
    p = probe(spec, {"ibstat": IBSTAT_NDR})
    net.test_fabric_port_rate(None, spec, p, "mlx5_0")
    p = probe(spec, {"ibstat": IBSTAT_NDR.replace("Rate: 400", "Rate: 200", 1)})
    f = failure(net.test_fabric_port_rate, spec, p, "mlx5_0")
    assert (f.expected, f.found, f.remediation) == ("400 Gb/s", "mlx5_0/1 200 Gb/s", Remediation.RESEAT_OR_REPLACE)


def test_ip_json_parser_on_a_recorded_output():
    ifaces = parse_ip_addr(fixture("verify/ip-j-d-addr-debian12-build-host.json"))
    assert ifaces["lo"].addresses == ("127.0.0.1/8",) and ifaces["lo"].kind is None


# ---------------------------------------------------------------- nccl.conf

def test_nccl_conf_consistent_with_the_fabric():
    conf = "".join(f"{k}={v}\n" for k, v in LAB.nccl_conf.items())
    p = probe(LAB, {"/proc/modules": bundle({"/etc/nccl.conf": conf}), "rdma -j link": RDMA_UP,
                    "ip -j -d addr": ip_json()})
    nccl = role("nccl")
    for key in LAB.nccl_conf:
        nccl.test_nccl_conf(None, LAB, p, key)
    nccl.test_nccl_ib_hca_exists(None, LAB, p, "rxe0")
    nccl.test_nccl_socket_ifname_exists(None, LAB, p, "eth1")
    p = probe(LAB, {"/proc/modules": bundle({"/etc/nccl.conf": conf}), "rdma -j link": "[]"})
    f = failure(nccl.test_nccl_ib_hca_exists, LAB, p, "rxe0")
    assert f.expected == "RDMA device rxe0" and f.found == "no RDMA devices"
    p = probe(LAB, {"/proc/modules": bundle({"/etc/nccl.conf": conf.replace("=rxe0", "=mlx5_0")})})
    f = failure(nccl.test_nccl_conf, LAB, p, "NCCL_IB_HCA")
    assert (f.expected, f.found) == ("NCCL_IB_HCA==rxe0", "NCCL_IB_HCA==mlx5_0")


def test_nccl_conf_is_read_where_the_network_role_writes_it():
    """role_vars `network_nccl_conf` moves the file the network role writes; verify read the
    constant /etc/nccl.conf (issue 18: one name spelled by install and by verify)."""
    spec = LAB.model_copy(update={"role_vars": {**LAB.role_vars, "network_nccl_conf": "/etc/gpuctl/nccl.conf"}})
    conf = "".join(f"{k}={v}\n" for k, v in spec.nccl_conf.items())
    p = probe(spec, {"/proc/modules": bundle({"/etc/gpuctl/nccl.conf": conf, "/etc/nccl.conf": "NCCL_IB_HCA=^x\n"})})
    assert "/etc/gpuctl/nccl.conf" in p.file_paths() and "/etc/nccl.conf" not in p.file_paths()
    for key in spec.nccl_conf:
        role("nccl").test_nccl_conf(None, spec, p, key)


# ---------------------------------------------------------------- RAID

def test_clean_raid_passes_and_a_removed_member_fails_by_slot():
    spec = LAB
    raid = role("nvme_raid")
    mounts = bundle({"/proc/mounts": "/dev/vda / ext4 rw,relatime 0 0\n/dev/md0 /raid xfs rw,relatime 0 0\n"})
    p = probe(spec, {"mdadm --detail": fixture("verify/mdadm-detail-raid0-4nvme-clean.txt"), "/proc/modules": mounts})
    raid.test_raid_state(None, spec, p)
    raid.test_raid_mounted(None, spec, p)
    for item in raid.slot_items(spec):
        raid.test_raid_member(None, spec, p, item)
    p = probe(spec, {"mdadm --detail": fixture("verify/mdadm-detail-raid0-4nvme-broken.txt")})
    f = failure(raid.test_raid_state, spec, p)
    assert (f.expected, f.found) == ("clean", "broken, FAILED") and f.remediation is Remediation.RESEAT_OR_REPLACE
    f = failure(raid.test_raid_member, spec, p, "slot1")
    assert f.found == "removed" and f.expected == "slot 1 active sync"
    raid.test_raid_member(None, spec, p, "slot2")


def test_absent_array_fails_and_missing_mdadm_could_not_run():
    raid = role("nvme_raid")
    f = failure(raid.test_raid_state, LAB, probe(LAB, {"mdadm --detail": (3, "no such md device\n", "")}))
    assert f.found == "no such array"
    with pytest.raises(CouldNotRun):
        raid.test_raid_state(None, LAB, probe(LAB, {}))


def test_raid_not_mounted_fails():
    p = probe(LAB, {"/proc/modules": bundle({"/proc/mounts": "/dev/vda / ext4 rw 0 0\n"})})
    assert failure(role("nvme_raid").test_raid_mounted, LAB, p).found == "not mounted"


def test_bench_tools_present_and_missing():
    bench = role("bench_tools")
    items = bench.tool_items(LAB)
    assert {"all_reduce_perf", "ib_write_bw", "fio", "gpuctl-bwprobe"} <= set(items)
    listing = "".join(f"{t}\t/usr/bin/{t}\n" for t in items if t != "fio") + "fio\t\n"
    p = probe(LAB, {"command -v": listing})
    bench.test_tool_installed(None, LAB, p, "all_reduce_perf")
    f = failure(bench.test_tool_installed, LAB, p, "fio")
    assert f.found == "not found" and f.expected.startswith("fio on the PATH or in /opt/gpuctl/bin, ")


def test_bench_tools_are_looked_up_where_the_bench_looks(tmp_path):
    """Seen on a real H200: the bench ran gpuctl-bwprobe from /opt/gpuctl/bin (its preamble adds
    gpuctl's tool folders to PATH) while verify said it was missing (plain PATH). The check's
    lookup runs for real here with the bench's preamble and a tool folder given through it."""
    import subprocess

    from gpuctl.bench import suites

    tool = tmp_path / "gpuctl-bwprobe"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    bench = role("bench_tools")
    seen = {}

    class RealShell:
        def output(self, key, command):
            seen[key] = command
            return subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                                  env={"PATH": "/usr/bin:/bin"})

    old = suites.TOOL_DIRS
    try:
        suites.TOOL_DIRS = (str(tmp_path),)
        paths = bench._paths(LAB, RealShell())
    finally:
        suites.TOOL_DIRS = old
    assert paths["gpuctl-bwprobe"] == str(tool)
    assert paths["fio"] == "" or paths["fio"].startswith("/")


def test_installed_but_unheld_package_fails_held_and_verify_reads_the_facts_listing():
    """verify reads packages with the provisioning fact's own command and parser (one reading)."""
    from gpuctl.facts.packages import DebPackages
    from gpuctl.parsers.packages import DPKG_QUERY

    p = probe(LAB, {"dpkg-query": dpkg_lines(LAB, unheld=("libnccl2",))})
    role("nccl").test_package_pinned(None, LAB, p, "libnccl2")
    f = failure(role("nccl").test_package_held, LAB, p, "libnccl2")
    assert f.found.startswith("not held")
    assert any(shlex.quote(DPKG_QUERY) in c for c in p.host.ran) and DPKG_QUERY in DebPackages().command()
