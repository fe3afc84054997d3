"""Passive health checks (issue 19): parsers, one judgement per check on recorded outputs
(healthy and faulty), the `gpuctl health` command (exit codes, --json, the drain line) through
the lab's stand-in tools on this machine, and the per-node time limit."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from gpuctl import healthpolicy as hp
from gpuctl.catalog import PathLimit, Workload, load_health, load_sku
from gpuctl.checks.probe import health_sysfs_script, ib_counter_files
from gpuctl.cli.main import main
from gpuctl.errors import ParseError
from gpuctl.health import COULD_NOT_RUN, HEALTHY, UNHEALTHY, NodeHealth, run_health
from gpuctl.inventory import load_inventory
from gpuctl.parsers.files import parse_tail_bundle
from gpuctl.parsers.firmware import vbios_versions
from gpuctl.parsers.health import parse_pci_sysfs
from gpuctl.parsers.lspci import parse_lspci
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q
from gpuctl.parsers.nvidia_smi.q_xml import parse_nvidia_smi_xml
from gpuctl.parsers.nvlink_errors import parse_nvlink_errors
from gpuctl.parsers.xid import parse_xid_log
from gpuctl.remediation import Remediation
from gpuctl.spec import resolve
from tests.unit.lab_local import FIX, standin_gpu_node

LIMITS = load_health().passive
DRAIN = re.compile(r"^gpuctl: (?P<check>[a-z_]+): (?P<subject>[^:]+(?::[^ :][^:]*)*?): (?P<detail>.+) → "
                   r"(?P<remediation>[a-z_]+)$")

# real recorded outputs (tests/data/fixtures/nvidia_smi/SOURCES.md): an 8-GPU H100 `nvidia-smi -q`
# (535.183, gpud) whose idle GPU 2 has HW Power Brake and SW Thermal Slowdown active, the others Idle; a one-GPU
# H200 `nvidia-smi -q -x` (580.159), idle
REAL_Q = (FIX / "nvidia_smi" / "nvidia-smi-q-h100-8gpu-535.183.txt").read_text()
REAL_XML = (FIX / "nvidia_smi" / "nvidia-smi-q-x-h200-1gpu-580.159-real.xml").read_text()


# ---------------------------------------------------------------- 1. clock events (read from nvidia-smi -q -x)

def test_clock_events_idle_gpu_passes() -> None:
    gpus = parse_nvidia_smi_xml(REAL_XML).gpus
    assert gpus[0].utilization_gpu_pct == 0 and gpus[0].vbios_version == "96.00.A5.00.1A"
    found = hp.judge_clock_events(gpus, LIMITS)
    assert [f.status for f in found] == [hp.PASS] and "Idle" in found[0].detail


def test_clock_events_power_brake_on_an_idle_gpu_fails_naming_it() -> None:
    found = hp.judge_clock_events(parse_nvidia_smi_q(REAL_Q).gpus, LIMITS)
    assert [f.status for f in found] == [hp.PASS, hp.PASS, hp.FAIL] + [hp.PASS] * 5
    assert found[2].subject == "GPU 2 (00000000:75:00.0)" and "HW Power Brake Slowdown" in found[2].detail
    assert found[2].remediation is Remediation.RESEAT_OR_REPLACE


def test_clock_events_busy_gpu_or_no_reasons_is_not_judged() -> None:
    from dataclasses import replace

    gpus = parse_nvidia_smi_q(REAL_Q).gpus
    found = hp.judge_clock_events([replace(gpus[2], utilization_gpu_pct=88), replace(gpus[0], clock_events=None),
                                   replace(gpus[1], utilization_gpu_pct=None)], LIMITS)
    assert [f.status for f in found] == [hp.NOT_JUDGED] * 3
    assert "GPU busy (utilization 88 %" in found[0].detail and "no clock-event reasons" in found[1].detail


@pytest.mark.parametrize("util", ["lots %", "-3 %"])
def test_clock_events_bad_utilization_is_refused(util: str) -> None:
    with pytest.raises(ParseError, match="utilization"):
        parse_nvidia_smi_xml(REAL_XML.replace("<gpu_util>0 %</gpu_util>", f"<gpu_util>{util}</gpu_util>"))


def test_health_reads_each_gpu_fact_once() -> None:
    """Clock events, load, VBIOS and fabric come from the node's one `nvidia-smi -q -x` (issue 19
    weak spot: a second `--query-gpu` reading of the same facts)."""
    loaded = load_inventory(str(Path(__file__).parents[1] / "data" / "inventories" / "lab-placeholder.yaml"))
    spec = resolve(loaded, ())[0]
    host = _Host({"nvidia-smi -q -x": _xml_8gpu(), "nvlink -e": NVLINK_E_ZERO, "dmesg": "[ 1.0] Linux 6.1\n"})
    result = run_health(loaded, [spec], host_for=lambda s: host, keep_state=False, lock={})
    smi = [c for c in host.commands if "nvidia-smi" in c]
    assert not [c for c in smi if "--query-gpu" in c] and len([c for c in smi if "-q -x" in c]) == 1, smi
    node = result.nodes[spec.node]
    assert {f.check for f in node.findings if f.status == hp.PASS} >= {"clock_events", "nvswitch_fabric"}
    assert node.firmware == {f"vbios/{i}": "96.00.A5.00.1A" for i in range(8)}


# ---------------------------------------------------------------- 2. fabric

H100_SKU = load_sku("hgx-h100-80gb")


def test_fabric_real_hgx_h100_completed_success_passes() -> None:
    found = hp.judge_fabric(parse_nvidia_smi_q(REAL_Q).gpus, H100_SKU)
    assert len(found) == 8 and {f.status for f in found} == {hp.PASS}


def test_fabric_in_progress_fails_naming_the_gpu() -> None:
    pad = "State                             : "
    text = REAL_Q.replace(pad + "Completed", pad + "In Progress", 1)
    found = hp.judge_fabric(parse_nvidia_smi_q(text).gpus, H100_SKU)
    assert [f.status for f in found].count(hp.FAIL) == 1
    bad = next(f for f in found if f.status == hp.FAIL)
    assert bad.subject.startswith("GPU 0 (") and "nvidia-fabricmanager has not finished" in bad.detail


def test_fabric_is_the_analyze_judgement() -> None:
    """One rule: health's fabric findings are `gpuctl.verdicts.judge_fabric`'s verdicts, and a
    GPU without a fabric state on an NVSwitch SKU warns (A100 HGX prints N/A), as analyze does."""
    from gpuctl import verdicts

    gpus = parse_nvidia_smi_q(REAL_Q.replace("Completed", "N/A").replace("Success", "N/A")).gpus
    assert [f.status for f in hp.judge_fabric(gpus, H100_SKU)] == [hp.WARN] * 8
    assert [v.status.value for v in verdicts.judge_fabric(gpus, H100_SKU)] == ["warn"] * 8
    assert not hasattr(hp, "GpuFabric") and not hasattr(__import__("gpuctl.parsers.nvidia_smi").parsers.nvidia_smi,
                                                      "parse_fabric")


def test_fabric_failure_status_asks_a_reboot_and_xml_reads_alike() -> None:
    xml = (FIX / "nvidia_smi" / "nvidia-smi-q-x-h200-1gpu-580.159-real.xml").read_text()
    text = xml.replace("<state>N/A</state>", "<state>Completed</state>", 1).replace(
        "<status>N/A</status>", "<status>Failure</status>", 1)
    found = hp.judge_fabric(parse_nvidia_smi_xml(text).gpus, H100_SKU)
    assert found[0].status == hp.FAIL and found[0].remediation is Remediation.REBOOT


def test_fabric_section_absent_is_not_judged_off_nvswitch() -> None:
    text = (FIX / "nvidia_smi" / "nvidia-smi-q-i0-h800-525.105-llmaction.txt").read_text()
    gpus = parse_nvidia_smi_q(text).gpus
    if all(g.fabric_state is None for g in gpus):
        assert {f.status for f in hp.judge_fabric(gpus, load_sku("single-h200"))} == {hp.NOT_JUDGED}


# ---------------------------------------------------------------- sysfs: AER, IB counters, NUMA

# the kernel's aer_dev_* layout (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats)
AER_ZERO_COR = "RxErr 0\nBadTLP 0\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\n" \
    "TOTAL_ERR_COR {n}\n"
AER_ZERO_FATAL = "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP {n}\n" \
    "ECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\nAtomicOpBlocked 0\nTLPBlockedErr 0\n" \
    "PoisonTLPBlocked 0\nTOTAL_ERR_{kind} {n}\n"


def sysfs_files(*, switch: bool = False, gpu_numa: tuple[int, ...] = (0, 1), nic_numa: tuple[int, ...] = (0, 1),
                fatal: int = 0, correctable: int = 0, symbol: int = 0, fw: str = "28.39.1002") -> dict[str, str]:
    files: dict[str, str] = {}
    for i, numa in enumerate(gpu_numa):
        d = f"/sys/bus/pci/devices/0000:{0x18 + i:02x}:00.0"
        files[f"{d}/device-path"] = (f"/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:0{i}.0/{d[-12:]}\n"
                                     if switch else f"/sys/devices/pci0000:15/0000:15:0{i}.0/{d[-12:]}\n")
        files |= {f"{d}/class": "0x030200\n", f"{d}/vendor": "0x10de\n", f"{d}/numa_node": f"{numa}\n",
                  f"{d}/aer_dev_fatal": AER_ZERO_FATAL.format(n=fatal if i == 0 else 0, kind="FATAL"),
                  f"{d}/aer_dev_nonfatal": AER_ZERO_FATAL.format(n=0, kind="NONFATAL"),
                  f"{d}/aer_dev_correctable": AER_ZERO_COR.format(n=correctable if i == 0 else 0)}
    for i, numa in enumerate(nic_numa):
        d = f"/sys/bus/pci/devices/0000:{0x40 + i:02x}:00.0"
        files |= {f"{d}/class": "0x020700\n", f"{d}/vendor": "0x15b3\n", f"{d}/numa_node": f"{numa}\n"}
        ib = f"/sys/class/infiniband/mlx5_{i}"
        files |= {f"{ib}/device-link": f"/sys/devices/pci0000:3f/0000:3f:01.0/0000:{0x40 + i:02x}:00.0\n",
                  f"{ib}/fw_ver": f"{fw}\n"}
        for c in ib_counter_files():
            files[f"{ib}/ports/1/counters/{c}"] = f"{symbol if (c == 'symbol_error' and i == 0) else 0}\n"
    return files


def test_sysfs_script_output_round_trips_through_the_bundle_parser() -> None:
    # the real script on this machine: whatever it holds, it parses (no GPU here: none listed)
    import subprocess

    out = subprocess.run(["sh", "-c", health_sysfs_script()], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    parsed = parse_pci_sysfs(parse_tail_bundle(out.stdout)[0])
    assert all(not f.is_gpu for f in parsed.functions.values())


def test_aer_fatal_fails_and_correctable_is_judged_as_a_change() -> None:
    sysfs = parse_pci_sysfs(sysfs_files(fatal=1))
    found = hp.judge_aer(sysfs, None)
    bad = [f for f in found if f.status == hp.FAIL]
    assert len(bad) == 1 and bad[0].subject == "GPU 0000:18:00.0" and "1 fatal" in bad[0].detail
    first = hp.judge_aer(parse_pci_sysfs(sysfs_files(correctable=7)), None)
    assert {f.status for f in first} == {hp.NOT_JUDGED} and hp.FIRST_SAMPLE in first[0].detail
    same = hp.judge_aer(parse_pci_sysfs(sysfs_files(correctable=7)), {"0000:18:00.0": 7, "0000:19:00.0": 0})
    assert [f.status for f in same] == [hp.PASS]
    rose = hp.judge_aer(parse_pci_sysfs(sysfs_files(correctable=9)), {"0000:18:00.0": 7, "0000:19:00.0": 0})
    assert [f.subject for f in rose if f.status == hp.FAIL] == ["GPU 0000:18:00.0"]
    assert "rose by 2" in rose[0].detail
    rebooted = hp.judge_aer(parse_pci_sysfs(sysfs_files(correctable=1)), {"0000:18:00.0": 7, "0000:19:00.0": 0})
    assert [f.status for f in rebooted] == [hp.WARN]  # fell: a reboot between the samples, not judged


def test_aer_correctable_uses_the_one_counter_rule() -> None:
    """health.yaml counter_rises.pcie_aer, judged by verdicts.judge_counter_deltas like every counter."""
    rules = load_health().counter_rises["pcie_aer"]
    assert rules.counters == {hp.AER_CORRECTABLE: "fail"} and "pcieaer-howto" in rules.source
    assert not hasattr(hp, "_delta") and not hasattr(LIMITS, "aer_correctable_max_increase")


def test_ib_counters_read_are_the_counters_judged() -> None:
    """One list: the sysfs files health reads are health.yaml counter_rises.infiniband's counters."""
    from gpuctl.parsers.ib_counters import NAMES

    judged = set(load_health().counter_rises["infiniband"].counters)
    assert {NAMES[c] for c in ib_counter_files()} == judged
    assert {"symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors"} <= set(ib_counter_files())


def test_ib_counters_first_sample_then_change_since_the_last_run() -> None:
    first = hp.judge_ib_counters(parse_pci_sysfs(sysfs_files(symbol=5)), None)
    assert {f.status for f in first} == {hp.NOT_JUDGED}
    assert all(f.detail.startswith(hp.FIRST_SAMPLE) for f in first)
    before = {p: dict(c) for p, c in parse_pci_sysfs(sysfs_files(symbol=5)).ib_counters.items()}
    steady = hp.judge_ib_counters(parse_pci_sysfs(sysfs_files(symbol=5)), before)
    assert [f.status for f in steady] == [hp.PASS]  # 5 symbol errors, none new: absolute value not judged
    rising = hp.judge_ib_counters(parse_pci_sysfs(sysfs_files(symbol=12)), before)
    # the rule of health.yaml counter_rises.infiniband: a symbol error rise warns
    bad = [f for f in rising if f.status != hp.PASS]
    assert [(f.subject, f.status) for f in bad] == [("mlx5_0/1", hp.WARN)] and "rose by 7" in bad[0].detail
    assert "SymbolErrorCounter" in bad[0].detail
    downed = {p: dict(c) for p, c in before.items()}
    downed["mlx5_1/1"]["link_downed"] = 0
    now = parse_pci_sysfs({**sysfs_files(symbol=5), "/sys/class/infiniband/mlx5_1/ports/1/counters/link_downed": "2\n"})
    assert [f.status for f in hp.judge_ib_counters(now, downed)] == [hp.FAIL]
    reset = hp.judge_ib_counters(parse_pci_sysfs(sysfs_files(symbol=0)), before)
    assert [f.status for f in reset] == [hp.WARN] and "fell from 5 to 0" in reset[0].detail


# ---------------------------------------------------------------- NVLink error counters

NVLINK_E = (FIX / "nvlink_errors" / "nvlink-e-h100-gpu0-18links-elided-ml-engineering.txt").read_text()


def _nvlink_e(replay: int = 0, recovery: int = 0, crc: int = 0) -> str:
    """The real `nvidia-smi nvlink -e` (H100, tests/data/fixtures/nvlink_errors) without its
    prompt and elision, link 1's counters set."""
    body = "\n".join(x for x in NVLINK_E.splitlines() if not x.startswith("$") and "[...]" not in x) + "\n"
    return (body.replace("Link 1: Replay Errors: 0", f"Link 1: Replay Errors: {replay}")
            .replace("Link 1: Recovery Errors: 0", f"Link 1: Recovery Errors: {recovery}")
            .replace("Link 1: CRC Errors: 0", f"Link 1: CRC Errors: {crc}"))


def test_nvlink_errors_first_sample_is_a_baseline_then_a_rise_is_judged_per_catalog() -> None:
    first = parse_nvlink_errors(_nvlink_e(replay=4))
    base = hp.judge_nvlink_errors(first, None)
    assert {f.status for f in base} == {hp.NOT_JUDGED} and all(hp.FIRST_SAMPLE in f.detail for f in base)
    kept = hp.nvlink_error_keep(first)
    assert kept["0/1/Replay Errors"] == 4 and json.loads(json.dumps(kept)) == kept  # kept as JSON
    assert [f.status for f in hp.judge_nvlink_errors(parse_nvlink_errors(_nvlink_e(replay=4)), kept)] == [hp.PASS]
    rules = load_health().counter_rises["nvlink"].counters  # replay: warn, recovery: fail, CRC: warn
    replay = hp.judge_nvlink_errors(parse_nvlink_errors(_nvlink_e(replay=9, crc=2)), kept)
    assert sorted((f.subject, f.status) for f in replay) == [("GPU 0 link 1", rules["CRC Errors"]),
                                                              ("GPU 0 link 1", rules["Replay Errors"])]
    assert any("Replay Errors rose by 5" in f.detail for f in replay)
    recovery = hp.judge_nvlink_errors(parse_nvlink_errors(_nvlink_e(replay=4, recovery=1)), kept)
    assert [f.status for f in recovery] == [hp.FAIL] and recovery[0].remediation is Remediation.RESEAT_OR_REPLACE


def test_nvlink_errors_use_the_analyze_counter_rule() -> None:
    """The same two samples judged by analyze's kind (`verdicts.judge_nvlink_errors`) and by health
    give the same statuses per subject: one rule."""
    from gpuctl import verdicts

    before, after = _nvlink_e(replay=4), _nvlink_e(replay=9, recovery=1)
    analyze = verdicts.judge_nvlink_errors(parse_nvlink_errors(before + after))
    health = hp.judge_nvlink_errors(parse_nvlink_errors(after), hp.nvlink_error_keep(parse_nvlink_errors(before)))
    assert sorted((v.subject.label(), v.status.value) for v in analyze) == sorted((f.subject, f.status)
                                                                                  for f in health)


def test_cli_nvlink_errors_from_the_standin_rise_between_two_runs(tmp_path: Path) -> None:
    inv, env = standin_gpu_node(tmp_path, "nvlink_errors gpu=2\n")
    code, out, err = _health(inv, env, "--json")
    node = json.loads(out)["nodes"]["gpu-01"]
    assert code == 0, (out, err)
    assert {f["status"] for f in node["findings"] if f["check"] == "nvlink_errors"} == {hp.NOT_JUDGED}
    os.utime(tmp_path / "node" / "faults", (time.time() - 30, time.time() - 30))  # the errors keep coming
    code, out, err = _health(inv, env, "--json")
    node = json.loads(out)["nodes"]["gpu-01"]
    bad = [f for f in node["findings"] if f["check"] == "nvlink_errors" and f["status"] != hp.PASS]
    assert {(f["subject"], f["status"]) for f in bad} == {("GPU 2 link 0", hp.WARN)}, bad
    assert code == 0  # replay and CRC errors warn (health.yaml counter_rises.nvlink), they do not drain


HGX_PATH = PathLimit(code="PXB", source="test", applies_to=Workload(nics_per_gpu=1, source="one NIC per GPU"))


def test_numa_placement_as_the_sku_expects() -> None:
    good = hp.judge_numa(parse_pci_sysfs(sysfs_files()), HGX_PATH, 2)
    assert {f.status for f in good} == {hp.PASS}
    bad = hp.judge_numa(parse_pci_sysfs(sysfs_files(nic_numa=(0, 0))), HGX_PATH, 2)
    assert [f.subject for f in bad if f.status == hp.FAIL] == ["GPU 0000:19:00.0"]
    reported = hp.judge_numa(parse_pci_sysfs(sysfs_files(nic_numa=(0, 0))), None, 2)
    assert {f.status for f in reported} == {hp.NOT_JUDGED} and "NUMA 1" in reported[1].detail
    no_numa = hp.judge_numa(parse_pci_sysfs(sysfs_files(gpu_numa=(-1, -1))), HGX_PATH, 2)
    assert [f.status for f in no_numa] == [hp.NOT_JUDGED]


# ---------------------------------------------------------------- 5. firmware, 7. Xid

def test_firmware_the_odd_node_out_is_named_and_the_lock_is_compared() -> None:
    found = {"gpu-01": {"vbios/0": "96.00.74.00.01"}, "gpu-02": {"vbios/0": "96.00.74.00.01"},
             "gpu-03": {"vbios/0": "96.00.61.00.01"}}
    out = hp.judge_firmware(found)
    assert [(f.node, f.status) for f in out if f.status == hp.FAIL] == [("gpu-03", hp.FAIL)]
    assert {f.node for f in out if f.status == hp.PASS} == {"gpu-01", "gpu-02"}
    tie = hp.judge_firmware({"a": {"hca/mlx5_0": "1"}, "b": {"hca/mlx5_0": "2"}})
    assert {f.status for f in tie} == {hp.NOT_JUDGED}
    locked = hp.judge_firmware({"a": {"hca/mlx5_0": "2"}}, {"a": {"hca/mlx5_0": "1"}})
    assert [f.status for f in locked] == [hp.FAIL] and "lock records 1" in locked[0].detail
    alone = hp.judge_firmware({"a": {"hca/mlx5_0": "2"}})
    assert [f.status for f in alone] == [hp.NOT_JUDGED]
    only_one_has_it = hp.judge_firmware({"a": {"hca/mlx5_0": "2", "hca/mlx5_9": "7"}, "b": {"hca/mlx5_0": "2"}})
    assert {(f.node, f.subject, f.status) for f in only_one_has_it} == {
        ("a", "hca/mlx5_0", hp.PASS), ("b", "hca/mlx5_0", hp.PASS), ("a", "hca/mlx5_9", hp.NOT_JUDGED)}


def test_xid_since_boot_reuses_the_xid_policy() -> None:
    log = "[  512.1] NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
    out = hp.judge_xid(parse_xid_log(log), load_health())
    assert [f.status for f in out] == [hp.FAIL]
    clean = hp.judge_xid(parse_xid_log("[    1.0] Linux version 6.1\n"), load_health())
    assert [f.status for f in clean] == [hp.PASS]


# ---------------------------------------------------------------- the command

def _health(inv: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["health", str(inv), *args], env=env)
    return r.exit_code, r.stdout, r.stderr


def test_cli_healthy_node_exit_0(tmp_path: Path) -> None:
    inv, env = standin_gpu_node(tmp_path)
    code, out, err = _health(inv, env)
    assert code == 0, (out, err)
    assert out == "" and "gpu-01: healthy" in err


def test_cli_throttle_fault_exit_1_with_the_exact_drain_line(tmp_path: Path) -> None:
    inv, env = standin_gpu_node(tmp_path, "throttle gpu=3 reason=hw_power_brake_slowdown\n")
    code, out, _err = _health(inv, env)
    assert code == 1
    lines = out.splitlines()
    assert lines == ["gpuctl: clock_events: gpu-01 GPU 3 (00000000:5D:00.0): clocks held down: HW Power Brake "
                     "Slowdown: external power brake asserted: check the PSUs and the board's power cables (idle: "
                     "0 % utilization) → reseat_or_replace"]
    m = DRAIN.match(lines[0])
    assert m and m["check"] == "clock_events" and m["remediation"] == "reseat_or_replace"


def test_cli_fabric_not_ready_and_xid_json(tmp_path: Path) -> None:
    inv, env = standin_gpu_node(tmp_path, "fabric_not_ready\n",
                     dmesg="[  512.1] NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.\n")
    code, out, _ = _health(inv, env, "--json")
    assert code == 1
    data = json.loads(out)
    node = data["nodes"]["gpu-01"]
    assert data["status"] == UNHEALTHY and node["status"] == UNHEALTHY
    checks = {f["check"] for f in node["failed"]}
    assert checks == {"xid", "nvswitch_fabric"}
    assert node["drain"].startswith("gpuctl: xid: gpu-01 ") and "(+8 more: nvswitch_fabric)" in node["drain"]
    assert DRAIN.match(node["drain"])


def test_cli_exit_2_bad_input_and_3_could_not_run(tmp_path: Path) -> None:
    inv, env = standin_gpu_node(tmp_path)
    code, _, err = _health(tmp_path / "missing.yaml", env)
    assert code == 2 and "error:" in err
    code, _, err = _health(inv, env, "--limit", "nope-*")
    assert code == 2
    (Path(env["PATH"].split(":")[0]) / "nvidia-smi").unlink()  # the tool is gone: nothing to judge the GPUs
    code, out, err = _health(inv, env)
    assert code == 3 and out == "" and "could not check" in err


def test_cli_counters_state_first_sample_then_judged(tmp_path: Path) -> None:
    inv, env = standin_gpu_node(tmp_path)
    _health(inv, env)
    state = tmp_path / "state" / "health" / "lab" / "gpu-01.json"
    assert state.is_file() and oct(state.stat().st_mode & 0o777) == "0o600"
    assert {"aer_correctable", "ib_counters", "nvlink_errors", "taken_at"} <= set(json.loads(state.read_text()))


# ---------------------------------------------------------------- the per-node limit

class _Host:
    """A testinfra-like host answering from a table; `hang` makes every command block."""

    def __init__(self, answers: dict[str, str], hang: threading.Event | None = None) -> None:
        self.answers, self.hang = answers, hang
        self.commands: list[str] = []

    def run(self, command: str, *args: str, **kwargs: object) -> SimpleNamespace:
        self.commands.append(command)
        if self.hang is not None:
            self.hang.wait(30)
        for key, text in self.answers.items():
            if key in command:
                return SimpleNamespace(rc=0, stdout=text, stderr="")
        return SimpleNamespace(rc=0, stdout="", stderr="")


NVLINK_E_ZERO = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08x}-cdef-abdc-abcd-abababababab)\n"
                        + "".join(f"\t Link {n}: Replay Errors: 0\n\t Link {n}: Recovery Errors: 0\n"
                                  f"\t Link {n}: CRC Errors: 0\n" for n in range(18)) for i in range(8))


def _xml_8gpu() -> str:
    """The real H200 `nvidia-smi -q -x` with its one GPU repeated as 8, fabric registered."""
    xml = (FIX / "nvidia_smi" / "nvidia-smi-q-x-h200-1gpu-580.159-real.xml").read_text()
    head, rest = xml.split("<gpu id=", 1)
    gpu, tail = ("<gpu id=" + rest).split("</gpu>", 1)
    gpu = gpu.replace("<state>N/A</state>", "<state>Completed</state>", 1).replace(
        "<status>N/A</status>", "<status>Success</status>", 1)
    gpus = "".join(re.sub(r'<gpu id="[^"]+"', f'<gpu id="00000000:{0x18 + i:02X}:00.0"', gpu) + "</gpu>"
                   for i in range(8))
    return head + gpus + tail


def test_a_hanging_node_is_cut_at_the_limit_without_blocking_the_others(tmp_path: Path) -> None:
    loaded = load_inventory(str(Path(__file__).parents[1] / "data" / "inventories" / "lab-placeholder.yaml"))
    specs = resolve(loaded, ())
    assert len(specs) >= 2
    release = threading.Event()
    answers = {"nvidia-smi -q -x": _xml_8gpu(), "nvlink -e": NVLINK_E_ZERO,
               "dmesg": "[ 1.0] Linux version 6.1\n"}

    def host_for(spec):
        return _Host(answers, None if spec.node == specs[0].node else release)

    start = time.monotonic()
    try:
        result = run_health(loaded, specs, host_for=host_for, per_node_s=1.5, keep_state=False, lock={})
    finally:
        release.set()
    took = time.monotonic() - start
    assert took < 4, took
    first, second = result.nodes[specs[0].node], result.nodes[specs[1].node]
    assert first.status == HEALTHY, first.as_dict()
    judged = {(f.check, f.status) for f in first.findings}
    assert {("nvswitch_fabric", hp.PASS), ("nvlink_errors", hp.NOT_JUDGED)} <= judged
    assert second.status == COULD_NOT_RUN and "per-node limit of 1.5 s" in second.unreachable
    assert result.status == COULD_NOT_RUN


def test_a_cut_node_gives_its_slot_to_the_next(tmp_path: Path) -> None:
    """One node at a time: the first hangs, is cut at the limit, and the second still runs."""
    loaded = load_inventory(str(Path(__file__).parents[1] / "data" / "inventories" / "lab-placeholder.yaml"))
    specs = resolve(loaded, ())[:2]
    release = threading.Event()
    answers = {"dmesg": "[ 1.0] Linux version 6.1\n"}
    start = time.monotonic()
    try:
        result = run_health(loaded, specs, per_node_s=1.0, keep_state=False, lock={}, parallel=1,
                            host_for=lambda s: _Host(answers, release if s.node == specs[0].node else None))
    finally:
        release.set()
    assert time.monotonic() - start < 3.5
    assert "per-node limit" in result.nodes[specs[0].node].unreachable
    assert not result.nodes[specs[1].node].unreachable
    assert result.nodes[specs[1].node].findings  # it ran: its Xid check passed


def test_drain_line_has_no_control_characters() -> None:
    n = NodeHealth("gpu-01", [hp.HealthFinding("xid", "GPU 1", hp.FAIL, "bad\nline\x1b[31m", Remediation.REBOOT)])
    line = n.drain_line()
    assert line is not None and "\n" not in line and "\x1b" not in line and DRAIN.match(line)


# ---------------------------------------------------------------- the same checks in verify

def test_verify_runs_the_same_judgements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.checks_support import bundle, failure, inventory_spec, probe, role

    monkeypatch.setenv("GPUCTL_STATE_DIR", str(tmp_path / "state"))
    spec = inventory_spec("h100-8x4")
    drv, fm, net = role("nvidia_driver"), role("fabricmanager"), role("network")
    idle = REAL_Q.replace("HW Power Brake Slowdown       : Active", "HW Power Brake Slowdown       : Not Active") \
        .replace("SW Thermal Slowdown               : Active", "SW Thermal Slowdown               : Not Active")
    drv.test_health_clock_events(None, spec, probe(spec, {"nvidia-smi -q": idle}))
    f = failure(drv.test_health_clock_events, spec, probe(spec, {"nvidia-smi -q": REAL_Q}))
    assert f.subject == "GPU 2 (00000000:75:00.0)" and f.remediation is Remediation.RESEAT_OR_REPLACE
    pad = "        Gpu                               : "
    busy = idle.replace(pad + "0 %", pad + "90 %")
    with pytest.raises(pytest.skip.Exception, match="GPU busy"):
        drv.test_health_clock_events(None, spec, probe(spec, {"nvidia-smi -q": busy}))
    fm.test_health_nvswitch_fabric(None, spec, probe(spec, {"nvidia-smi -q": REAL_Q}))
    bad_q = REAL_Q.replace("Status                            : Success", "Status                            : Failure")
    assert failure(fm.test_health_nvswitch_fabric, spec, probe(spec, {"nvidia-smi -q": bad_q})).remediation \
        is Remediation.REBOOT
    sysfs = bundle(sysfs_files(fatal=2))
    f = failure(drv.test_health_pcie_aer, spec, probe(spec, {"aer_dev": sysfs}))
    assert "GPU 0000:18:00.0" in f.message and "2 fatal" in f.message
    with pytest.raises(pytest.skip.Exception, match="first sample"):
        net.test_health_ib_counters(None, spec, probe(spec, {"aer_dev": bundle(sysfs_files())}))


def test_standin_vbios_fault_makes_one_node_the_odd_one_out(tmp_path: Path) -> None:
    """The lab's `vbios_differs` fault changes the stand-in's VBIOS; judged across three nodes,
    only the faulted node is named."""
    import subprocess

    versions = {}
    for node, faults in (("gpu-01", ""), ("gpu-02", "vbios_differs version=96.00.61.00.01\n"), ("gpu-03", "")):
        _inv, env = standin_gpu_node(tmp_path / node, faults)
        bindir = Path(env["PATH"].split(":")[0])
        out = subprocess.run([str(bindir / "nvidia-smi"), "-q", "-x"], capture_output=True, text=True, timeout=30,
                             check=True)
        versions[node] = vbios_versions(parse_nvidia_smi_xml(out.stdout).gpus)
    failed = [f for f in hp.judge_firmware(versions) if f.status == hp.FAIL]
    assert {f.node for f in failed} == {"gpu-02"} and len(failed) == 8


def test_a_corrupt_previous_sample_is_a_new_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.health import load_previous, save_sample, state_file

    monkeypatch.setenv("GPUCTL_STATE_DIR", str(tmp_path / "state"))
    assert load_previous("lab", "gpu-01") is None
    save_sample("lab", "gpu-01", {"ib_counters": {"mlx5_0/1": {"symbol_error": 3}}})
    assert load_previous("lab", "gpu-01")["ib_counters"] == {"mlx5_0/1": {"symbol_error": 3}}
    state_file("lab", "gpu-01").write_text("{not json")
    assert load_previous("lab", "gpu-01") is None



# ---------------------------------------------------------------- 8. ACS on the PCIe switches

# Lines as printed by `lspci -D -vvv` on real PLX switches: the device line of a PEX 8725 port
# (HeyMeco/Rockchip-pcie-devices#6), the ACSCtl lines of the broken (ACS on) and working state
# (NVIDIA/nccl#304, #606); see tests/data/fixtures/health/SOURCES.md.
ACS_ON = "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
ACS_OFF = "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"


def lspci(ctl: dict[str, str], denied: tuple[str, ...] = ()) -> str:
    out = []
    for bdf in ("0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:17:01.0"):
        out.append(f"{bdf} PCI bridge: PLX Technology, Inc. PEX 8725 24-Lane, 10-Port PCI Express Gen 3 (8.0 GT/s) "
                   "Multi-Root Switch with DMA (rev ca) (prog-if 00 [Normal decode])")
        out.append("\tControl: I/O- Mem- BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B-")
        if bdf in denied:
            out.append("\tCapabilities: <access denied>")
        elif bdf in ctl:
            out.append("\tCapabilities: [f24 v1] Access Control Services")
            out.append("\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+")
            out.append("\t\t" + ctl[bdf])
        out.append("")
    return "\n".join(out)


def test_acs_redirect_on_a_switch_port_fails_and_the_root_port_is_not_judged() -> None:
    sysfs = parse_pci_sysfs(sysfs_files(switch=True))
    assert hp.switch_bridges(sysfs) == ["0000:16:00.0", "0000:17:00.0", "0000:17:01.0"]
    off = {b: ACS_OFF for b in ("0000:16:00.0", "0000:17:00.0", "0000:17:01.0")}
    good = hp.judge_acs(sysfs, parse_lspci(lspci({**off, "0000:15:01.0": ACS_ON})))
    # the root port's ACS is not judged: one pass over the three switch ports
    assert [f.status for f in good] == [hp.PASS] and "3 devices" in good[0].detail
    bad = hp.judge_acs(sysfs, parse_lspci(lspci({**off, "0000:17:01.0": ACS_ON})))
    failed = [f for f in bad if f.status == hp.FAIL]
    assert [f.subject for f in failed] == ["0000:17:01.0"] and "ReqRedir+ CmpltRedir+" in failed[0].detail
    assert failed[0].remediation is Remediation.RECONFIGURE
    denied = hp.judge_acs(sysfs, parse_lspci(lspci(off, denied=("0000:16:00.0",))))
    assert [f.status for f in denied].count(hp.NOT_JUDGED) == 1
    assert hp.switch_bridges(parse_pci_sysfs(sysfs_files())) == []  # GPUs straight on root ports: no switch


def test_acs_reads_lspci_with_the_analyze_parser() -> None:
    """One reader: `gpuctl.parsers.lspci` (analyze's lspci kind), which also marks a device
    whose capabilities lspci could not read (not root)."""
    with pytest.raises(ParseError):
        parse_lspci("lspci: -d: Invalid class code\n")
    devices = parse_lspci(lspci({}, denied=("0000:16:00.0",))).devices
    assert [d.bus_id for d in devices if d.caps_denied] == ["0000:16:00.0"]
    assert not hasattr(__import__("gpuctl.parsers.health").parsers.health, "parse_lspci_acs")


def test_verify_acs_check(tmp_path: Path) -> None:
    from tests.unit.checks_support import bundle, failure, inventory_spec, probe, role

    spec = inventory_spec("h100-8x4")
    drv = role("nvidia_driver")
    files = bundle(sysfs_files(switch=True))
    off = {b: ACS_OFF for b in ("0000:16:00.0", "0000:17:00.0", "0000:17:01.0")}
    drv.test_health_pcie_acs(None, spec, probe(spec, {"aer_dev": files, "lspci -D -vvv": lspci(off)}))
    f = failure(drv.test_health_pcie_acs, spec, probe(spec, {"aer_dev": files,
                                                            "lspci -D -vvv": lspci({**off, "0000:16:00.0": ACS_ON})}))
    assert f.subject == "0000:16:00.0"
    with pytest.raises(pytest.skip.Exception, match="no PCIe switch"):
        drv.test_health_pcie_acs(None, spec, probe(spec, {"aer_dev": bundle(sysfs_files())}))


# ---------------------------------------------------------------- verify: NVLink counters and firmware (issue 19)

def test_verify_judges_nvlink_counters_against_the_health_sample(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """verify had no NVLink error-counter check (only `gpuctl health` judged them)."""
    from gpuctl.health import save_sample
    from tests.unit.checks_support import failure, inventory_spec, probe, role

    monkeypatch.setenv("GPUCTL_STATE_DIR", str(tmp_path / "state"))
    spec = inventory_spec("h100-8x4")
    drv = role("nvidia_driver")
    with pytest.raises(pytest.skip.Exception, match="first sample"):
        drv.test_health_nvlink_errors(None, spec, probe(spec, {"nvlink -e": _nvlink_e()}))
    save_sample(spec.cluster, spec.node, {"nvlink_errors": hp.nvlink_error_keep(parse_nvlink_errors(_nvlink_e()))})
    drv.test_health_nvlink_errors(None, spec, probe(spec, {"nvlink -e": _nvlink_e()}))  # unchanged: pass
    f = failure(drv.test_health_nvlink_errors, spec, probe(spec, {"nvlink -e": _nvlink_e(recovery=2)}))
    assert f.subject == "GPU 0 link 1" and "Recovery Errors" in f.message


def test_verify_judges_firmware_against_the_lock(tmp_path: Path) -> None:
    """verify had no firmware check: the node's VBIOS and HCA firmware against its lock entry."""
    from tests.unit.checks_support import bundle, failure, inventory_spec, probe, role

    spec = inventory_spec("h100-8x4")
    drv, net = role("nvidia_driver"), role("network")
    p = probe(spec, {"nvidia-smi -q": REAL_Q, "aer_dev": bundle(sysfs_files())})
    same = {**{f"vbios/{i}": "96.00.74.00.01" for i in range(8)}, "hca/mlx5_0": "28.39.1002",
            "hca/mlx5_1": "28.39.1002"}
    drv.test_health_gpu_firmware(None, spec, p, same)
    net.test_health_hca_firmware(None, spec, p, same)
    f = failure(drv.test_health_gpu_firmware, spec, p, {**same, "vbios/3": "96.00.61.00.01"})
    assert f.subject == "vbios/3" and "the lock records 96.00.61.00.01" in f.message
    f = failure(net.test_health_hca_firmware, spec, p, {**same, "hca/mlx5_1": "28.40.1000"})
    assert f.subject == "hca/mlx5_1"
    with pytest.raises(pytest.skip.Exception, match="no lock file entry"):
        drv.test_health_gpu_firmware(None, spec, p, None)


def test_verify_passes_the_lock_firmware_to_the_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner hands the lock file's firmware to the check session (`locked_firmware` fixture):
    verify of a lab node whose lock records another VBIOS fails `health_gpu_firmware` naming it."""
    from gpuctl.checks.runner import run_verify
    from gpuctl.lock.model import NodeLock, build_lock, lock_firmware, write_lock

    inv, env = standin_gpu_node(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    loaded = load_inventory(str(inv))
    assert lock_firmware(loaded) is None
    node = loaded.inventory.nodes[0].name
    write_lock(build_lock(loaded, {node: NodeLock(firmware={"vbios/0": "96.00.61.00.01"})}),
               inv.with_name(inv.stem + ".lock.yaml"))
    assert lock_firmware(loaded) == {node: {"vbios/0": "96.00.61.00.01"}}
    result = run_verify(loaded, roles=("nvidia_driver",))
    checks = {c.check: c for c in result.hosts[node].checks}
    fw = checks["nvidia_driver.health_gpu_firmware"]
    assert fw.status.value == "fail" and "vbios/0" in fw.message and "96.00.61.00.01" in fw.message, fw


# ---------------------------------------------------------------- counters: the baseline across runs (issue 19)

BOOT_A, BOOT_B = "6f1c2e64-1b1a-4a43-9d6c-3f0f2d9e6a01", "0b7d9a55-88c2-4f0e-a0b5-8d1e8e1c2b02"


def _counter_host(boot: str, aer: int, replay: int = 0, nvlink_rc: int = 0) -> _Host:
    from tests.unit.checks_support import bundle

    files = sysfs_files(correctable=aer)
    files["/proc/sys/kernel/random/boot_id"] = boot + "\n"
    host = _Host({"aer_dev": bundle(files), "nvidia-smi -q -x": _xml_8gpu(), "dmesg": "[ 1.0] Linux 6.1\n",
                  "nvlink -e": _nvlink_e(replay=replay)})
    if nvlink_rc:  # the tool fails this run: nvlink -e answers an NVML error
        host.answers["nvlink -e"] = ""
        real_run = host.run

        def run(command: str, *args: str, **kwargs: object) -> SimpleNamespace:
            if "nvlink -e" in command:
                host.commands.append(command)
                return SimpleNamespace(rc=nvlink_rc, stdout="Failed to initialize NVML: Unknown Error\n", stderr="")
            return real_run(command, *args, **kwargs)
        host.run = run  # type: ignore[method-assign]
    return host


def _counter_run(loaded, specs, hosts: dict[str, _Host]):
    result = run_health(loaded, specs, host_for=lambda s: hosts[s.node], lock={})
    return {n: {(f.check, f.status) for f in h.findings if f.check in ("pcie_aer", "nvlink_errors", "counters")}
            for n, h in result.nodes.items()}, result


def test_counter_baseline_is_kept_per_node_across_runs_and_reboots(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.health import load_previous

    monkeypatch.setenv("GPUCTL_STATE_DIR", str(tmp_path / "state"))
    loaded = load_inventory(str(Path(__file__).parents[1] / "data" / "inventories" / "lab-placeholder.yaml"))
    specs = resolve(loaded, ())[:2]
    a, b = specs[0].node, specs[1].node
    # 1. first run: every counter a baseline, kept per node
    seen, _ = _counter_run(loaded, specs, {a: _counter_host(BOOT_A, 5), b: _counter_host(BOOT_B, 7)})
    assert seen[a] == seen[b] == {("pcie_aer", hp.NOT_JUDGED), ("nvlink_errors", hp.NOT_JUDGED)}
    assert load_previous("lab", a)["aer_correctable"]["0000:18:00.0"] == 5
    assert load_previous("lab", b)["aer_correctable"]["0000:18:00.0"] == 7
    assert load_previous("lab", a)["boot_id"] == BOOT_A
    # 2. node a's AER rises: judged against a's own baseline only
    seen, _ = _counter_run(loaded, specs, {a: _counter_host(BOOT_A, 6), b: _counter_host(BOOT_B, 7)})
    assert (hp.FAIL in {s for c, s in seen[a] if c == "pcie_aer"}) and ("pcie_aer", hp.FAIL) not in seen[b]
    # 3. nvlink -e fails on a this run: its NVLink baseline survives (it was dropped before)
    seen, res = _counter_run(loaded, specs, {a: _counter_host(BOOT_A, 6, nvlink_rc=255), b: _counter_host(BOOT_B, 7)})
    assert "nvlink_errors" in res.nodes[a].could_not_run
    assert "0/1/Replay Errors" in load_previous("lab", a)["nvlink_errors"]
    # 4. the next run judges the rise since run 2, not a new baseline
    seen, _ = _counter_run(loaded, specs, {a: _counter_host(BOOT_A, 6, replay=3), b: _counter_host(BOOT_B, 7)})
    assert ("nvlink_errors", hp.WARN) in seen[a] and ("nvlink_errors", hp.NOT_JUDGED) not in seen[a]
    # 5. b rebooted (new boot id) and counted 3 AER errors since: all of them came after the last
    #    sample, judged from zero (a fall 7 → 3 was only a warning before)
    seen, res = _counter_run(loaded, specs, {a: _counter_host(BOOT_A, 6, replay=3),
                                             b: _counter_host(BOOT_A.replace("6f", "77"), 3)})
    assert ("pcie_aer", hp.FAIL) in seen[b] and ("counters", hp.NOT_JUDGED) in seen[b]
    assert any("rose by 3 (0 → 3)" in f.detail for f in res.nodes[b].findings), res.nodes[b].as_dict()
    assert ("counters", hp.NOT_JUDGED) not in seen[a]
    # 6. a counter cleared within the same boot (it fell): a warning, and the new value is the baseline
    seen, _ = _counter_run(loaded, specs, {a: _counter_host(BOOT_A, 1, replay=3), b: _counter_host(BOOT_B, 7)})
    assert ("pcie_aer", hp.WARN) in seen[a] and ("pcie_aer", hp.FAIL) not in seen[a]
    seen, _ = _counter_run(loaded, specs, {a: _counter_host(BOOT_A, 1, replay=3), b: _counter_host(BOOT_B, 7)})
    assert seen[a] == {("pcie_aer", hp.PASS), ("nvlink_errors", hp.PASS)}


def test_verify_firmware_check_on_a_node_without_firmware_is_not_judged_never_an_error() -> None:
    """Soft-RoCE (the lab) has no HCA firmware: with no lock entry, or an entry that locks
    nothing, verify's firmware check is skipped (it errored on the merged tree's lab run);
    with firmware locked but none read, it could not run."""
    import pytest as _pytest

    from gpuctl.checks.api import CouldNotRun, judge_firmware_lock

    for locked in (None, {}):
        with _pytest.raises(_pytest.skip.Exception):
            judge_firmware_lock(None, {}, locked)
    with _pytest.raises(CouldNotRun):
        judge_firmware_lock(None, {}, {"hca/rxe0": "1.0"})
