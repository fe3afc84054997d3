"""Kernel-log Xid parser and verdicts on real public logs (tests/data/fixtures/xid/SOURCES.md).

Each fixture test asserts exact counts, codes, PCI addresses and the verdict; the format
tests below them hold the line shapes the driver prints that no fixture here contains.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.analyze import analyze_text
from gpuctl.catalog import load_health
from gpuctl.cli.main import main
from gpuctl.parsers.xid import FALLEN_OFF_BUS, INIT_FAILED, PROBE_FAILED, parse_xid_log
from gpuctl.remediation import Remediation
from gpuctl.verdicts import Status

FIX = Path(__file__).parents[1] / "data" / "fixtures" / "xid"


def text(name: str) -> str:
    return (FIX / name).read_text()


def verdicts(log: str) -> list[tuple[str, str | None, object, Status, Remediation]]:
    a = analyze_text("xid", log)
    return [(v.check, v.subject.bus_id, v.value, v.status, v.remediation) for v in a.verdicts]


# ---------------------------------------------------------------- bug 1: lost GPU, no Xid line


def test_syslog_fallen_off_bus_without_xid_fails_the_gpu() -> None:
    log = text("syslog-h100-fallen-off-bus-no-xid-probe-failed.txt")
    r = parse_xid_log(log, strict=True)
    assert (r.events, r.sxid_events, r.lines_read) == ((), (), 13)
    assert [(e.bus_id, e.kind, e.detail) for e in r.lost] == [
        ("0000:5d:00.0", FALLEN_OFF_BUS, "PCI ID: 10de:2330"), ("0000:5d:00.0", PROBE_FAILED, "error -1")]
    assert r.lost[0].line.count("\n") == 2  # the 3-line message is one event
    a = analyze_text("xid", log)
    assert a.status is Status.FAIL
    (v,) = a.verdicts
    assert (v.check, v.subject.bus_id, v.value, v.status, v.remediation) == (
        "gpu_lost", "0000:5d:00.0", FALLEN_OFF_BUS, Status.FAIL, Remediation.RESEAT_OR_REPLACE)
    assert "fell off the bus (PCI ID: 10de:2330)" in v.message and "probe failed (error -1)" in v.message
    assert v.threshold == "on the bus and initialised"


def test_dmesg_fallen_off_bus_after_reload_indented_continuation_lines() -> None:
    log = text("dmesg-h100-fallen-off-bus-no-xid-after-reload.txt")
    r = parse_xid_log(log, strict=True)
    assert (r.events, r.lines_read) == ((), 16)
    assert [(e.bus_id, e.kind) for e in r.lost] == [("0000:5d:00.0", FALLEN_OFF_BUS), ("0000:5d:00.0", PROBE_FAILED)]
    assert verdicts(log) == [("gpu_lost", "0000:5d:00.0", FALLEN_OFF_BUS, Status.FAIL, Remediation.RESEAT_OR_REPLACE)]


def test_xid79_and_its_fallen_off_bus_line_fail_the_gpu_once() -> None:
    """The runtime "GPU has fallen off the bus." line is a lost-GPU event, but the GPU's Xid 79
    already fails it with the same remediation: one verdict, and the Xid count stays 1."""
    log = text("dmesg-h100-xid79-fallen-off-bus-multiline.txt")
    r = parse_xid_log(log, strict=True)
    assert [(e.bus_id, e.xid, e.pid, e.process, e.message) for e in r.events] == [
        ("0000:5d:00", 79, "<unknown>", "<unknown>", "GPU has fallen off the bus.")]
    assert [(e.bus_id, e.gpu, e.kind) for e in r.lost] == [("0000:5d:00.0", "0000:5d:00", FALLEN_OFF_BUS)]
    assert verdicts(log) == [("xid", "0000:5d:00", 79, Status.FAIL, Remediation.RESEAT_OR_REPLACE)]


@pytest.mark.parametrize(
    ("log", "bus_id", "kind", "detail"),
    [
        # older drivers: the PCI ID on the first line, two lines in all
        ("[  9.1] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1e07) installed in this\n"
         "[  9.1] NVRM: system has fallen off the bus and is not responding to commands.\n",
         "0000:01:00.0", FALLEN_OFF_BUS, "PCI ID: 10de:1e07"),
        # one line
        ("[  9.1] NVRM: The NVIDIA GPU 0000:05:00.0 installed in this system has fallen off the bus and is not "
         "responding to commands.\n", "0000:05:00.0", FALLEN_OFF_BUS, ""),
        # the runtime line alone
        ("[  9.1] NVRM: GPU 0000:1B:00.0: GPU has fallen off the bus.\n", "0000:1b:00.0", FALLEN_OFF_BUS, ""),
        # newer kernels' probe wording
        ("[  9.1] nvidia 0000:02:00.0: probe with driver nvidia failed with error -1\n",
         "0000:02:00.0", PROBE_FAILED, "error -1"),
        ("Aug 12 06:54:37 king kernel: NVRM: GPU 0000:39:00.0: RmInitAdapter failed! (0x62:0x40:2393)\n",
         "0000:39:00.0", INIT_FAILED, "(0x62:0x40:2393)"),
        # older drivers print RmInitAdapter without the address
        ("[ 20.3] NVRM: RmInitAdapter failed! (0x30:0xffffffff:819)\n", None, INIT_FAILED, "(0x30:0xffffffff:819)"),
    ],
)
def test_lost_gpu_line_shapes(log: str, bus_id: str | None, kind: str, detail: str) -> None:
    (e,) = parse_xid_log(log, strict=True).lost
    assert (e.bus_id, e.kind, e.detail) == (bus_id, kind, detail)
    (v,) = analyze_text("xid", log).verdicts
    assert (v.check, v.status, v.subject.bus_id) == ("gpu_lost", Status.FAIL, bus_id)
    assert v.remediation is (Remediation.RESEAT_OR_REPLACE if kind == FALLEN_OFF_BUS else Remediation.REBOOT)
    if bus_id is None:
        assert "names no PCI address" in v.message


def test_not_supported_gpu_message_is_not_a_lost_gpu() -> None:
    log = ("[  9.1] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1e07)\n"
           "               NVRM: installed in this system is\n"
           "               NVRM: not supported by the NVIDIA 390.157 driver release.\n")
    r = parse_xid_log(log, strict=True)
    assert (r.events, r.lost) == ((), ())


def test_lost_gpu_messages_are_grouped_per_gpu() -> None:
    log = ("[ 1.0] NVRM: GPU 0000:39:00.0: RmInitAdapter failed! (0x62:0x40:2393)\n"
           "[ 1.1] NVRM: GPU 0000:39:00.0: RmInitAdapter failed! (0x62:0x40:2393)\n"
           "[ 1.2] nvidia: probe of 0000:3a:00.0 failed with error -1\n")
    assert len(parse_xid_log(log).lost) == 3
    assert verdicts(log) == [("gpu_lost", "0000:39:00.0", INIT_FAILED, Status.FAIL, Remediation.REBOOT),
                             ("gpu_lost", "0000:3a:00.0", PROBE_FAILED, Status.FAIL, Remediation.REBOOT)]


def test_cli_exits_1_on_a_lost_gpu_without_xid() -> None:
    res = CliRunner().invoke(main, ["analyze", "xid", str(FIX / "syslog-h100-fallen-off-bus-no-xid-probe-failed.txt")])
    assert res.exit_code == 1, res.output


# ---------------------------------------------------------------- bug 2: Xids that need a reset/drain


def test_fatal_list_covers_nvidia_reset_and_reboot_codes() -> None:
    codes = set(load_health().xid_fatal.codes)
    assert {46, 48, 62, 64, 79, 95, 109, 110, 119, 120, 136, 140, 143, 149, 150, 154, 155, 156, 158} <= codes
    assert {13, 31, 43, 94, 147, 148} & codes == set()
    assert "docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html" in load_health().xid_fatal.source


def test_gb200_xid149_netir_fatal_and_xid154_drain_and_reset_fail() -> None:
    log = text("journalctl-gb200-xid149-netir-fatal-xid154-drain-reset.txt")
    r = parse_xid_log(log, strict=True)
    assert [(e.bus_id, e.xid, e.severity, e.recovery_action, e.recovery_action_code) for e in r.events] == [
        ("0018:01:00", 149, "Fatal", None, None), ("0018:01:00", 154, None, "Drain and Reset", 4)]
    assert r.lost == ()
    assert verdicts(log) == [("xid", "0018:01:00", 149, Status.FAIL, Remediation.REBOOT),
                             ("xid", "0018:01:00", 154, Status.FAIL, Remediation.REBOOT)]
    assert "'Drain and Reset'" in analyze_text("xid", log).verdicts[1].message


def test_xid154_pf_flr_after_xid51_fails() -> None:
    log = text("journal-k-xid51-xid154-reset-required-grep.txt")
    r = parse_xid_log(log, strict=True)  # grep output: no kernel-line prefix, the Xid lines carry it
    assert r.lines_read == 3
    assert [(e.bus_id, e.xid, e.recovery_action, e.recovery_action_code) for e in r.events] == [
        ("0000:0d:00", 51, None, None), ("0000:0d:00", 154, "PF FLR", 1)]
    assert verdicts(log) == [("xid", "0000:0d:00", 51, Status.WARN, Remediation.NONE),
                             ("xid", "0000:0d:00", 154, Status.FAIL, Remediation.REBOOT)]


@pytest.mark.parametrize(
    ("action", "status", "remediation"),
    [
        ("0x0 (None)", Status.PASS, Remediation.NONE),
        ("0x1 (GPU Reset Required)", Status.FAIL, Remediation.REBOOT),
        ("0x2 (Node Reboot Required)", Status.FAIL, Remediation.REBOOT),
        ("0x2 (OS Reboot)", Status.FAIL, Remediation.REBOOT),
        ("0x3 (Drain P2P)", Status.FAIL, Remediation.RERUN),
        ("0x4 (Drain and Reset)", Status.FAIL, Remediation.REBOOT),
        ("0x5 (Recover IMEX Domain)", Status.FAIL, Remediation.RECONFIGURE),
        ("0x6 (Something New)", Status.FAIL, Remediation.REBOOT),  # unknown label: by its number
        ("0x9 (Something Else)", Status.FAIL, Remediation.REBOOT),  # unknown both: still not a pass
    ],
)
def test_xid154_is_judged_by_the_action_it_names(action: str, status: Status, remediation: Remediation) -> None:
    log = f"[ 5.0] NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x1 (PF FLR) to {action}\n"
    assert verdicts(log) == [("xid", "0000:02:00", 154, status, remediation)]


def test_xid154_without_a_readable_action_fails() -> None:
    log = "[ 5.0] NVRM: Xid (PCI:0000:02:00): 154, something the driver never printed\n"
    assert verdicts(log) == [("xid", "0000:02:00", 154, Status.FAIL, Remediation.REBOOT)]


def test_nvlink5_nonfatal_line_only_warns() -> None:
    log = ("[ 5.0] NVRM: Xid (PCI:0000:04:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 00 "
           "(0x00000013 0x00000000 0x00000000 0x00000000)\n")
    (e,) = parse_xid_log(log).events
    assert (e.xid, e.severity) == (149, "Nonfatal")
    assert verdicts(log) == [("xid", "0000:04:00", 149, Status.WARN, Remediation.NONE)]


def test_containment_flag_d_rst_yes_fails_even_a_contained_xid94() -> None:
    log = "NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: Yes\n"
    (e,) = parse_xid_log(log).events
    assert (e.reset_required, e.drain_and_reset_required) == (False, True)
    assert verdicts(log) == [("xid", "0000:01:00", 94, Status.FAIL, Remediation.REBOOT)]


def test_xid119_gsp_timeout_dmesg_T_with_stack_trace() -> None:
    log = text("dmesg-T-xid119-gsp-timeout-h100-xe9680-gpud.txt")
    r = parse_xid_log(log, strict=True)
    assert r.lines_read == 43
    assert [(e.bus_id, e.xid) for e in r.events] == [("0000:9b:00", 119)] * 5
    assert [(e.pid, e.process) for e in r.events] == [("2024380", "nvidia-smi")] * 3 + [
        ("1263500", "cache_mgr_main"), ("1240590", "gpud")]
    assert r.events[0].message.startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    assert (r.lost, r.sxid_events) == ((), ())
    assert verdicts(log) == [("xid", "0000:9b:00", 119, Status.FAIL, Remediation.REBOOT)] * 5


def test_xid13_app_faults_warn_and_xid109_ctxsw_timeout_fails_ctime() -> None:
    log = text("dmesg-ctime-xid13-xid109-peermem-gpud-pr46.txt")
    r = parse_xid_log(log, strict=True)
    assert (r.codes, r.lines_read, r.lost) == ((13, 109), 5, ())
    assert [(e.bus_id, e.xid, e.pid, e.process) for e in r.events] == [
        ("0000:cb:00", 13, "<unknown>", "<unknown>")] * 3 + [("0000:cb:00", 109, "1797828", "pt_main_thread")]
    assert r.events[3].message == "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"
    assert verdicts(log) == [("xid", "0000:cb:00", 13, Status.WARN, Remediation.NONE)] * 3 + [
        ("xid", "0000:cb:00", 109, Status.FAIL, Remediation.REBOOT)]


# ---------------------------------------------------------------- bug 3: MIG Xid lines


def test_mig_gpu_instance_xid_lines_are_counted() -> None:
    log = text("nvrm-xid94-95-mig-gpu-instance-format-driver-source.txt")
    r = parse_xid_log(log, strict=True)
    assert [(e.bus_id, e.gpu_instance, e.xid, e.pid, e.reset_required, e.drain_and_reset_required)
            for e in r.events] == [("0000:01:00", "05", 94, "7194", False, False),
                                   ("0000:01:00", None, 94, "7062", False, False),
                                   ("0000:01:00", None, 95, "7062", True, False)]
    assert r.events[0].message == "Contained: CE User Channel (0x9). RST: No, D-RST: No"
    a = analyze_text("xid", log)
    assert [(v.value, v.status, v.remediation) for v in a.verdicts] == [
        (94, Status.WARN, Remediation.NONE), (94, Status.WARN, Remediation.NONE),
        (95, Status.FAIL, Remediation.REBOOT)]
    assert "GPU instance 05" in a.verdicts[0].message
    assert {f.name: f.value for f in a.figures}["xid_events"] == 3


def test_mig_gpu_and_compute_instance() -> None:
    log = "[ 7.0] NVRM: Xid (PCI:0000:01:00 GPU-I:01 GPU-CI:00): 13, pid=42, name=python, Graphics Exception\n"
    (e,) = parse_xid_log(log).events
    assert (e.bus_id, e.gpu_instance, e.compute_instance, e.xid, e.pid, e.process, e.message) == (
        "0000:01:00", "01", "00", 13, "42", "python", "Graphics Exception")


# ---------------------------------------------------------------- the CLI on the real logs


@pytest.mark.parametrize(
    ("name", "code", "xid_events", "xid_codes"),
    [
        ("syslog-h100-fallen-off-bus-no-xid-probe-failed.txt", 1, 0, []),
        ("dmesg-h100-fallen-off-bus-no-xid-after-reload.txt", 1, 0, []),
        ("dmesg-h100-xid79-fallen-off-bus-multiline.txt", 1, 1, [79]),
        ("nvrm-xid94-95-mig-gpu-instance-format-driver-source.txt", 1, 3, [94, 95]),
        ("journalctl-gb200-xid149-netir-fatal-xid154-drain-reset.txt", 1, 2, [149, 154]),
        ("journal-k-xid51-xid154-reset-required-grep.txt", 1, 2, [51, 154]),
        ("dmesg-T-xid119-gsp-timeout-h100-xe9680-gpud.txt", 1, 5, [119]),
        ("dmesg-ctime-xid13-xid109-peermem-gpud-pr46.txt", 1, 4, [13, 109]),
    ],
)
def test_cli_on_the_real_logs(name: str, code: int, xid_events: int, xid_codes: list[int]) -> None:
    res = CliRunner().invoke(main, ["analyze", "xid", str(FIX / name), "--json"])
    assert res.exit_code == code, res.output
    doc = json.loads(res.output)
    assert (doc["status"], doc["figures"]["xid_events"]["value"], doc["figures"]["xid_codes"]["value"]) == (
        "fail", xid_events, xid_codes)
