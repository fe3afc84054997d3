"""Issue 19: `gpuctl analyze` kinds for the health tools' outputs, each on real public samples
(tests/data/fixtures/*/SOURCES.md): a parser test and a verdict test per kind.

Where no public sample shows the fault, a real healthy sample is edited in the test (one
field of one GPU or port) so the fault is on a known subject; each such edit is marked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuctl.analyze import analyze_text, detect_kind
from gpuctl.catalog import load_sku
from gpuctl.errors import ParseError
from gpuctl.parsers.ib_counters import parse_ib_counters
from gpuctl.parsers.ibv_devinfo import parse_ibv_devinfo
from gpuctl.parsers.lspci import parse_lspci
from gpuctl.parsers.nccl_log import parse_nccl_log
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q
from gpuctl.parsers.nvlink_errors import parse_nvlink_errors
from gpuctl.verdicts import NODE, Status, counter_deltas, judge_clock_events, judge_counter_deltas, judge_fabric

FIX = Path(__file__).parents[1] / "data" / "fixtures"


def text(rel: str) -> str:
    return (FIX / rel).read_text()


def failed(a: object) -> list:
    return [v for v in a.verdicts if v.status is Status.FAIL]  # type: ignore[attr-defined]


# ---------------------------------------------------------------- 1. clock event (throttle) reasons

H100_8 = "nvidia_smi/nvidia-smi-q-h100-8gpu-535.183.txt"
KUBEFLOW68 = "nvidia_smi/nvidia-smi-q-grep-clocks-throttle-reasons-idle-kubeflow68.txt"
AZHPC506 = "nvidia_smi/nvidia-smi-q-grep-fabric-completed-insufficient-resources-azhpc506.txt"


def _edit_gpu(raw: str, gpu: int, key: str, new: str) -> str:
    """`raw` with the value of the first `key :` line in the block of the `gpu`-th GPU set to
    `new` (a test edit)."""
    parts = raw.split("\nGPU 0000")
    parts[gpu + 1], n = re.subn(rf"(\n\s+{re.escape(key)}\s+:) [^\n]*", rf"\1 {new}", parts[gpu + 1], count=1)
    assert n == 1
    return "\nGPU 0000".join(parts)


def test_clock_events_parsed_from_both_section_names() -> None:
    old = parse_nvidia_smi_q(text(KUBEFLOW68))
    assert old.gpus[0].clock_events is not None
    assert dict(old.gpus[0].clock_events) == {
        "Idle": True, "Applications Clocks Setting": False, "SW Power Cap": False, "HW Slowdown": False,
        "HW Thermal Slowdown": False, "HW Power Brake Slowdown": False, "Sync Boost": False,
        "SW Thermal Slowdown": False}
    assert old.partial and "not named" in old.partial  # a grep has no 'GPU <bus id>' line
    new = parse_nvidia_smi_q(text(H100_8))  # 535: "Clocks Event Reasons"
    assert len(new.gpus) == 8 and all(dict(g.clock_events or ())["HW Slowdown"] is False for g in new.gpus)


def test_idle_is_a_note_and_a_hw_slowdown_fails_its_gpu_only() -> None:
    idle = analyze_text("nvidia-smi-q", text(KUBEFLOW68))
    (v,) = [v for v in idle.verdicts if v.check == "clock_event_reasons"]
    assert v.status is Status.PASS and v.value == "Idle" and "load-free" in v.message
    # real: GPU 2 of this 8x H100 sample has HW Power Brake and SW Thermal Slowdown active (with SW Power Cap)
    a = analyze_text("nvidia-smi-q", text(H100_8))
    bad = [v for v in a.verdicts if v.check == "clock_event_reasons" and v.status is Status.FAIL]
    assert [(v.subject.gpu, v.subject.bus_id) for v in bad] == [(2, "00000000:75:00.0")]
    assert bad[0].value == "HW Power Brake Slowdown, SW Thermal Slowdown"
    assert "PSU" in bad[0].message and "fans" in bad[0].message and "not faults: SW Power Cap" in bad[0].message
    assert bad[0].remediation.value == "reseat_or_replace"
    # test edit: the same output with GPU 6's HW Thermal Slowdown active as well
    raw = _edit_gpu(text(H100_8), 6, "HW Thermal Slowdown", "Active")
    verdicts = [v for g in parse_nvidia_smi_q(raw).gpus for v in judge_clock_events(g)]
    assert [v.subject.gpu for v in verdicts if v.status is Status.FAIL] == [2, 6]


def test_sw_power_cap_is_not_a_fault() -> None:
    raw = _edit_gpu(text(H100_8), 0, "SW Power Cap", "Active")  # test edit
    (v,) = judge_clock_events(parse_nvidia_smi_q(raw).gpus[0])
    assert v.status is Status.PASS and "SW Power Cap" in str(v.value)


# ---------------------------------------------------------------- 3. the Fabric section


def test_fabric_fields_parsed() -> None:
    g = parse_nvidia_smi_q(text("nvidia_smi/nvidia-smi-q-grep-fabric-clique2-health-unhealthy-dra626.txt")).gpus[0]
    assert (g.fabric_state, g.fabric_status, g.fabric_clique_id, g.fabric_cluster_uuid, g.fabric_health) == (
        "Completed", "Success", "2", "dc6e40c4-d722-4357-9ba6-5291dd461278", "Unhealthy")
    assert all(g.fabric_state == "Completed" for g in parse_nvidia_smi_q(text(H100_8)).gpus)


def test_fabric_status_not_success_fails() -> None:
    a = analyze_text("nvidia-smi-q", text(AZHPC506))
    (v,) = failed(a)
    assert v.check == "fabric_state" and v.value == "Completed/Insufficient Resources"


def test_fabric_health_unhealthy_fails_and_one_clique_passes() -> None:
    a = analyze_text("nvidia-smi-q", text("nvidia_smi/nvidia-smi-q-grep-fabric-clique2-health-unhealthy-dra626.txt"))
    assert [v.check for v in failed(a)] == ["fabric_health"]
    (clique,) = [v for v in a.verdicts if v.check == "fabric_clique"]
    assert clique.status is Status.PASS


def test_fabric_on_an_nvswitch_sku() -> None:
    h100 = load_sku("hgx-h100-80gb")
    good = analyze_text("nvidia-smi-q", text(H100_8), h100)
    fab = [v for v in good.verdicts if v.check == "fabric_state"]
    assert len(fab) == 8 and all(v.status is Status.PASS for v in fab)
    # test edit: GPU 5 still registering with the fabric
    raw = _edit_gpu(text(H100_8), 5, "State", "In Progress")
    bad = [v for v in judge_fabric(parse_nvidia_smi_q(raw).gpus, h100) if v.status is Status.FAIL]
    assert [v.subject.gpu for v in bad] == [5] and "fabricmanager" in bad[0].message
    # an NVSwitch SKU whose GPU reports no fabric state (N/A): fabric manager missing
    h200 = parse_nvidia_smi_q(text("nvidia_smi/nvidia-smi-q-h200-1gpu-580.159.txt")).gpus
    assert [v.status for v in judge_fabric(h200, h100)] == [Status.WARN]  # pre-Hopper GPUs print N/A too
    assert judge_fabric(h200, load_sku("single-h200")) == []  # no NVSwitch: N/A is right


def test_fabric_cliques_must_agree_within_a_node() -> None:
    g = parse_nvidia_smi_q(text("nvidia_smi/nvidia-smi-q-grep-fabric-clique2-health-unhealthy-dra626.txt")).gpus[0]
    other = type(g)(**{**g.__dict__, "index": 1, "fabric_clique_id": "3"})
    (v,) = [v for v in judge_fabric([g, other]) if v.check == "fabric_clique"]
    assert v.status is Status.FAIL and "2 cliques" in v.message


# ---------------------------------------------------------------- 2. nvidia-smi -q -d ECC

ECC = "nvidia_smi/nvidia-smi-q-d-ecc-h200-1gpu-580.159-excerpt.txt"


def test_q_d_ecc_parsed_without_a_partial_mark() -> None:
    r = parse_nvidia_smi_q(text(ECC))
    g = r.gpus[0]
    assert r.partial is None and g.bus_id == "00000000:00:06.0" and g.ecc_mode is True
    assert (g.ecc_volatile_uncorrectable, g.ecc_aggregate_uncorrectable, g.ecc_dram_correctable,
            g.ecc_sram_correctable, g.sram_threshold_exceeded) == (0, 0, 0, 0, False)


def test_q_d_ecc_judged_by_the_same_rule_as_full_q() -> None:
    full = analyze_text("nvidia-smi-q", text("nvidia_smi/nvidia-smi-q-h200-1gpu-580.159.txt"))
    ecc = analyze_text("nvidia-smi-q", text(ECC))
    checks = {v.check for v in ecc.verdicts}
    assert checks == {"ecc_mode", "ecc_volatile_uncorrectable", "ecc_aggregate_uncorrectable",
                      "ecc_dram_correctable", "ecc_sram_correctable", "sram_threshold_exceeded"}
    assert [v for v in full.verdicts if v.check in checks] == list(ecc.verdicts)
    # test edit: 2 volatile DRAM uncorrectable errors -> the GPU fails, reboot (as for full -q)
    raw = re.sub(r"(Volatile\n(?:.*\n)*?\s+DRAM Uncorrectable\s+:) 0", r"\1 2", text(ECC), count=1)
    (bad,) = failed(analyze_text("nvidia-smi-q", raw))
    assert (bad.check, bad.value, bad.subject.bus_id, bad.remediation.value) == (
        "ecc_volatile_uncorrectable", 2, "00000000:00:06.0", "reboot")


# ---------------------------------------------------------------- 8. NCCL debug log: NET/IB completion errors


def test_every_completion_form_is_read() -> None:
    r = parse_nccl_log(text("nccl_log/nccl-log-ib-status12-5-recv-ib-plugin-nccl1814.txt"))
    assert [(c.host, c.device, c.peer, c.status, c.vendor_err, c.direction) for c in r.completions] == [
        ("hostname-test", 4, "172.36.143.59<44206>", 12, 129, "Recv"),
        ("hostname-test", 4, "172.36.143.59<44206>", 5, 249, "Recv"),
        ("hostname-test", 4, "172.36.143.59<44206>", 5, 249, "Recv")]
    new = parse_nccl_log(text("nccl_log/nccl-log-ib-status-names-retry-exc-2hosts-nccl2397.txt"))
    assert [(c.host, c.peer_address, c.status_name, c.hca) for c in new.completions] == [
        ("ubuntu2", "10.153.235.13", "IBV_WC_RETRY_EXC_ERR", "mlx5_1"),
        ("ubuntu4", "10.153.235.11", "IBV_WC_RETRY_EXC_ERR", "mlx5_0"),
        ("ubuntu4", "10.153.235.11", "IBV_WC_RETRY_EXC_ERR", "mlx5_0")]
    (wrapped,) = parse_nccl_log(text("nccl_log/nccl-log-ib-error12-wrapped-azure-roce.txt")).completions
    assert (wrapped.host, wrapped.peer, wrapped.status, wrapped.vendor_err, wrapped.line) == (
        "node-2", "10.2.0.5<33092>", 12, 129, 2)
    (old,) = parse_nccl_log(text("nccl_log/nccl-log-ib-error4-no-peer-gdr-nccl214.txt")).completions
    assert (old.host, old.peer, old.status, old.status_name, old.vendor_err) == (
        None, None, 4, "IBV_WC_LOC_PROT_ERR", 81)


def test_a_completion_error_names_both_peers_and_decodes_the_status() -> None:
    a = analyze_text("nccl-log", text("nccl_log/nccl-log-ib-status-names-retry-exc-2hosts-nccl2397.txt"))
    bad = failed(a)
    assert [(v.subject.node, v.subject.port) for v in bad] == [("ubuntu2", "mlx5_1"), ("ubuntu4", "mlx5_0")]
    assert "between ubuntu2 GPU [1] and peer 10.153.235.13" in bad[0].message
    assert "IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded)" in bad[0].message
    assert bad[0].remediation.value == "reseat_or_replace" and "rdma-core" in bad[0].source
    flush = failed(analyze_text("nccl-log", text("nccl_log/nccl-log-ib-status12-5-recv-ib-plugin-nccl1814.txt")))
    assert [v.value for v in flush] == ["IBV_WC_RETRY_EXC_ERR(12)", "IBV_WC_WR_FLUSH_ERR(5)"]
    assert "earlier error" in flush[1].message and "2 line(s)" in flush[1].message
    (gdr,) = failed(analyze_text("nccl-log", text("nccl_log/nccl-log-ib-error4-no-peer-gdr-nccl214.txt")))
    assert gdr.remediation.value == "reconfigure" and "not the network" in gdr.message


def test_a_clean_nccl_log_passes_and_a_non_nccl_file_is_refused() -> None:
    clean = "node-2:5776:5898 [0] NCCL INFO NET/IB : Using [0]ibP111p0s0:1/IB [1]rdmaP1111p0s2:1/RoCE [RO]\n"
    (v,) = analyze_text("nccl-log", clean).verdicts
    assert v.status is Status.PASS and "1 NCCL lines from node-2" in v.message
    with pytest.raises(ParseError, match="no NCCL line"):
        analyze_text("nccl-log", "hello\n")


def test_the_nccl_kind_reports_net_ib_errors_and_never_refuses_them() -> None:
    log = text("nccl_log/nccl-log-ib-error12-wrapped-azure-roce.txt")
    a = analyze_text("nccl", log)  # no nccl-tests table: judged as the log it is, not refused
    assert a.kind == "nccl" and [v.check for v in failed(a)] == ["nccl_ib_completion"]
    assert any(f.name == "nccl_not_read" for f in a.figures)
    run = text("nccl/" + sorted(p.name for p in (FIX / "nccl").iterdir() if p.suffix == ".txt")[0])
    both = analyze_text("nccl", run + "\n" + log)
    assert "nccl_ib_completion" in [v.check for v in failed(both)]
    assert detect_kind(run + "\n" + log)[0] == "nccl"


# ---------------------------------------------------------------- 5. ibv_devinfo [-v]

DEVINFO = FIX / "ibv_devinfo"


def test_ibv_devinfo_read_into_ibstats_shape() -> None:
    rxe = parse_ibv_devinfo((DEVINFO / "ibv_devinfo-v-rxe0-softroce-active-1x-magnate3.txt").read_text())
    (ca,) = rxe.cas
    (p,) = ca.ports
    assert (ca.name, ca.firmware, p.state, p.physical_state, p.rate_gbps, p.link_layer) == (
        "rxe0", "0.0.0", "Active", "LinkUp", 2.5, "Ethernet")
    bf3 = parse_ibv_devinfo((DEVINFO / "ibv_devinfo-v-grep-bf3-2port-down-linkup-no-sm.txt").read_text())
    assert [(c.name, c.ca_type, c.firmware, c.board_id) for c in bf3.cas] == [
        ("mlx5_0", "MT41692", "32.47.1088", "MT_0000000965"), ("mlx5_1", "MT41692", "32.47.1088", "MT_0000000965")]
    assert [(p.name, p.state, p.physical_state, p.rate_gbps) for p in bf3.ports] == [
        ("mlx5_0/1", "Down", "LinkUp", 100.0), ("mlx5_1/1", "Down", "LinkUp", 100.0)]
    plain = parse_ibv_devinfo((DEVINFO / "ibv_devinfo-cx6dx-mlx5_12-eth-port-down-deepep60.txt").read_text())
    assert plain.ports[0].rate_gbps is None and plain.cas[0].ca_type == "MT4125"
    with pytest.raises(ParseError, match="nothing but a command line"):
        parse_ibv_devinfo("$ ibv_devinfo -v\n")  # nothing but the command line
    with pytest.raises(ParseError, match="before any 'hca_id:'"):
        parse_ibv_devinfo("CA 'mlx5_0'\n\tCA type: MT4129\n")


def test_ibv_devinfo_judged_by_the_ibstat_port_rule() -> None:
    from gpuctl.parsers.ibstat import parse_ibstat
    from gpuctl.verdicts import judge_ibstat
    h100 = load_sku("hgx-h100-80gb")
    bf3 = analyze_text("ibv_devinfo", (DEVINFO / "ibv_devinfo-v-grep-bf3-2port-down-linkup-no-sm.txt").read_text(),
                       h100)
    ports = [v for v in failed(bf3) if v.check == "ib_port"]
    assert [v.subject.port for v in ports] == ["mlx5_0/1", "mlx5_1/1"]
    assert all("subnet manager" in v.message and v.remediation.value == "reconfigure" for v in ports)
    # the same port facts in ibstat's words give the same port verdict (one rule)
    same = parse_ibstat("CA 'mlx5_0'\n\tCA type: MT41692\n\tFirmware version: 32.47.1088\n\tPort 1:\n"
                        "\t\tState: Down\n\t\tPhysical state: LinkUp\n\t\tRate: 100\n\t\tLink layer: InfiniBand\n")
    assert judge_ibstat(same, h100)[0].status is ports[0].status
    figures = {f.name: f.value for f in bf3.figures}
    assert figures["mlx5_0.fw_ver"] == "32.47.1088" and figures["mlx5_1.board_id"] == "MT_0000000965"
    ok = analyze_text("ibv_devinfo", (DEVINFO / "ibv_devinfo-v-rxe0-softroce-active-1x-magnate3.txt").read_text())
    assert ok.status is Status.PASS


# ---------------------------------------------------------------- 6. lspci -vvv: ACS and AER

LSPCI = FIX / "lspci"


def test_lspci_devices_acs_and_aer_flags() -> None:
    grep = parse_lspci((LSPCI / "lspci-vvv-grep-acsctl-redir-on-nccl523.txt").read_text())
    assert len(grep.devices) == 12 and all(d.bus_id is None for d in grep.devices)
    assert [d.line for d in grep.devices if d.acs_redirect] == [2, 10, 11, 12, 13]
    plx = parse_lspci((LSPCI / "lspci-vvv-plx-pex8725-acs-redir-rockchip6.txt").read_text())
    cut, port = plx.devices
    assert cut.acs_redirect == ["ReqRedir", "CmpltRedir"] and cut.port_type == "PCIe port" and cut.is_bridge
    assert (port.bus_id, port.is_bridge, port.acs_ctl) == ("0000:02:08.0", True, None)
    gpu = parse_lspci((LSPCI / "lspci-vvv-gpu-cesta-badtlp-rpi-geerlingguy4.txt").read_text()).devices
    assert gpu[0].ce_status is not None and gpu[0].ce_status["BadTLP"] and not gpu[0].ce_status["RxErr"]
    assert (gpu[1].bus_id, gpu[1].port_type, gpu[1].is_bridge) == ("01:00.1", "Legacy Endpoint", False)
    with pytest.raises(ParseError, match="no device header"):
        parse_lspci("mlx5_core 0000:17:00.0: firmware version 28.39.2048\n")


def test_acs_redirect_on_a_switch_port_fails_naming_the_bridge() -> None:
    raw = (LSPCI / "lspci-vvv-plx-pex8725-acs-redir-rockchip6.txt").read_text()
    a = analyze_text("lspci", raw)
    (cut,) = [v for v in a.verdicts if v.check == "acs_redirect"]
    assert cut.status is Status.WARN and "pcieport" in cut.message  # its header is above the paste's cut
    # test edit: the same ACSCtl line under the named PLX port 0000:02:08.0 (a switch port)
    named = raw + ("        Capabilities: [68] Express (v2) Downstream Port (Slot+), MSI 00\n                ACSCtl: "
                   "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n")
    bad = [v for v in failed(analyze_text("lspci", named)) if v.check == "acs_redirect"]
    assert [v.subject.bus_id for v in bad] == ["0000:02:08.0"]
    assert "setpci -s 0000:02:08.0" in bad[0].message and "root complex" in bad[0].message
    assert "troubleshooting" in bad[0].source and bad[0].remediation.value == "reconfigure"
    grep = analyze_text("lspci", (LSPCI / "lspci-vvv-grep-acsctl-redir-on-nccl523.txt").read_text())
    assert [v.status for v in grep.verdicts if v.check == "acs_redirect"] == [Status.WARN] * 5


def test_aer_status_bits_are_reported() -> None:
    (v,) = analyze_text("lspci", (LSPCI / "lspci-vvv-gpu-cesta-badtlp-rpi-geerlingguy4.txt").read_text()).verdicts
    assert v.check == "pcie_aer" and v.status is Status.WARN and "BadTLP+" in str(v.value)
    raw = (LSPCI / "lspci-vvv-bridge-acs-off-aer-nonfatal-rpi-geerlingguy222.txt").read_text()
    ue = raw.replace("UESta:\tDLP- SDES- TLP-", "UESta:\tDLP- SDES- TLP+")  # test edit: an uncorrectable TLP error
    (bad,) = failed(analyze_text("lspci", ue))
    assert bad.check == "pcie_aer" and "UESta TLP+" in str(bad.value)
    assert bad.remediation.value == "reseat_or_replace"


# ---------------------------------------------------------------- 4. nvidia-smi nvlink -e, 7. perfquery / sysfs:
# absolute counters reported, the change between two samples judged by one rule (judge_counter_deltas)

NVLINK_E = FIX / "nvlink_errors" / "nvlink-e-h100-gpu0-18links-elided-ml-engineering.txt"
IBC = FIX / "ib_counters"


def test_nvlink_errors_parsed_per_gpu_link_and_counter() -> None:
    r = parse_nvlink_errors(NVLINK_E.read_text())
    (sample,) = r.samples
    assert sorted({link for _, link, _ in sample}) == [0, 1, 17] and r.partial and "line 11" in r.partial
    assert sample[(0, 17, "CRC Errors")] == 0 and set(n for _, _, n in sample) == {
        "Replay Errors", "Recovery Errors", "CRC Errors"}
    twice = parse_nvlink_errors(NVLINK_E.read_text() * 2)  # two outputs concatenated: two samples
    assert len(twice.samples) == 2 and twice.samples[0] == twice.samples[1]
    one_line = parse_nvlink_errors("GPU 1: x\n   Link 1: Replay Errors: 142, Recovery Errors: 3, CRC Errors: 891\n")
    assert one_line.samples[0] == {(1, 1, "Replay Errors"): 142, (1, 1, "Recovery Errors"): 3,
                                   (1, 1, "CRC Errors"): 891}


def test_one_counter_sample_is_reported_not_judged() -> None:
    a = analyze_text("nvlink-errors", NVLINK_E.read_text())
    (v,) = [v for v in a.verdicts if v.check == "nvlink_error_counters"]
    assert v.status is Status.NO_THRESHOLD and "two samples" in v.message
    assert a.status is Status.WARN  # the elided paste is partial; nothing is a pass


def test_rising_nvlink_counters_fail_or_warn_per_link() -> None:
    before = NVLINK_E.read_text()
    # test edit: GPU 0 link 1 CRC +12 and link 17 Recovery +1 in the later sample
    after = before.replace("Link 1: CRC Errors: 0", "Link 1: CRC Errors: 12").replace(
        "Link 17: Recovery Errors: 0", "Link 17: Recovery Errors: 1")
    a = analyze_text("nvlink-errors", after, baseline=before)
    judged = [v for v in a.verdicts if v.check == "nvlink_error_counters"]
    assert [(v.subject.gpu, v.subject.port, v.status, v.value) for v in judged] == [
        (0, "link 1", Status.WARN, 12), (0, "link 17", Status.FAIL, 1)]
    assert "CRC Errors rose by 12 (0 → 12)" in judged[0].message and "DCGM" in judged[0].source
    same = analyze_text("nvlink-errors", before + before)  # concatenated, nothing rose
    assert [v.status for v in same.verdicts if v.check == "nvlink_error_counters"] == [Status.PASS]
    # a counter that fell was reset between the samples: not judged
    reset = judge_counter_deltas("c", counter_deltas({(NODE, "CRC Errors"): 5}, {(NODE, "CRC Errors"): 0}), "nvlink")
    assert [v.status for v in reset] == [Status.WARN] and "reset" in reset[0].message
    with pytest.raises(ParseError, match="--baseline is for the counter kinds"):
        analyze_text("topo", before, baseline=before)


def test_ib_counters_from_perfquery_and_sysfs_one_shape() -> None:
    x = parse_ib_counters((IBC / "perfquery-x-rhel75-lid10-all-zero-infiniband-diags16.txt").read_text())
    assert x.ports == ("lid 10 port 1",) and x.samples[0][("lid 10 port 1", "SymbolErrorCounter")] == 0
    old = parse_ib_counters((IBC / "perfquery-old-names-lid936-tacc.txt").read_text())
    assert old.samples[0][("lid 936 port 1", "LinkErrorRecoveryCounter")] == 0  # "LinkRecovers" mapped
    assert old.samples[0][("lid 936 port 1", "PortXmitData")] == 905972985
    sysfs = parse_ib_counters((IBC / "sysfs-counters-mlx5_0-port1-lab-guide.txt").read_text())
    assert sysfs.ports == ("mlx5_0/1",) and sysfs.samples[0][("mlx5_0/1", "LinkDownedCounter")] == 0
    with pytest.raises(ParseError, match="not a perfquery or sysfs counter line"):
        parse_ib_counters("CA 'mlx5_0'\n")


def test_rising_ib_counters_judged_by_the_same_delta_rule() -> None:
    before = (IBC / "sysfs-counters-mlx5_0-port1-lab-guide.txt").read_text()
    # test edit: 7 symbol errors and one link-down on mlx5_0/1 in the later sample; data counters rise too
    after = before.replace("symbol_error:0", "symbol_error:7").replace("link_downed:0", "link_downed:1").replace(
        "port_rcv_data:8823914021", "port_rcv_data:9823914021")
    a = analyze_text("ib-counters", before + after)
    judged = [(v.subject.port, v.status, v.value) for v in a.verdicts]
    assert judged == [("mlx5_0/1", Status.WARN, 7), ("mlx5_0/1", Status.FAIL, 1)]
    assert "SymbolErrorCounter rose by 7" in a.verdicts[0].message
    pq = (IBC / "perfquery-x-rhel75-lid10-all-zero-infiniband-diags16.txt").read_text()
    quiet = analyze_text("ib-counters", pq.replace("PortXmitData:....................0",
                                                   "PortXmitData:....................5"), baseline=pq)
    (v,) = quiet.verdicts
    assert v.status is Status.PASS and "PortXmitData +5" in v.message  # traffic is not an error


def test_cli_baseline_option(tmp_path: Path) -> None:
    import json

    from click.testing import CliRunner

    from gpuctl.cli.main import main
    after = tmp_path / "after.txt"
    after.write_text(NVLINK_E.read_text().replace("Link 0: Replay Errors: 0", "Link 0: Replay Errors: 4"))
    res = CliRunner().invoke(main, ["analyze", str(after), "--baseline", str(NVLINK_E), "--json"])
    doc = json.loads(res.output)
    assert doc["kind"] == "nvlink-errors" and doc["figures"]["samples"]["value"] == 2
    assert [(v["subject"], v["status"]) for v in doc["verdicts"] if v["check"] == "nvlink_error_counters"] == [
        ("GPU 0 link 0", "warn")]
    refused = CliRunner().invoke(main, ["analyze", "lspci", str(after), "--baseline", str(NVLINK_E)])
    assert refused.exit_code == 2 and "--baseline is for the counter kinds" in refused.output
