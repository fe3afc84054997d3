"""Fault injection: the node-side scripts run (locally, against a temporary fault file)
and record exactly one line per fault; unknown faults are input errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuctl.errors import InputError
from gpuctl.lab.standin import faults
from gpuctl.lab.standin.profile import FAULTS_PATH


def local_runner(tmp: Path):
    fault_file = tmp / "faults"
    scripts: list[str] = []

    def run(script: str, input: str | None = None) -> str:
        scripts.append(script)
        script = script.replace(FAULTS_PATH, str(fault_file)).replace("mkdir -p /etc/gpuctl-lab", "true")
        proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, input=input, check=True)
        return proc.stdout

    return run, fault_file, scripts


@pytest.mark.parametrize(("fault", "gpu", "line"), [
    ("gpu_missing", None, "gpu_missing"),
    ("gpu_missing", 2, "gpu_missing gpu=2"),
    ("pcie_x8", None, "pcie_x8 gpu=3"),
    ("nvlink_pairs", None, "nvlink_pairs"),
    ("ecc_uncorrectable", 6, "ecc_uncorrectable gpu=6"),
    ("row_remap_pending", None, "row_remap_pending gpu=1"),
    ("slow_nccl", None, "slow_nccl"),
    ("throttle", None, "throttle gpu=3"),
    ("gpu_busy", 0, "gpu_busy gpu=0"),
    ("fabric_not_ready", None, "fabric_not_ready"),
    ("vbios_differs", None, "vbios_differs"),
    ("nvlink_errors", 2, "nvlink_errors gpu=2"),
    ("acs_redirect", None, "acs_redirect gpu=2"),
    ("pcie_aer", 1, "pcie_aer gpu=1"),
])
def test_tool_faults_record_one_line_and_clear(tmp_path: Path, fault: str, gpu: int | None, line: str) -> None:
    run, fault_file, _ = local_runner(tmp_path)
    fault_file.write_text("slow_nccl_other\n")
    faults.apply_fault("gpu-01", fault, gpu=gpu, runner=run)
    faults.apply_fault("gpu-01", fault, gpu=gpu, runner=run)  # idempotent
    assert fault_file.read_text().splitlines() == ["slow_nccl_other", line]
    faults.apply_fault("gpu-01", fault, clear=True, runner=run)
    assert fault_file.read_text().splitlines() == ["slow_nccl_other"]


def test_unknown_fault_lists_the_known_ones() -> None:
    with pytest.raises(InputError) as err:
        faults.apply_fault("gpu-01", "gpu_on_fire", runner=lambda s, input=None: "")
    assert "gpu_on_fire" in str(err.value)
    assert all(name in str(err.value) for name in faults.FAULTS)


def test_gpu_index_only_for_per_gpu_faults() -> None:
    with pytest.raises(InputError):
        faults.apply_fault("gpu-01", "fm_down", gpu=1, runner=lambda s, input=None: "")


def test_real_faults_use_real_commands(tmp_path: Path) -> None:
    seen: list[str] = []

    def fake(script: str, input: str | None = None) -> str:
        seen.append(script)
        return "400\n" if "profile.json" in script and "rate_gbps" in script else ""

    faults.apply_fault("gpu-01", "ib_port_down", runner=fake)
    faults.apply_fault("gpu-01", "xid_79", runner=fake)
    faults.apply_fault("gpu-01", "raid_degraded", runner=fake)
    faults.apply_fault("gpu-01", "ib_rate_200", runner=fake)
    joined = "\n".join(seen)
    assert 'rdma link delete "$dev"' in joined
    assert "NVRM: Xid (PCI:0000:ab:00): 79, pid=%s, name=%s, GPU has fallen off the bus." in joined
    assert "> /dev/kmsg" in joined
    assert "mdadm /dev/$md --fail /dev/$dev --remove /dev/$dev" in joined and "/remove" in joined
    assert '"$nd" 200000' in joined
    faults.apply_fault("gpu-01", "ib_rate_200", clear=True, runner=fake)
    assert '"$nd" 400000' in seen[-1]


def test_driver_mismatch_picks_another_matrix_version() -> None:
    assert faults._other_driver_version("580.95.05") == "570.133.20"
    assert faults._other_driver_version("535.230.02") == "550.163.01"


def test_slow_link_shapes_the_rdma_netdev_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`slow_link` (issue 19): tc on the Soft-RoCE device's netdev, egress token bucket and
    ingress police at one rate, recorded with the netdev; clear removes both qdiscs. `tc`
    and `rdma` are recorders here (the lab test shapes a real guest interface)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    (bindir / "tc").write_text(f'#!/bin/sh\necho "tc $*" >> {calls}\n')
    (bindir / "rdma").write_text("#!/bin/sh\necho 'link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth1'\n")
    for tool in ("tc", "rdma"):
        (bindir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    run, fault_file, _ = local_runner(tmp_path)
    faults.apply_fault("gpu-02", "slow_link", runner=run)
    rate = faults.SLOW_LINK_RATE
    assert fault_file.read_text() == f"slow_link netdev=eth1 rate={rate}\n"
    lines = calls.read_text().splitlines()
    assert f"tc qdisc replace dev eth1 root tbf rate {rate} burst 32kbit latency 400ms" in lines
    assert "tc qdisc add dev eth1 handle ffff: ingress" in lines
    assert any(line.startswith("tc filter add dev eth1 parent ffff:") and f"police rate {rate}" in line
               for line in lines)
    calls.write_text("")
    faults.apply_fault("gpu-02", "slow_link", clear=True, runner=run)
    assert fault_file.read_text() == ""
    assert calls.read_text().splitlines()[:2] == ["tc qdisc del dev eth1 root", "tc qdisc del dev eth1 ingress"]


def test_lab_fault_help_names_every_fault() -> None:
    """`gpuctl lab fault --help` lists the faults from FAULTS (it had its own list, 12 of 19)."""
    from click.testing import CliRunner

    from gpuctl.cli.main import main

    out = CliRunner().invoke(main, ["lab", "fault", "--help"]).output
    missing = [f for f in faults.FAULTS if f not in out.replace("\n", " ").replace("  ", " ")]
    assert not missing, out
