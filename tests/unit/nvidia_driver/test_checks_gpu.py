"""GPU checks of roles/nvidia_driver/checks.py against recorded nvidia-smi, topo -m and
kernel-log outputs (tests/data/fixtures): each check passes on a healthy recording and
fails, naming the GPU, pair or event, on a faulty one."""

from __future__ import annotations

import re

import pytest

from gpuctl.checks.model import CouldNotRun, Remediation
from tests.unit.checks_support import failure, fixture, inventory_spec, probe, role, single_h200_spec

H100_Q = fixture("nvidia_smi/nvidia-smi-q-h100-8gpu-535.161.txt")
H100_TOPO = fixture("topo/topo-h100-8gpu-nonic-awesomemlsys.txt")
H200_Q = fixture("nvidia_smi/nvidia-smi-q-h200-1gpu-580.159.txt")
GPU_CHECKS = ("gpu_present", "gpu_model", "gpu_memory", "gpu_persistence_mode", "gpu_ecc_mode", "gpu_ecc_errors",
              "gpu_retired_pages", "gpu_row_remap", "gpu_pcie_width", "gpu_pcie_gen")

drv = role("nvidia_driver")


@pytest.fixture
def h100():
    return inventory_spec("h100-8x4")


def _gpu_section(text: str, index: int) -> tuple[int, int]:
    starts = [m.start() for m in re.finditer(r"^GPU [0-9A-F]{8}:", text, re.M)]
    return starts[index], starts[index + 1] if index + 1 < len(starts) else len(text)


def with_gpu_edit(text: str, index: int, pattern: str, repl: str) -> str:
    """The recorded output with one GPU's section edited (a derived fault case)."""
    a, b = _gpu_section(text, index)
    section, n = re.subn(pattern, repl, text[a:b], count=1)
    assert n == 1, pattern
    return text[:a] + section + text[b:]


def without_gpu(text: str, index: int) -> str:
    a, b = _gpu_section(text, index)
    return (text[:a] + text[b:]).replace("Attached GPUs                             : 8",
                                         "Attached GPUs                             : 7")


@pytest.mark.parametrize("check", GPU_CHECKS)
@pytest.mark.parametrize("gpu", [0, 7])
def test_recorded_h100_passes_every_gpu_check(h100, check, gpu):
    p = probe(h100, {"nvidia-smi -q": H100_Q})
    getattr(drv, f"test_{check}")(None, h100, p, f"gpu{gpu}")


def test_recorded_h100_gpu_count_passes(h100):
    drv.test_gpu_count(None, h100, probe(h100, {"nvidia-smi -q": H100_Q}))


def test_recorded_h200_passes_on_single_h200():
    spec = single_h200_spec()
    p = probe(spec, {"nvidia-smi -q": H200_Q})
    drv.test_gpu_count(None, spec, p)
    for check in GPU_CHECKS:
        getattr(drv, f"test_{check}")(None, spec, p, "gpu0")


def test_h200_recording_fails_the_h100_sku(h100):
    f = failure(drv.test_gpu_count, h100, probe(h100, {"nvidia-smi -q": H200_Q}))
    assert (f.expected, f.found, f.remediation) == ("8 GPUs", "1 GPUs", Remediation.RESEAT_OR_REPLACE)
    f = failure(drv.test_gpu_model, h100, probe(h100, {"nvidia-smi -q": H200_Q}), "gpu0")
    assert f.expected == "NVIDIA H100 80GB HBM3" and f.found == "NVIDIA H200"
    assert f.remediation is Remediation.VENDOR_RMA


def test_pcie_x8_fails_naming_gpu_and_bus_id(h100):
    text = with_gpu_edit(H100_Q, 3, r"Current(\s+): 16x", r"Current\1: 8x")
    p = probe(h100, {"nvidia-smi -q": text})
    f = failure(drv.test_gpu_pcie_width, h100, p, "gpu3")
    assert "GPU 3 (00000000:5D:00.0)" in f.message and "x8" in f.message
    assert (f.expected, f.found.split()[0], f.remediation) == ("x16", "x8", Remediation.RESEAT_OR_REPLACE)
    drv.test_gpu_pcie_width(None, h100, p, "gpu2")  # the neighbours still pass


def test_pcie_gen_below_sku_fails(h100):
    text = with_gpu_edit(H100_Q, 5, r"(PCIe Generation\n\s+)Max(\s+): 5", r"\1Max\2: 4")
    f = failure(drv.test_gpu_pcie_gen, h100, probe(h100, {"nvidia-smi -q": text}), "gpu5")
    assert (f.expected, f.found) == ("Gen5", "Gen4") and "00000000:BB:00.0" in f.message


def test_missing_gpu_fails_count_and_present_and_others_could_not_run(h100):
    p = probe(h100, {"nvidia-smi -q": without_gpu(H100_Q, 7)})
    assert failure(drv.test_gpu_count, h100, p).found == "7 GPUs"
    f = failure(drv.test_gpu_present, h100, p, "gpu7")
    assert f.subject == "GPU 7" and f.remediation is Remediation.RESEAT_OR_REPLACE
    drv.test_gpu_present(None, h100, p, "gpu6")
    with pytest.raises(CouldNotRun, match="GPU 7 is not visible"):
        drv.test_gpu_ecc_errors(None, h100, p, "gpu7")


def test_ecc_uncorrectable_fails_with_reboot(h100):
    text = with_gpu_edit(H100_Q, 2, r"DRAM Uncorrectable(\s+): 0", r"DRAM Uncorrectable\1: 2")
    p = probe(h100, {"nvidia-smi -q": text})
    f = failure(drv.test_gpu_ecc_errors, h100, p, "gpu2")
    assert f.remediation is Remediation.REBOOT and f.found == "2 volatile uncorrectable"
    assert "GPU 2 (00000000:4C:00.0)" in f.message
    drv.test_gpu_ecc_errors(None, h100, p, "gpu1")


def test_row_remap_pending_and_failure(h100):
    p = probe(h100, {"nvidia-smi -q": with_gpu_edit(H100_Q, 4, r"(Remapped Rows\n(?:.*\n){2}\s+Pending\s+): No",
                                                    r"\1: Yes")})
    f = failure(drv.test_gpu_row_remap, h100, p, "gpu4")
    assert f.remediation is Remediation.REBOOT and "pending" in f.message
    p = probe(h100, {"nvidia-smi -q": with_gpu_edit(H100_Q, 4, r"(Remapping Failure Occurred\s+): No", r"\1: Yes")})
    assert failure(drv.test_gpu_row_remap, h100, p, "gpu4").remediation is Remediation.VENDOR_RMA


def test_persistence_and_ecc_mode_off_fail(h100):
    text = with_gpu_edit(H100_Q, 1, r"Persistence Mode(\s+): Enabled", r"Persistence Mode\1: Disabled")
    f = failure(drv.test_gpu_persistence_mode, h100, probe(h100, {"nvidia-smi -q": text}), "gpu1")
    assert (f.expected, f.found) == ("Enabled", "Disabled")
    text = with_gpu_edit(H100_Q, 6, r"(ECC Mode\n\s+Current\s+): Enabled", r"\1: Disabled")
    f = failure(drv.test_gpu_ecc_mode, h100, probe(h100, {"nvidia-smi -q": text}), "gpu6")
    assert f.found == "Disabled" and f.remediation is Remediation.RECONFIGURE


def test_xml_form_reads_the_same_fields():
    spec = inventory_spec("a100-8x2")
    p = probe(spec, {"nvidia-smi -q -x": fixture("nvidia_smi/nvidia-smi-q-x-a100-sxm4-40gb-mig-netdata.txt")},
              form="xml")
    drv.test_gpu_pcie_width(None, spec, p, "gpu0")
    drv.test_gpu_ecc_mode(None, spec, p, "gpu0")
    f = failure(drv.test_gpu_model, spec, p, "gpu0")  # a 40 GB A100 is not the 80 GB SKU
    assert f.found == "NVIDIA A100-SXM4-40GB" and f.expected == "NVIDIA A100-SXM4-80GB"
    assert failure(drv.test_gpu_count, spec, p).found == "1 GPUs"


# ---------------------------------------------------------------- NVLink


def test_recorded_h100_topology_passes_every_pair(h100):
    p = probe(h100, {"topo -m": H100_TOPO})
    pairs = drv.pair_items(h100)
    assert len(pairs) == 28
    for item in pairs:
        drv.test_nvlink_pair(None, h100, p, item)


def four_by_two(text: str) -> str:
    """The recorded 8×H100 matrix rewired as four NVLink pairs (GPU0-1, 2-3, 4-5, 6-7)."""
    out = []
    for line in text.splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d", cells[0]) and line[:1] not in (" ", "\t"):
            row = int(cells[0][3:])
            for col in range(8):
                if col != row and col // 2 != row // 2:
                    cells[1 + col] = "NODE" if (col < 4) == (row < 4) else "SYS"
            line = "\t".join(cells)
        out.append(line)
    return "\n".join(out) + "\n"


def test_four_by_two_box_fails_with_the_unconnected_pairs_named(h100):
    p = probe(h100, {"topo -m": four_by_two(H100_TOPO)})
    failed = {}
    for item in drv.pair_items(h100):
        try:
            drv.test_nvlink_pair(None, h100, p, item)
        except AssertionError as exc:
            failed[item] = exc
    assert set(drv.pair_items(h100)) - set(failed) == {"gpu0-gpu1", "gpu2-gpu3", "gpu4-gpu5", "gpu6-gpu7"}
    f = failed["gpu0-gpu2"]
    assert (f.expected, f.found, f.remediation) == ("NV18", "NODE", Remediation.VENDOR_RMA)
    assert "GPU0↔GPU2" in f.message
    assert failed["gpu3-gpu4"].found == "SYS"


def test_no_nvlink_pairs_for_a_single_gpu():
    assert drv.pair_items(single_h200_spec()) == []


# ---------------------------------------------------------------- driver versions, NVML, Xid

def _files(**files: str) -> str:
    from tests.unit.checks_support import bundle
    return bundle(files)


def test_driver_versions_agree_and_match_the_matrix():
    spec = single_h200_spec()
    text = H200_Q.replace("580.159.04", spec.driver_version)
    ver = {"/sys/module/nvidia/version": spec.driver_version + "\n"}
    p = probe(spec, {"nvidia-smi -q": text, "/proc/modules": _files(**ver)})
    drv.test_driver_versions_agree(None, spec, p)
    drv.test_driver_version(None, spec, p)
    drv.test_nvml_readable(None, spec, p)


def test_user_space_newer_than_kernel_module_fails_with_reboot():
    spec = single_h200_spec()
    p = probe(spec, {"nvidia-smi -q": H200_Q, "/proc/modules": _files(**{"/sys/module/nvidia/version": "570.133.20"})})
    f = failure(drv.test_driver_versions_agree, spec, p)
    assert f.remediation is Remediation.REBOOT
    assert f.found == "user space 580.159.04, kernel module 570.133.20"


def test_nvml_mismatch_output_fails_with_reboot_and_gpu_checks_could_not_run():
    spec = single_h200_spec()
    mismatch = (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n", "")
    p = probe(spec, {"nvidia-smi -q": mismatch,
                     "/proc/modules": _files(**{"/sys/module/nvidia/version": "570.133.20"})})
    f = failure(drv.test_nvml_readable, spec, p)
    assert f.remediation is Remediation.REBOOT and "Driver/library version mismatch" in f.found
    f = failure(drv.test_driver_versions_agree, spec, p)
    assert f.remediation is Remediation.REBOOT and "mismatch" in f.found
    with pytest.raises(CouldNotRun, match="driver-library-mismatch"):
        drv.test_gpu_model(None, spec, p, "gpu0")


def test_other_driver_installed_is_reconfigure_not_reboot():
    """Seen on the real H200 (its own driver 580.159.04, the matrix pins 580.95.05): verify said
    'reboot', which cannot load a driver that is not installed. Module and user space agree on
    another release: reconfigure. User space at the pin, module older: reboot."""
    spec = single_h200_spec()
    other = {"/sys/module/nvidia/version": "580.159.04\n"}
    p = probe(spec, {"nvidia-smi -q": H200_Q, "/proc/modules": _files(**other)})
    f = failure(drv.test_driver_version, spec, p)
    assert f.remediation is Remediation.RECONFIGURE and "installed user-space driver is 580.159.04" in f.message
    pending = {"/sys/module/nvidia/version": "580.159.04\n"}
    p = probe(spec, {"nvidia-smi -q": H200_Q.replace("580.159.04", spec.driver_version),
                     "/proc/modules": _files(**pending)})
    assert failure(drv.test_driver_version, spec, p).remediation is Remediation.REBOOT


def test_proc_driver_version_is_read_when_sys_module_has_none():
    spec = single_h200_spec()
    nvrm = f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {spec.driver_version}  Release Build  (dvs)\n"
    p = probe(spec, {"/proc/modules": _files(**{"/proc/driver/nvidia/version": nvrm})})
    drv.test_driver_version(None, spec, p)


def test_fatal_xid_in_the_kernel_log_fails_naming_the_gpu(h100):
    p = probe(h100, {"dmesg": fixture("xid/dmesg-xid79-xid13-synthetic.txt")})
    f = failure(drv.test_no_fatal_xid, h100, p)
    assert "0000:18:00: Xid 79 (" in f.found and "Xid 13" not in f.found
    assert f.remediation is Remediation.RESEAT_OR_REPLACE


@pytest.mark.parametrize(("name", "needle", "remediation"), [
    # a GPU lost with no Xid line passed verify: the check only looked for fatal Xid codes
    ("xid/syslog-h100-fallen-off-bus-no-xid-probe-failed.txt", "fell off the bus", Remediation.RESEAT_OR_REPLACE),
    ("xid/dmesg-h100-fallen-off-bus-no-xid-after-reload.txt", "fell off the bus", Remediation.RESEAT_OR_REPLACE),
    # Xid 154 asking for a drain and reset, Xid 149 NETIR fatal (GB200)
    ("xid/journalctl-gb200-xid149-netir-fatal-xid154-drain-reset.txt", "Drain and Reset", Remediation.REBOOT),
])
def test_verify_fails_what_analyze_xid_fails(h100, name, needle, remediation):
    """verify's fatal-Xid check and `gpuctl analyze xid` share gpuctl.xidpolicy."""
    from gpuctl.analyze import analyze_text
    from gpuctl.verdicts import Status
    assert analyze_text("xid", fixture(name)).status is Status.FAIL
    f = failure(drv.test_no_fatal_xid, h100, probe(h100, {"dmesg": fixture(name)}))
    assert needle in f.found and f.remediation is remediation


def test_xid154_recovery_action_none_passes_verify(h100):
    """Xid 154 is in the fatal list, but 'None' as its new recovery action needs nothing;
    the check failed on the code alone."""
    line = ("[ 1234.567890] NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x4 (Drain and "
            "Reset) to 0x0 (None)\n")
    drv.test_no_fatal_xid(None, h100, probe(h100, {"dmesg": line}))


def test_clean_kernel_log_passes(h100):
    drv.test_no_fatal_xid(None, h100, probe(h100, {"dmesg": fixture("xid/dmesg-clean-synthetic.txt")}))


def test_nvidia_smi_missing_is_could_not_run_not_a_failure(h100):
    with pytest.raises(CouldNotRun, match="not installed"):
        drv.test_gpu_count(None, h100, probe(h100, {}))


def test_one_nvidia_smi_per_host(h100):
    p = probe(h100, {"nvidia-smi -q": H100_Q})
    for check in GPU_CHECKS:
        for i in range(8):
            getattr(drv, f"test_{check}")(None, h100, p, f"gpu{i}")
    assert sum("nvidia-smi" in c for c in p.host.ran) == 1


def test_a_cut_nvidia_smi_q_from_the_node_could_not_run():
    # issue 19: a cut *paste* is judged for what it shows; the node's own report cut short is
    # a command that did not finish (verify must not pass the GPUs it does not show)
    spec = single_h200_spec()
    p = probe(spec, {"nvidia-smi -q": H200_Q[: H200_Q.index("    ECC Mode")]})
    with pytest.raises(CouldNotRun, match="cut report"):
        p.nvidia_smi()
