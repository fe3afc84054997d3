"""Check generation from the NodeSpec, the ssh_config, the runner's result model and the
`gpuctl verify` CLI."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.checks.model import CheckResult, CheckStatus, HostResult, VerifyResult
from gpuctl.checks.runner import list_checks, run_verify
from gpuctl.checks.sshconfig import render_ssh_config
from gpuctl.cli.main import main
from gpuctl.inventory import load_inventory
from tests.unit.checks_support import inventory_spec, single_h200_spec

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"

GPU_CHECKS = ("gpu_present", "gpu_model", "gpu_memory", "gpu_persistence_mode", "gpu_ecc_mode", "gpu_ecc_errors",
              "gpu_retired_pages", "gpu_row_remap", "gpu_pcie_width", "gpu_pcie_gen")


@pytest.fixture(scope="module")
def lab_ids():
    specs = [inventory_spec("lab", 0), inventory_spec("lab", 1)]
    return list_checks(specs)


@pytest.fixture(scope="module")
def single_ids():
    return list_checks([single_h200_spec()])["h200-01"]


def expected_lab_ids(spec) -> set[str]:
    ids = {f"nvidia_driver.{c}[gpu{i}]" for c in GPU_CHECKS for i in range(8)}
    ids |= {f"nvidia_driver.nvlink_pair[gpu{a}-gpu{b}]" for a, b in combinations(range(8), 2)}
    ids |= {"nvidia_driver." + c for c in ("nvml_readable", "driver_versions_agree", "driver_version", "gpu_count",
                                          "no_fatal_xid", "health_clock_events", "health_pcie_aer",
                                          "health_gpu_nic_numa", "health_pcie_acs", "health_nvlink_errors",
                                          "health_gpu_firmware")}
    ids |= {"fabricmanager.health_nvswitch_fabric", "network.health_ib_counters",  # issue 19 passive checks
            "network.health_hca_firmware"}
    ids |= {"nvidia_driver.module_loaded[nvidia]", "nvidia_driver.module_loaded[nvidia_uvm]",
            "nvidia_driver.service_active[nvidia-persistenced]", "fabricmanager.service_active[nvidia-fabricmanager]",
            "dcgm.service_active[nvidia-dcgm]", "peermem.module_loaded[nvidia_peermem]", "gds.module_loaded[nvidia_fs]"}
    role_of = {"driver": "nvidia_driver", "persistenced": "nvidia_driver", "fabricmanager": "fabricmanager",
               "cuda": "cuda", "cudnn": "cudnn", "nccl": "nccl", "dcgm": "dcgm", "ofed": "ofed", "gds": "gds"}
    for comp, r in role_of.items():
        for p in spec.components[comp].packages:
            ids |= {f"{r}.package_pinned[{p.name}]", f"{r}.package_held[{p.name}]"}
    ids |= {f"base.sysctl[{k}]" for k in ("vm.max_map_count", "net.core.rmem_max", "net.core.wmem_max",
                                          "kernel.numa_balancing")}
    ids |= {"base.module_blacklisted[nouveau]", "base.kernel_cmdline[iommu=pt]", "base.cpu_memory",
            "nvidia_repo.keyring_present", "nvidia_repo.repo_source"}
    ids |= {"nccl.nccl_conf[NCCL_IB_HCA]", "nccl.nccl_conf[NCCL_SOCKET_IFNAME]", "nccl.nccl_conf[NCCL_IB_TC]",
            "nccl.nccl_ib_hca_exists[rxe0]", "nccl.nccl_socket_ifname_exists[eth1]"}
    ids |= {"network.module_loaded[rdma_rxe]", "network.module_loaded[8021q]", "network.fabric_port_state[rxe0]",
            "network.fabric_link_layer[rxe0]", "network.fabric_port_rate[rxe0]", "network.fabric_address[eth1]",
            "network.roce_gid[rxe0]", "network.vlan_up[eth1.100]", "network.vlan_address[eth1.100]"}
    ids |= {f"nvme_raid.raid_member[slot{i}]" for i in range(4)} | {"nvme_raid.raid_state", "nvme_raid.raid_mounted"}
    ids |= {f"bench_tools.tool_installed[{t}]" for t in ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf",
                                                          "mpirun", "ib_write_bw", "ib_write_lat", "fio",
                                                          "gpuctl-bwprobe")}
    return ids


def test_lab_spec_generates_exactly_the_expected_checks(lab_ids):
    spec = inventory_spec("lab")
    assert spec.raid.expected_members == 4 and spec.hardware.gpu_count == 8
    assert set(lab_ids["gpu-01"]) == expected_lab_ids(spec)
    assert len(lab_ids["gpu-01"]) == len(set(lab_ids["gpu-01"]))
    assert lab_ids["gpu-02"] == lab_ids["gpu-01"]  # same shape, each host its own ids


def test_skipped_roles_yield_no_checks(lab_ids, single_ids):
    assert not [i for i in lab_ids["gpu-01"] if i.startswith("lustre_client.")]
    skipped = {r for r, why in single_h200_spec().roles.items() if why}
    assert skipped >= {"fabricmanager", "network", "nvme_raid", "ofed", "gds", "peermem"}
    assert not [i for i in single_ids if i.split(".")[0] in skipped]


def test_single_gpu_without_nvlink_or_fabric(single_ids):
    assert {f"nvidia_driver.{c}[gpu0]" for c in GPU_CHECKS} <= set(single_ids)
    assert "nvidia_driver.gpu_present[gpu1]" not in single_ids
    assert not [i for i in single_ids if "nvlink_pair" in i or i.startswith("nccl.nccl_")]
    assert "dcgm.service_active[nvidia-dcgm]" in single_ids
    assert "fabricmanager.service_active[nvidia-fabricmanager]" not in single_ids


def test_infiniband_inventory_has_per_port_rate_and_no_gid():
    ids = list_checks([inventory_spec("h100-8x4")])["gpu-01"]
    assert {f"network.fabric_port_rate[mlx5_{i}]" for i in range(8)} <= set(ids)
    assert not [i for i in ids if "roce_gid" in i]
    assert "lustre_client.lustre_mounted" in ids


def test_ssh_config_has_one_block_per_node(tmp_path):
    specs = [inventory_spec("lab", 0), inventory_spec("lab", 1)]
    text = render_ssh_config(specs, key="~/k/id_ed25519", known_hosts="/x/known hosts", strict_host_keys=False,
                             control_dir=tmp_path / "cm", connect_timeout_s=7)
    blocks = text.split("Host ")[1:]
    assert [b.splitlines()[0] for b in blocks] == ["gpu-01", "gpu-02"]
    first = blocks[0]
    for line in ("HostName 127.0.0.1", f"Port {specs[0].ssh_port}", "User root",
                 f"IdentityFile {Path('~/k/id_ed25519').expanduser()}", 'UserKnownHostsFile "/x/known hosts"',
                 "StrictHostKeyChecking accept-new", "ControlMaster auto", "ControlPersist 120",
                 f"ControlPath {tmp_path / 'cm'}/%C", "ConnectTimeout 7", "BatchMode yes"):
        assert f"  {line}\n" in first, line
    strict = render_ssh_config(specs[:1], key=None, known_hosts=None, strict_host_keys=True, control_dir=tmp_path)
    assert "StrictHostKeyChecking yes" in strict and "IdentityFile" not in strict


def test_unreachable_hosts_are_reported_as_such(tmp_path, monkeypatch):
    """A real run over SSH to a closed loopback port: every check 'could not run', the host
    is unreachable, nothing passes, and the stage lands in the run record."""
    from gpuctl.runrecord import RunRecord

    loaded = load_inventory(LAB_INVENTORY)
    specs = [s.model_copy(update={"ssh_port": 9}) for s in [inventory_spec("lab", 0)]]
    record = RunRecord.create("verify", root=tmp_path)
    result = run_verify(loaded, specs, record, roles=("base", "nvidia_driver"), timeout_s=10)
    host = result.hosts["gpu-01"]
    assert host.status.value == "unreachable" and "ssh to gpu-01 failed" in host.unreachable_reason
    assert host.count(CheckStatus.PASS) == 0 and host.count(CheckStatus.ERROR) > 50
    stage = json.loads((record.path / "stages" / "verify.json").read_text())
    assert stage["hosts"]["gpu-01"]["status"] == "unreachable"
    assert "Host gpu-01" in stage["ssh_config"]


def _result() -> VerifyResult:
    ok = HostResult("gpu-02", [CheckResult("gpu-02", "base.cpu_memory", "base", CheckStatus.PASS)])
    bad = HostResult("gpu-01", [
        CheckResult("gpu-01", "base.cpu_memory", "base", CheckStatus.PASS),
        CheckResult("gpu-01", "nvidia_driver.gpu_pcie_width[gpu3]", "nvidia_driver", CheckStatus.FAIL,
                    expected="x16", found="x8 (max x16)", remediation="reseat_or_replace",
                    message="GPU 3 (00000000:5D:00.0): PCIe link trained at x8"),
    ])
    return VerifyResult({"gpu-01": bad, "gpu-02": ok}, duration_s=1.5, run_id="r1")


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_reports_failures_and_exits_1(monkeypatch, tmp_path, as_json):
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path))
    monkeypatch.setattr("gpuctl.cli.verify.run_verify", lambda *a, **k: _result())
    args = ["verify", str(LAB_INVENTORY)] + (["--json"] if as_json else [])
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1, res.output
    if as_json:
        data = json.loads(res.output)
        assert data["hosts"]["gpu-02"] == {**data["hosts"]["gpu-02"], "status": "pass", "failed": []}
        assert data["hosts"]["gpu-01"]["status"] == "fail"
        assert data["hosts"]["gpu-01"]["failed"] == [{
            "check": "nvidia_driver.gpu_pcie_width[gpu3]", "expected": "x16", "found": "x8 (max x16)",
            "remediation": "reseat_or_replace", "message": "GPU 3 (00000000:5D:00.0): PCIe link trained at x8"}]
    else:
        assert "nvidia_driver.gpu_pcie_width[gpu3]" in res.output and "reseat_or_replace" in res.output
        assert "expected: x16" in res.output and "found:    x8 (max x16)" in res.output


def test_cli_folds_the_same_failure_on_many_hosts_into_one_entry(monkeypatch, tmp_path):
    def bad(n: str, found: str) -> HostResult:
        return HostResult(n, [CheckResult(n, "nccl.nccl_conf[NCCL_IB_HCA]", "nccl", CheckStatus.FAIL,
                                          expected="mlx5_0", found=found, remediation="reconfigure",
                                          message="NCCL_IB_HCA differs from the fabric")])
    hosts = {f"gpu-{i:02d}": bad(f"gpu-{i:02d}", "rxe0") for i in range(1, 64)}
    hosts["gpu-64"] = bad("gpu-64", "mlx5_9")  # the odd one out keeps its own entry
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path))
    monkeypatch.setattr("gpuctl.cli.verify.run_verify", lambda *a, **k: VerifyResult(hosts, run_id="r1"))
    res = CliRunner().invoke(main, ["verify", str(LAB_INVENTORY)], env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert "64 failed check(s)" in res.output
    assert "FAIL on 63 hosts gpu-[01-63] nccl.nccl_conf[NCCL_IB_HCA]" in res.output
    assert "FAIL gpu-64 nccl.nccl_conf[NCCL_IB_HCA]" in res.output
    assert res.output.count("remediation: reconfigure") == 2


def test_cli_exit_codes(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path))
    passing = VerifyResult({"gpu-01": HostResult("gpu-01", [CheckResult("gpu-01", "a.b", "a", CheckStatus.PASS)])})
    unreachable = VerifyResult({"gpu-01": HostResult("gpu-01", [], unreachable_reason="ssh failed")})
    inv = str(LAB_INVENTORY)
    for result, code in ((passing, 0), (unreachable, 3)):
        monkeypatch.setattr("gpuctl.cli.verify.run_verify", lambda *a, _r=result, **k: _r)
        assert CliRunner().invoke(main, ["verify", inv, "--json"]).exit_code == code
    assert CliRunner().invoke(main, ["verify", inv, "--limit", "nope"]).exit_code == 2
