#!/usr/bin/python3
"""gpuctl lab: emulated NVIDIA hardware tools for QEMU lab nodes (no GPU present).

Installed by the stand-in packages of the lab's NVIDIA repository (one copy per
package, beside a ``package.json`` naming the package and its version) and run through
small wrappers at the real tools' paths: ``/usr/bin/nvidia-smi`` runs
``labhw.py nvidia-smi ARGS``. Standard library only (the guests have python3).

Every tool reads the node's hardware profile and fault list:

- ``GPUCTL_LAB_PROFILE`` (default ``/etc/gpuctl-lab/profile.json``): SKU facts, GPUs.
- ``GPUCTL_LAB_FAULTS`` (default ``/etc/gpuctl-lab/faults``): one fault per line,
  ``NAME [key=value ...]``; unknown lines are ignored.
- ``GPUCTL_LAB_PACKAGE`` (default ``package.json`` beside this file): the package
  this copy belongs to (name, version, driver/CUDA version it reports).
- ``GPUCTL_LAB_SYSROOT`` (default ``/``): where ``sys/module/nvidia/version``,
  ``usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1`` and ``run/`` are looked up, so the
  tools also run on a build host against a prepared directory (unit tests).

Outputs are shaped like the real tools' (templates: real H200 and public 8-GPU
H100/A100 outputs). Figures come from the profile, except one: a multi-node nccl-tests run
given a bootstrap root (NCCL_COMM_ID) moves real bytes between the ranks' nodes over that
address and reports the rate it measured (`exchange`), so a slow fabric interface shows.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------- inputs


def sysroot() -> Path:
    return Path(os.environ.get("GPUCTL_LAB_SYSROOT", "/"))


def sys_path(rel: str) -> Path:
    return sysroot() / rel.lstrip("/")


def package_info() -> dict:
    path = Path(os.environ.get("GPUCTL_LAB_PACKAGE") or HERE / "package.json")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def load_profile() -> dict:
    path = Path(os.environ.get("GPUCTL_LAB_PROFILE", "/etc/gpuctl-lab/profile.json"))
    try:
        return json.loads(path.read_text())
    except OSError:
        die(f"gpuctl lab: no hardware profile at {path} (the lab pushes it after boot)", 9)
    except ValueError as exc:
        die(f"gpuctl lab: hardware profile {path} is not valid JSON: {exc}", 9)
    return {}


def load_faults() -> dict[str, list[dict[str, str]]]:
    """fault name → list of its parameter dicts (a fault may be listed for several GPUs)."""
    path = Path(os.environ.get("GPUCTL_LAB_FAULTS", "/etc/gpuctl-lab/faults"))
    faults: dict[str, list[dict[str, str]]] = {}
    try:
        text = path.read_text()
    except OSError:
        return faults
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        params = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        faults.setdefault(words[0], []).append(params)
    return faults


def die(message: str, code: int) -> None:
    sys.stdout.write(message + ("\n" if not message.endswith("\n") else ""))
    sys.stdout.flush()
    sys.exit(code)


def fault_gpus(faults: dict, name: str, default: int) -> set[int]:
    """Physical GPU indexes a fault applies to (``gpu=N``, default `default`)."""
    out: set[int] = set()
    for params in faults.get(name, []):
        try:
            out.add(int(params.get("gpu", default)))
        except ValueError:
            out.add(default)
    return out


def pid_alive(pidfile: str) -> bool:
    try:
        pid = int(sys_path(pidfile).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


FM_PIDFILE = "/run/nvidia-fabricmanager/nv-fabricmanager.pid"
PERSISTENCED_PIDFILE = "/run/nvidia-persistenced/nvidia-persistenced.pid"
HOSTENGINE_PIDFILE = "/run/nvhostengine.pid"
STATE_DIR = "/run/gpuctl-lab"


# ---------------------------------------------------------------------------- the node


#: nvidia-smi's clock-event reasons (driver 535+; XML `clocks_event_reason_<name>`, --query-gpu
#: `clocks_event_reasons.<name>`), in its order, with the name `nvidia-smi -q` prints
CLOCK_EVENT_REASONS: dict[str, str] = {
    "gpu_idle": "Idle", "applications_clocks_setting": "Applications Clocks Setting",
    "sw_power_cap": "SW Power Cap", "hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
    "hw_power_brake_slowdown": "HW Power Brake Slowdown", "sync_boost": "Sync Boost",
    "sw_thermal_slowdown": "SW Thermal Slowdown", "display_clocks_setting": "Display Clock Setting",
}


class Node:
    """The profile with the faults applied: what the emulated hardware looks like now."""

    def __init__(self, profile: dict, faults: dict) -> None:
        self.profile = profile
        self.faults = faults
        self.gpu = profile["gpu"]
        missing = fault_gpus(faults, "gpu_missing", profile["gpu"]["count"] - 1)
        self.gpus = [g for g in profile["gpus"] if g["index"] not in missing]
        self.pcie_x8 = fault_gpus(faults, "pcie_x8", 0)
        self.ecc = fault_gpus(faults, "ecc_uncorrectable", 0)
        self.remap = fault_gpus(faults, "row_remap_pending", 0)
        self.nvlink_pairs = "nvlink_pairs" in faults
        self.slow_nccl = "slow_nccl" in faults
        # passive health faults: `throttle gpu=N reason=hw_slowdown`, `gpu_busy gpu=N`,
        # `fabric_not_ready`, `vbios_differs version=V`
        self.throttle: dict[int, set[str]] = {}
        for params in faults.get("throttle", []):
            self.throttle.setdefault(int(params.get("gpu", 0)), set()).add(params.get("reason", "hw_slowdown"))
        self.busy = fault_gpus(faults, "gpu_busy", 0)
        self.fabric_not_ready = "fabric_not_ready" in faults
        self.vbios_override = next((p.get("version", "96.00.99.00.01") for p in faults.get("vbios_differs", [])), None)
        # `nvlink_errors gpu=N`: link 0 of GPU N takes replay and CRC errors, one more per second
        # since the fault file last changed (two health runs a second apart see them rise)
        self.nvlink_errors = fault_gpus(faults, "nvlink_errors", 1)

    # -- per-GPU facts (g is a profile GPU entry)
    def width(self, g: dict) -> int:
        return 8 if g["index"] in self.pcie_x8 else self.profile["pcie"]["width"]

    def vbios(self, g: dict) -> str:
        return self.vbios_override or self.gpu.get("vbios", "96.00.74.00.01")

    def ecc_unc(self, g: dict) -> int:
        return 2 if g["index"] in self.ecc else 0

    def remap_pending(self, g: dict) -> bool:
        return g["index"] in self.remap

    def remap_unc(self, g: dict) -> int:
        return 1 if g["index"] in self.remap else 0

    def utilization(self, i: int) -> int:
        """GPU load in % (the `gpu_busy` fault: 97)."""
        return 97 if i in self.busy else 0

    def clock_events(self, i: int) -> dict[str, bool]:
        """Clock-event reasons of GPU `i` by their XML/--query-gpu names, in nvidia-smi's order: the
        `throttle` fault's reasons, else Idle when not busy (as the real H100 samples in
        tests/data/fixtures/nvidia_smi show: a held-down GPU does not report Idle)."""
        on = self.throttle.get(i, set())
        return {r: r in on or (r == "gpu_idle" and i not in self.busy and not on) for r in CLOCK_EVENT_REASONS}

    def persistence(self) -> bool:
        return pid_alive(PERSISTENCED_PIDFILE) or sys_path(STATE_DIR + "/persistence-mode").is_file()

    def link(self, a: dict, b: dict) -> str:
        """topo -m cell between two GPUs."""
        nv = self.profile["nvlink"]
        code = nv.get("topo_code")
        same_numa = a["numa"] == b["numa"]
        if code and not self.nvlink_pairs:
            return code
        if code and self.nvlink_pairs and a["index"] // 2 == b["index"] // 2:
            return code
        return "NODE" if same_numa else "SYS"


def driver_state(tool: str) -> tuple[str, str]:
    """(kernel module version, NVML library version); exits like nvidia-smi on failure."""
    info = package_info()
    lib = info.get("driver_version", "")
    so = sys_path("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    try:
        target = os.readlink(so)
        if "libnvidia-ml.so." in target:
            lib = target.rsplit("libnvidia-ml.so.", 1)[1]
    except OSError:
        pass
    try:
        kernel = sys_path("/sys/module/nvidia/version").read_text().strip()
    except OSError:
        kernel = ""
    if not kernel:
        die("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n", 9)
    if lib and kernel != lib:
        short = ".".join(lib.split(".")[:2])
        die(f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {short}\n", 18)
    return kernel, lib


# ---------------------------------------------------------------------------- nvidia-smi


def bus_id(g: dict) -> str:
    return g["bus_id"]  # "00000000:18:00.0"


def now_line() -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y")


def smi_table(node: Node, driver: str, cuda: str) -> str:
    out = [now_line() + "       "]
    bar = "+" + "-" * 89 + "+"
    cols = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    out.append(bar)
    out.append(f"| NVIDIA-SMI {driver:<23}Driver Version: {driver:<15}CUDA Version: {cuda:<9}|")
    out.append(cols)
    out.append("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
    out.append("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
    out.append("|                                         |                        |               MIG M. |")
    out.append("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|")
    pm = "On" if node.persistence() else "Off"
    power = node.gpu.get("power_limit_w", 700)
    for i, g in enumerate(node.gpus):
        left = f"{i:>4}  {node.gpu['model']}"
        c1 = left + " " * max(1, 41 - len(left) - len(pm) - 2) + pm + "  "
        c2 = f"{bus_id(g)} Off ".rjust(24)
        c3 = f"{node.ecc_unc(g)} ".rjust(22)
        out.append(f"|{c1}|{c2}|{c3}|")
        l2 = f" N/A   {g.get('temp_c', 33)}C    P0"
        r2 = f"{g.get('power_w', 70)}W / {power:>4}W "
        c1 = l2 + " " * (41 - len(l2) - len(r2)) + r2
        c2 = f"0MiB / {node.gpu['memory_mib']}MiB ".rjust(24)
        c3 = "      0%      Default "
        out.append(f"|{c1}|{c2}|{c3}|")
        out.append("|" + " " * 41 + "|" + " " * 24 + "|" + "Disabled ".rjust(22) + "|")
        out.append(cols)
    out.append("")
    out.append(bar)
    out.append("| Processes:" + " " * 78 + "|")
    out.append("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |")
    out.append("|        ID   ID                                                               Usage      |")
    out.append("|" + "=" * 89 + "|")
    out.append("|  No running processes found" + " " * 61 + "|")
    out.append(bar)
    return "\n".join(out) + "\n"


def smi_list(node: Node) -> str:
    return "".join(f"GPU {i}: {node.gpu['model']} (UUID: {g['uuid']})\n" for i, g in enumerate(node.gpus))


def _q_line(depth: int, key: str, value: str | None = None) -> str:
    pad = "    " * depth
    if value is None:
        return pad + key
    return f"{pad}{key:<{55 - len(pad)}}: {value}"


def fabric_state(node: Node) -> tuple[str, str]:
    if not node.profile["nvlink"].get("nvswitch"):
        return "N/A", "N/A"
    if pid_alive(FM_PIDFILE) and not node.fabric_not_ready:
        return "Completed", "Success"
    return "In Progress", "N/A"


def smi_q(node: Node, driver: str, cuda: str, only: set[int] | None) -> str:
    gpu = node.gpu
    arch = gpu.get("architecture", "hopper").capitalize()
    pm = "Enabled" if node.persistence() else "Disabled"
    state, status = fabric_state(node)
    lines = ["", "==============NVSMI LOG==============", "",
             _q_line(0, "Timestamp", now_line()), _q_line(0, "Driver Version", driver),
             _q_line(0, "CUDA Version", cuda), ""]
    shown = [(i, g) for i, g in enumerate(node.gpus) if only is None or i in only]
    lines.append(_q_line(0, "Attached GPUs", str(len(node.gpus))))
    for _i, g in shown:
        bus = bus_id(g)
        b = bus.split(":")
        unc = node.ecc_unc(g)
        L = lines.append
        L(f"GPU {bus}")
        for key, value in (("Product Name", gpu["model"]), ("Product Brand", "NVIDIA"),
                           ("Product Architecture", arch),
                           ("Display Mode", "Requested functionality has been deprecated"),
                           ("Display Attached", "No"), ("Display Active", "Disabled"),
                           ("Persistence Mode", pm), ("Addressing Mode", "None")):
            L(_q_line(1, key, value))
        L(_q_line(1, "MIG Mode"))
        L(_q_line(2, "Current", "Disabled"))
        L(_q_line(2, "Pending", "Disabled"))
        L(_q_line(1, "Accounting Mode", "Disabled"))
        L(_q_line(1, "Accounting Mode Buffer Size", "4000"))
        L(_q_line(1, "Driver Model"))
        L(_q_line(2, "Current", "N/A"))
        L(_q_line(2, "Pending", "N/A"))
        L(_q_line(1, "Serial Number", g["serial"]))
        L(_q_line(1, "GPU UUID", g["uuid"]))
        L(_q_line(1, "Minor Number", str(g["index"])))
        L(_q_line(1, "VBIOS Version", node.vbios(g)))
        L(_q_line(1, "MultiGPU Board", "No"))
        L(_q_line(1, "Board ID", f"0x{int(b[1], 16):x}00"))
        L(_q_line(1, "Board Part Number", gpu.get("board_part", "692-2G520-0200-000")))
        L(_q_line(1, "GPU Part Number", gpu.get("gpu_part", "2330-885-A1")))
        L(_q_line(1, "FRU Part Number", "N/A"))
        L(_q_line(1, "Platform Info"))
        L(_q_line(2, "Chassis Serial Number", node.profile.get("chassis_serial", "N/A")))
        L(_q_line(2, "Slot Number", "N/A"))
        L(_q_line(2, "Tray Index", "N/A"))
        L(_q_line(2, "Host ID", "N/A"))
        L(_q_line(2, "Peer Type", "N/A"))
        L(_q_line(2, "Module Id", str(g.get("module_id", g["index"] + 1))))
        L(_q_line(2, "GPU Fabric GUID", "N/A"))
        L(_q_line(1, "GPU Operation Mode"))
        L(_q_line(2, "Current", "N/A"))
        L(_q_line(2, "Pending", "N/A"))
        L(_q_line(1, "GPU Virtualization Mode"))
        L(_q_line(2, "Virtualization Mode", "None"))
        L(_q_line(2, "Host VGPU Mode", "N/A"))
        L(_q_line(1, "GPU Recovery Action", "None"))
        L(_q_line(1, "GSP Firmware Version", driver))
        L(_q_line(1, "PCI"))
        L(_q_line(2, "Bus", f"0x{b[1].upper()}"))
        L(_q_line(2, "Device", f"0x{b[2].split('.')[0].upper()}"))
        L(_q_line(2, "Domain", "0x0000"))
        L(_q_line(2, "Base Classcode", "0x3"))
        L(_q_line(2, "Sub Classcode", "0x2"))
        L(_q_line(2, "Device Id", f"0x{gpu['device_id'][2:].upper()}10DE"))
        L(_q_line(2, "Bus Id", bus))
        L(_q_line(2, "Sub System Id", gpu.get("subsystem_id", "0x16C110DE")))
        L(_q_line(2, "GPU Link Info"))
        gen = str(node.profile["pcie"]["generation"])
        L(_q_line(3, "PCIe Generation"))
        for key in ("Max", "Current", "Device Current", "Device Max"):
            L(_q_line(4, key, gen))
        L(_q_line(4, "Host Max", gen))
        L(_q_line(3, "Link Width"))
        L(_q_line(4, "Max", f"{node.profile['pcie']['width']}x"))
        L(_q_line(4, "Current", f"{node.width(g)}x"))
        L(_q_line(2, "Bridge Chip"))
        L(_q_line(3, "Type", "N/A"))
        L(_q_line(3, "Firmware", "N/A"))
        L(_q_line(2, "Replays Since Reset", "0"))
        L(_q_line(2, "Replay Number Rollovers", "0"))
        L(_q_line(2, "Tx Throughput", "0 KB/s"))
        L(_q_line(2, "Rx Throughput", "0 KB/s"))
        L(_q_line(1, "Fan Speed", "N/A"))
        L(_q_line(1, "Performance State", "P0"))
        L(_q_line(1, "Clocks Event Reasons"))
        for reason, active in node.clock_events(_i).items():
            L(_q_line(2, CLOCK_EVENT_REASONS[reason], "Active" if active else "Not Active"))
        mem = int(gpu["memory_mib"])
        reserved = 551 if mem < 100000 else 616
        L(_q_line(1, "FB Memory Usage"))
        L(_q_line(2, "Total", f"{mem} MiB"))
        L(_q_line(2, "Reserved", f"{reserved} MiB"))
        L(_q_line(2, "Used", "0 MiB"))
        L(_q_line(2, "Free", f"{mem - reserved} MiB"))
        L(_q_line(1, "BAR1 Memory Usage"))
        L(_q_line(2, "Total", "131072 MiB"))
        L(_q_line(2, "Used", "1 MiB"))
        L(_q_line(2, "Free", "131071 MiB"))
        L(_q_line(1, "Compute Mode", "Default"))
        L(_q_line(1, "Utilization"))
        L(_q_line(2, "Gpu", f"{node.utilization(_i)} %"))
        for key in ("Memory", "Encoder", "Decoder"):
            L(_q_line(2, key, "0 %"))
        L(_q_line(1, "ECC Mode"))
        L(_q_line(2, "Current", "Enabled"))
        L(_q_line(2, "Pending", "Enabled"))
        L(_q_line(1, "ECC Errors"))
        for scope in ("Volatile", "Aggregate"):
            L(_q_line(2, scope))
            L(_q_line(3, "SRAM Correctable", "0"))
            L(_q_line(3, "SRAM Uncorrectable Parity", "0"))
            L(_q_line(3, "SRAM Uncorrectable SEC-DED", "0"))
            L(_q_line(3, "DRAM Correctable", "0"))
            L(_q_line(3, "DRAM Uncorrectable", str(unc)))
            if scope == "Aggregate":
                L(_q_line(3, "SRAM Threshold Exceeded", "No"))
        L(_q_line(1, "Retired Pages"))
        L(_q_line(2, "Single Bit ECC", "N/A"))
        L(_q_line(2, "Double Bit ECC", "N/A"))
        L(_q_line(2, "Pending Page Blacklist", "N/A"))
        L(_q_line(1, "Remapped Rows"))
        L(_q_line(2, "Correctable Error", "0"))
        L(_q_line(2, "Uncorrectable Error", str(node.remap_unc(g))))
        L(_q_line(2, "Pending", "Yes" if node.remap_pending(g) else "No"))
        L(_q_line(2, "Remapping Failure Occurred", "No"))
        L(_q_line(2, "Bank Remap Availability Histogram"))
        L(_q_line(3, "Max", "2560 bank(s)" if not node.remap_pending(g) else "2559 bank(s)"))
        L(_q_line(3, "High", "0 bank(s)"))
        L(_q_line(3, "Partial", "0 bank(s)" if not node.remap_pending(g) else "1 bank(s)"))
        L(_q_line(3, "Low", "0 bank(s)"))
        L(_q_line(3, "None", "0 bank(s)"))
        L(_q_line(1, "Temperature"))
        L(_q_line(2, "GPU Current Temp", f"{g.get('temp_c', 33)} C"))
        L(_q_line(2, "GPU Shutdown Temp", "92 C"))
        L(_q_line(2, "GPU Slowdown Temp", "89 C"))
        L(_q_line(1, "GPU Power Readings"))
        power = float(gpu.get("power_limit_w", 700))
        L(_q_line(2, "Average Power Draw", f"{g.get('power_w', 70):.2f} W"))
        L(_q_line(2, "Current Power Limit", f"{power:.2f} W"))
        L(_q_line(2, "Default Power Limit", f"{power:.2f} W"))
        L(_q_line(2, "Max Power Limit", f"{power:.2f} W"))
        L(_q_line(1, "Fabric"))
        L(_q_line(2, "State", state))
        L(_q_line(2, "Status", status))
        L(_q_line(1, "Processes", "None"))
        L("")
    return "\n".join(lines) + "\n"


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def smi_xml(node: Node, driver: str, cuda: str) -> str:
    gpu = node.gpu
    pm = "Enabled" if node.persistence() else "Disabled"
    state, status = fabric_state(node)
    out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">', "<nvidia_smi_log>",
           f"\t<timestamp>{now_line()}</timestamp>", f"\t<driver_version>{driver}</driver_version>",
           f"\t<cuda_version>{cuda}</cuda_version>", f"\t<attached_gpus>{len(node.gpus)}</attached_gpus>"]

    def tree(depth: int, tag: str, content: object) -> None:
        pad = "\t" * depth
        if isinstance(content, dict):
            out.append(f"{pad}<{tag}>")
            for k, v in content.items():
                tree(depth + 1, k, v)
            out.append(f"{pad}</{tag}>")
        else:
            out.append(f"{pad}<{tag}>{_xml_escape(str(content))}</{tag}>")

    for i, g in enumerate(node.gpus):
        bus = bus_id(g)
        b = bus.split(":")
        mem = int(gpu["memory_mib"])
        reserved = 551 if mem < 100000 else 616
        unc = str(node.ecc_unc(g))
        ecc_scope = {"sram_correctable": "0", "sram_uncorrectable_parity": "0", "sram_uncorrectable_secded": "0",
                     "dram_correctable": "0", "dram_uncorrectable": unc}
        gen = str(node.profile["pcie"]["generation"])
        out.append(f'\t<gpu id="{bus}">')
        body = {
            "product_name": gpu["model"], "product_brand": "NVIDIA",
            "product_architecture": gpu.get("architecture", "hopper").capitalize(),
            "display_mode": "Requested functionality has been deprecated", "display_active": "Disabled",
            "persistence_mode": pm, "addressing_mode": "None",
            "mig_mode": {"current_mig": "Disabled", "pending_mig": "Disabled"},
            "serial": g["serial"], "uuid": g["uuid"], "minor_number": str(g["index"]),
            "vbios_version": node.vbios(g), "multigpu_board": "No",
            "pci": {
                "pci_bus": b[1].upper(), "pci_device": b[2].split(".")[0].upper(), "pci_domain": "0000",
                "pci_base_class": "3", "pci_sub_class": "2",
                "pci_device_id": f"{gpu['device_id'][2:].upper()}10DE", "pci_bus_id": bus,
                "pci_sub_system_id": gpu.get("subsystem_id", "0x16C110DE")[2:],
                "pci_gpu_link_info": {
                    "pcie_gen": {"max_link_gen": gen, "current_link_gen": gen, "device_current_link_gen": gen,
                                 "max_device_link_gen": gen, "max_host_link_gen": gen},
                    "link_widths": {"max_link_width": f"{node.profile['pcie']['width']}x",
                                    "current_link_width": f"{node.width(g)}x"},
                },
                "replay_counter": "0", "replay_rollover_counter": "0",
            },
            "fan_speed": "N/A", "performance_state": "P0",
            "clocks_event_reasons": {f"clocks_event_reason_{r}": "Active" if on else "Not Active"
                                     for r, on in node.clock_events(i).items()},
            "fb_memory_usage": {"total": f"{mem} MiB", "reserved": f"{reserved} MiB", "used": "0 MiB",
                                "free": f"{mem - reserved} MiB"},
            "compute_mode": "Default",
            "utilization": {"gpu_util": f"{node.utilization(i)} %", "memory_util": "0 %", "encoder_util": "0 %",
                            "decoder_util": "0 %", "jpeg_util": "0 %", "ofa_util": "0 %"},
            "ecc_mode": {"current_ecc": "Enabled", "pending_ecc": "Enabled"},
            "ecc_errors": {"volatile": dict(ecc_scope),
                           "aggregate": {**ecc_scope, "sram_threshold_exceeded": "No"}},
            "retired_pages": {"multiple_single_bit_retirement": {"retired_count": "N/A"},
                              "double_bit_retirement": {"retired_count": "N/A"},
                              "pending_blacklist": "N/A", "pending_retirement": "N/A"},
            "remapped_rows": {"remapped_row_corr": "0", "remapped_row_unc": str(node.remap_unc(g)),
                              "remapped_row_pending": "Yes" if node.remap_pending(g) else "No",
                              "remapped_row_failure": "No"},
            "temperature": {"gpu_temp": f"{g.get('temp_c', 33)} C"},
            "gpu_power_readings": {"average_power_draw": f"{g.get('power_w', 70):.2f} W",
                                   "current_power_limit": f"{float(gpu.get('power_limit_w', 700)):.2f} W"},
            "fabric": {"state": state, "status": status},
            "processes": "",
        }
        for k, v in body.items():
            tree(2, k, v)
        out.append("\t</gpu>")
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


def _yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


def query_value(node: Node, i: int, g: dict, field: str, driver: str, cuda: str) -> tuple[str, str]:
    """(value, unit) of one --query-gpu field; unit is '' when the field has none."""
    gpu = node.gpu
    mem = int(gpu["memory_mib"])
    reserved = 551 if mem < 100000 else 616
    gen = str(node.profile["pcie"]["generation"])
    power = float(gpu.get("power_limit_w", 700))
    values: dict[str, tuple[str, str]] = {
        "timestamp": (time.strftime("%Y/%m/%d %H:%M:%S.000"), ""),
        "driver_version": (driver, ""),
        "count": (str(len(node.gpus)), ""),
        "name": (gpu["model"], ""), "gpu_name": (gpu["model"], ""),
        "serial": (g["serial"], ""), "gpu_serial": (g["serial"], ""),
        "uuid": (g["uuid"], ""), "gpu_uuid": (g["uuid"], ""),
        "index": (str(i), ""),
        "pci.bus_id": (bus_id(g), ""), "gpu_bus_id": (bus_id(g), ""),
        "pci.domain": ("0x0000", ""), "pci.bus": (f"0x{bus_id(g).split(':')[1].upper()}", ""),
        "pci.device_id": (f"0x{gpu['device_id'][2:].upper()}10DE", ""),
        "pci.sub_device_id": (gpu.get("subsystem_id", "0x16C110DE"), ""),
        "pcie.link.gen.current": (gen, ""), "pcie.link.gen.gpucurrent": (gen, ""),
        "pcie.link.gen.max": (gen, ""), "pcie.link.gen.gpumax": (gen, ""), "pcie.link.gen.hostmax": (gen, ""),
        "pcie.link.width.current": (str(node.width(g)), ""),
        "pcie.link.width.max": (str(node.profile["pcie"]["width"]), ""),
        "persistence_mode": ("Enabled" if node.persistence() else "Disabled", ""),
        "vbios_version": (node.vbios(g), ""),
        "compute_cap": (gpu.get("compute_capability", "9.0"), ""),
        "pstate": ("P0", ""),
        "memory.total": (str(mem), "MiB"), "memory.reserved": (str(reserved), "MiB"),
        "memory.used": ("0", "MiB"), "memory.free": (str(mem - reserved), "MiB"),
        "utilization.gpu": ("0", "%"), "utilization.memory": ("0", "%"),
        "temperature.gpu": (str(g.get("temp_c", 33)), ""),
        "power.draw": (f"{g.get('power_w', 70):.2f}", "W"),
        "power.limit": (f"{power:.2f}", "W"), "power.max_limit": (f"{power:.2f}", "W"),
        "clocks.sm": ("345", "MHz"), "clocks.mem": ("2619", "MHz"),
        "clocks.max.sm": ("1980", "MHz"), "clocks.max.mem": ("2619", "MHz"),
        "ecc.mode.current": ("Enabled", ""), "ecc.mode.pending": ("Enabled", ""),
        "ecc.errors.uncorrected.volatile.total": (str(node.ecc_unc(g)), ""),
        "ecc.errors.uncorrected.aggregate.total": (str(node.ecc_unc(g)), ""),
        "ecc.errors.corrected.volatile.total": ("0", ""),
        "ecc.errors.corrected.aggregate.total": ("0", ""),
        "ecc.errors.uncorrected.volatile.dram": (str(node.ecc_unc(g)), ""),
        "ecc.errors.uncorrected.aggregate.dram": (str(node.ecc_unc(g)), ""),
        "retired_pages.single_bit_ecc.count": ("[N/A]", ""), "retired_pages.double_bit.count": ("[N/A]", ""),
        "retired_pages.pending": ("[N/A]", ""),
        "remapped_rows.correctable": ("0", ""),
        "remapped_rows.uncorrectable": (str(node.remap_unc(g)), ""),
        "remapped_rows.pending": (_yes_no(node.remap_pending(g)), ""),
        "remapped_rows.failure": ("No", ""),
        "fabric.state": (fabric_state(node)[0], ""), "fabric.status": (fabric_state(node)[1], ""),
        "mig.mode.current": ("Disabled", ""),
    }
    values["utilization.gpu"] = (str(node.utilization(i)), "%")
    # clocks_event_reasons.* (driver >= 535) and the older clocks_throttle_reasons.* names
    for prefix in ("clocks_event_reasons", "clocks_throttle_reasons"):
        for reason, active in node.clock_events(i).items():
            values[f"{prefix}.{reason}"] = ("Active" if active else "Not Active", "")
    if field not in values:
        raise KeyError(field)
    return values[field]


def smi_query(node: Node, fields: list[str], fmt: set[str], driver: str, cuda: str, only: set[int] | None) -> str:
    for f in fields:
        try:
            query_value(node, 0, node.gpus[0] if node.gpus else node.profile["gpus"][0], f, driver, cuda)
        except KeyError:
            die(f'Field "{f}" is not a valid field to query.\n', 2)
    rows = []
    header_cells = []
    sample = [query_value(node, 0, node.profile["gpus"][0], f, driver, cuda) for f in fields]
    for f, (_, unit) in zip(fields, sample, strict=False):
        header_cells.append(f if "nounits" in fmt or not unit else f"{f} [{unit}]")
    if "noheader" not in fmt:
        rows.append(", ".join(header_cells))
    for i, g in enumerate(node.gpus):
        if only is not None and i not in only:
            continue
        cells = []
        for f in fields:
            value, unit = query_value(node, i, g, f, driver, cuda)
            cells.append(value if "nounits" in fmt or not unit or value.startswith("[") else f"{value} {unit}")
        rows.append(", ".join(cells))
    return "\n".join(rows) + "\n"


def smi_topo(node: Node) -> str:
    gpus = node.gpus
    names = [f"GPU{i}" for i in range(len(gpus))]
    out = ["\t\x1b[4m" + "\t".join([*names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"]
    affinity = node.profile.get("cpu_affinity", {})
    for i, a in enumerate(gpus):
        cells = [" X " if a is b else node.link(a, b) for b in gpus]
        numa = a["numa"]
        out.append("\t".join([names[i], *cells, affinity.get(str(numa), "0-1"), str(numa), "", "N/A"]))
    out.append("")
    out.append("Legend:")
    out.append("")
    out.append("  X    = Self")
    out.append("  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)")
    out.append("  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
               "within a NUMA node")
    out.append("  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)")
    out.append("  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)")
    out.append("  PIX  = Connection traversing at most a single PCIe bridge")
    out.append("  NV#  = Connection traversing a bonded set of # NVLinks")
    return "\n".join(out) + "\n"


def _per_link(node: Node, only: set[int] | None, link_lines) -> str:
    """The per-GPU, per-link layout `nvidia-smi nvlink -s` and `-e` share: "GPU i: <name>
    (UUID: ...)" then `link_lines(gpu, n)` for each of the profile's links (or NVML's
    all-inactive line when the SKU has none)."""
    links = int(node.profile["nvlink"].get("links_per_gpu") or 0)
    out = []
    for i, g in enumerate(node.gpus):
        if only is not None and i not in only:
            continue
        out.append(f"GPU {i}: {node.gpu['model']} (UUID: {g['uuid']})")
        if not links:
            out.append("NVML: Unable to retrieve NVLink information as all links are inactive")
            continue
        for n in range(links):
            out += link_lines(g, n)
    return "\n".join(out) + "\n"


def smi_nvlink(node: Node, only: set[int] | None) -> str:
    speed = float(node.profile["nvlink"].get("link_gb_s") or 0)
    return _per_link(node, only, lambda g, n: [f"\t Link {n}: {speed:.3f} GB/s"])


def smi_nvlink_errors(node: Node, only: set[int] | None) -> str:
    """`nvidia-smi nvlink -e`, shaped as the real output (tests/data/fixtures/nvlink_errors):
    "GPU i: <name> (UUID: ...)" then "\t Link n: Replay Errors: c" / Recovery / CRC per link."""
    rising = 0
    if node.nvlink_errors:
        try:
            since = Path(os.environ.get("GPUCTL_LAB_FAULTS", "/etc/gpuctl-lab/faults")).stat().st_mtime
        except OSError:
            since = time.time()
        rising = max(1, int(time.time() - since) + 1)

    def lines(g: dict, n: int) -> list[str]:
        bad = rising if (g["index"] in node.nvlink_errors and n == 0) else 0
        return [f"\t Link {n}: Replay Errors: {bad}", f"\t Link {n}: Recovery Errors: 0",
                f"\t Link {n}: CRC Errors: {bad}"]

    return _per_link(node, only, lines)


def _opt_value(args: list[str], *names: str) -> str | None:
    for k, a in enumerate(args):
        for n in names:
            if a == n and k + 1 < len(args):
                return args[k + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def _only(args: list[str], node: Node) -> set[int] | None:
    raw = _opt_value(args, "-i", "--id")
    if raw is None:
        return None
    out = set()
    for part in raw.split(","):
        part = part.strip()
        if part.isdigit():
            out.add(int(part))
        else:
            match = [i for i, g in enumerate(node.gpus) if part in (g["uuid"], g["bus_id"], g["serial"])]
            if not match:
                die(f"No devices were found matching {part}\n", 6)
            out.update(match)
    for i in out:
        if i >= len(node.gpus):
            die(f"Invalid device index {i}\n", 6)  # unverified wording (nvidia-smi prints a usage hint)
    return out


def nvidia_smi(args: list[str]) -> None:
    profile = load_profile()
    node = Node(profile, load_faults())
    kernel, _lib = driver_state("nvidia-smi")
    driver = kernel
    cuda = package_info().get("cuda_version", "")
    if not node.gpus:
        die("No devices were found\n", 6)
    if args[:1] == ["topo"]:
        if "-m" in args or "--matrix" in args:
            sys.stdout.write(smi_topo(node))
            return
        die("Usage: nvidia-smi topo -m\n", 2)
    if args[:1] == ["nvlink"]:
        if "-s" in args or "--status" in args:
            sys.stdout.write(smi_nvlink(node, _only(args, node)))
            return
        if "-e" in args or "--errorcounters" in args:
            sys.stdout.write(smi_nvlink_errors(node, _only(args, node)))
            return
        die("Usage: nvidia-smi nvlink --status|--errorcounters [-i N]\n", 2)
    if "-L" in args or "--list-gpus" in args:
        sys.stdout.write(smi_list(node))
        return
    pm = _opt_value(args, "-pm", "--persistence-mode")
    if pm is not None:
        state = sys_path(STATE_DIR)
        state.mkdir(parents=True, exist_ok=True)
        enable = pm in ("1", "ENABLED", "enabled")
        flag = state / "persistence-mode"
        if enable:
            flag.write_text("1\n")
        else:
            flag.unlink(missing_ok=True)
        only = _only(args, node)
        for i, g in enumerate(node.gpus):
            if only is None or i in only:
                word = "Enabled" if enable else "Disabled"
                sys.stdout.write(f"{word} persistence mode for GPU {bus_id(g)}.\n")
        sys.stdout.write("All done.\n")
        return
    query = _opt_value(args, "--query-gpu")
    if query is not None:
        fmt_raw = _opt_value(args, "--format")
        if not fmt_raw or not fmt_raw.startswith("csv"):
            die('"--format" option is required with --query-gpu (csv[,noheader][,nounits])\n', 2)
        fields = [f.strip() for f in query.split(",") if f.strip()]
        sys.stdout.write(smi_query(node, fields, set(fmt_raw.split(",")), driver, cuda, _only(args, node)))
        return
    if "-q" in args or "--query" in args:
        if "-x" in args or "--xml-format" in args:
            sys.stdout.write(smi_xml(node, driver, cuda))
        else:
            sys.stdout.write(smi_q(node, driver, cuda, _only(args, node)))
        return
    if not args:
        sys.stdout.write(smi_table(node, driver, cuda))
        return
    die(f"Invalid combination of input arguments: {' '.join(args)}\n"
        "Please run 'nvidia-smi -h' for help.\n", 2)


# ---------------------------------------------------------------------------- dcgmi


def dcgmi(args: list[str]) -> None:
    info = package_info()
    version = info.get("upstream", "")
    if args[:1] in (["-v"], ["--version"]):
        sys.stdout.write(f"Version : {version}\nBuild ID : 0\nBuild Date : 2025-01-01\n")
        return
    if not pid_alive(HOSTENGINE_PIDFILE):
        die("Error: unable to establish a connection to the specified host: localhost\n"
            "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n", 255)
    profile = load_profile()
    node = Node(profile, load_faults())
    if args[:1] == ["discovery"]:
        out = [f"{len(node.gpus)} GPU{'s' if len(node.gpus) != 1 else ''} found.",
               "+--------+----------------------------------------------------------------------+",
               "| GPU ID | Device Information                                                   |",
               "+--------+----------------------------------------------------------------------+"]
        for i, g in enumerate(node.gpus):
            for text in (f"Name: {node.gpu['model']}", f"PCI Bus ID: {g['bus_id']}", f"Device UUID: {g['uuid']}"):
                first = text.startswith("Name")
                out.append(f"| {str(i) if first else '':<6} | {text:<68} |")
            out.append("+--------+----------------------------------------------------------------------+")
        sys.stdout.write("\n".join(out) + "\n")
        return
    if args[:1] != ["diag"]:
        die("Usage: dcgmi diag -r <1|2|3|4> [-j]\n", 255)
    level = (_opt_value(args, "-r", "--run") or "1").lower()
    level_n = {"short": 1, "medium": 2, "long": 3, "xlong": 4}.get(level, int(level) if level.isdigit() else 1)
    try:
        kernel = sys_path("/sys/module/nvidia/version").read_text().strip()
    except OSError:
        die("Error: Unable to complete diagnostic for group 2147483647. "
            "Return: (-13) The third-party Profiling module returned an unrecoverable error.\n", 226)
        return
    ids = [f"{int(node.gpu['device_id'], 16):04x}"] * len(node.gpus)
    index_of = {g["index"]: i for i, g in enumerate(node.gpus)}
    pcie_bad = sorted(index_of[p] for p in node.pcie_x8 if p in index_of)
    mem_bad = sorted(index_of[p] for p in node.ecc if p in index_of)
    remap_bad = sorted(index_of[p] for p in (node.remap | node.ecc) if p in index_of)
    tests: list[tuple[str, str, str, list[int], str]] = []  # category, name, status, gpus, warning
    deploy = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
              "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"]
    for name in deploy:
        if name == "Page Retirement/Row Remap" and remap_bad:
            tests.append(("Deployment", name, "Fail", remap_bad,
                          f"GPU {remap_bad[0]} had uncorrectable memory errors and row remapping failed or "
                          "is pending. Drain the GPU and reset it or reboot the node to resolve this issue."))
        else:
            tests.append(("Deployment", name, "Pass", [], ""))
    if level_n >= 2:
        if pcie_bad:
            g = pcie_bad[0]
            tests.append(("Integration", "PCIe", "Fail", pcie_bad,
                          f"GPU {g}: PCIe link width 8x is below the expected maximum of "
                          f"{node.profile['pcie']['width']}x. Check the PCIe slot and riser."))
        else:
            tests.append(("Integration", "PCIe", "Pass", [], ""))
        if mem_bad:
            tests.append(("Hardware", "GPU Memory", "Fail", mem_bad,
                          f"GPU {mem_bad[0]}: a DBE (double bit error) occurred. Drain the GPU and reset it."))
        else:
            tests.append(("Hardware", "GPU Memory", "Pass", [], ""))
    if level_n >= 3:
        # DCGM also runs a test named "Diagnostic" here; it is left out because a table row of that
        # name reads as the header row to the parsers (gpuctl.parsers.dcgm skips it).
        for name in ("Targeted Stress", "Targeted Power", "Memory Bandwidth"):
            status, gpus = ("Fail", mem_bad) if mem_bad and name == "Memory Bandwidth" else ("Pass", [])
            tests.append(("Stress", name, status, gpus, "GPU memory errors" if gpus else ""))
    if "-j" in args or "--json" in args:
        cats: dict[str, list] = {}
        for cat, name, status, gpus, warn in tests:
            if status == "Pass":
                results = [{"gpu_ids": ",".join(str(i) for i in range(len(node.gpus))), "status": "Pass"}]
            else:
                results = [{"gpu_id": str(i), "status": "Fail",
                            "warnings": [{"warning": warn, "error_id": 0, "error_category": 0,
                                          "error_severity": 0}]} for i in gpus]
                ok = [i for i in range(len(node.gpus)) if i not in gpus]
                if ok:
                    results.append({"gpu_ids": ",".join(map(str, ok)), "status": "Pass"})
            cats.setdefault(cat, []).append({"name": name, "results": results})
        doc = {"DCGM GPU Diagnostic": {
            "test_categories": [{"category": c, "tests": t} for c, t in cats.items()],
            "version": version, "Driver Version Detected": kernel, "GPU Device IDs": ",".join(ids),
        }}
        sys.stdout.write(json.dumps(doc, indent=4) + "\n")
        return
    w = (27, 48)
    border = "+" + "-" * w[0] + "+" + "-" * w[1] + "+"

    def row(a: str, b: str) -> str:
        return f"| {a:<{w[0] - 1}}| {b:<{w[1] - 1}}|"

    def section(name: str, lead: str) -> str:
        label = f"-----  {name}  "
        tail = "|" if lead == "|" else "+"
        return lead + label + "-" * (w[0] - len(label)) + "+" + "-" * w[1] + tail

    out = ["Successfully ran diagnostic for group.", border, row("Diagnostic", "Result"),
           "+" + "=" * w[0] + "+" + "=" * w[1] + "+", section("Metadata", "|"),
           row("DCGM Version", version), row("Driver Version Detected", kernel),
           row("GPU Device IDs Detected", ",".join(ids))]
    current = None
    for cat, name, status, gpus, warn in tests:
        if cat != current:
            out.append(section(cat, "|" if cat == "Deployment" else "+"))
            current = cat
        if cat == "Deployment":
            out.append(row(name, status))
        elif status == "Pass":
            out.append(row(name, "Pass - All"))
        else:
            out.append(row(name, f"Fail - GPU: {', '.join(map(str, gpus))}"))
        if status != "Pass" and warn:
            out.append(row("Warning", warn[: w[1] - 2]))
    out.append(border)
    sys.stdout.write("\n".join(out) + "\n")


# ---------------------------------------------------------------------------- nccl-tests


def _size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text)


class MpiWorld:
    """This process's place in an Open MPI job (mpirun exports OMPI_COMM_WORLD_*)."""

    def __init__(self, size: int, rank: int, local_size: int, local_rank: int) -> None:
        self.size, self.rank, self.local_size, self.local_rank = size, rank, local_size, local_rank

    @property
    def nodes(self) -> int:
        return -(-self.size // self.local_size)

    def node_of(self, rank: int) -> int:
        """The node (in mapping order) a rank runs on: mpirun --map-by ppr:N:node fills
        the nodes one after another, N ranks each."""
        return rank // self.local_size


def mpi_world() -> MpiWorld | None:
    """The MPI job this process belongs to, or None when it runs alone (as nccl-tests
    built with MPI=1 does: a world of one is a plain single-process run)."""
    env = os.environ
    try:
        size = int(env["OMPI_COMM_WORLD_SIZE"])
        rank = int(env["OMPI_COMM_WORLD_RANK"])
        local_size = int(env.get("OMPI_COMM_WORLD_LOCAL_SIZE") or size)
        local_rank = int(env.get("OMPI_COMM_WORLD_LOCAL_RANK") or rank % max(local_size, 1))
    except (KeyError, ValueError):
        return None
    if size <= 1 or not 0 <= rank < size or local_size < 1:
        return None
    return MpiWorld(size, rank, local_size, local_rank)


MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun")


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def launcher_hosts() -> list[str]:
    """The hosts mpirun was given (its --hostfile, or -H/--host), in order, read from the
    mpirun this process descends from: a rank on the launching node is mpirun's child. The
    stand-in ranks do not talk to each other, so this is all rank 0 can know of the others."""
    pid = os.getppid()
    for _ in range(6):
        if pid <= 1:
            break
        try:
            argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            break
        if argv and os.path.basename(argv[0]) in MPI_LAUNCHERS:
            path = _opt_value(argv, "--hostfile", "-hostfile", "--machinefile", "-machinefile")
            if path:
                try:
                    if not os.path.isabs(path):
                        path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
                    lines = Path(path).read_text().splitlines()
                except OSError:
                    return []
                return [w[0] for w in (ln.split("#", 1)[0].split() for ln in lines) if w]
            listed = _opt_value(argv, "-H", "--host", "-host")
            return [h.split(":", 1)[0] for h in listed.split(",") if h] if listed else []
        pid = _ppid(pid)
    return []


def inter_node_busbw(profile: dict, node: Node) -> float:
    """The bus bandwidth a multi-node all_reduce reaches over the fabric: the profile's
    multi-node figure (from the SKU's threshold), else the fabric's line rate × HCAs per
    node; the faults on this node (slow_nccl, ib_rate_200) apply."""
    fabric = profile.get("fabric", {})
    rate = float(fabric.get("rate_gbps") or 0.0)
    figure = profile.get("figures", {}).get("multi_node_busbw_gb_s")
    bw = float(figure) if figure else rate * int(fabric.get("hcas") or 1) / 8
    if node.slow_nccl:
        bw *= 0.6
    for params in node.faults.get("ib_rate_200", []):
        try:
            speed_gbps = int(params.get("speed", "200000")) / 1000
        except ValueError:
            speed_gbps = 200.0
        if rate > speed_gbps > 0:
            bw *= speed_gbps / rate
    return bw


#: each node's first rank exchanges this many bytes each way with rank 0, EXCHANGE_ROUNDS times;
#: the best round counts (the other ranks starting beside it on a TCG guest take CPU from some)
EXCHANGE_BYTES = 256 << 10
EXCHANGE_ROUNDS = 8
EXCHANGE_TIMEOUT_S = 90.0


def bootstrap_root() -> tuple[str, int] | None:
    """NCCL_COMM_ID ("address:port", NCCL's bootstrap root: rank 0 listens there), or None."""
    host, _, port = os.environ.get("NCCL_COMM_ID", "").rpartition(":")
    try:
        return (host.strip("[]"), int(port)) if host else None
    except ValueError:
        return None


def _recv_exactly(conn, n: int) -> None:
    got = 0
    while got < n:
        chunk = conn.recv(min(1 << 16, n - got))
        if not chunk:
            raise OSError(f"peer closed after {got} of {n} bytes")
        got += len(chunk)


def exchange(mpi: MpiWorld, root: tuple[str, int]) -> float | None:
    """Real bytes between the ranks' nodes, over the fabric address NCCL_COMM_ID names (so
    traffic shaping on a node's fabric interface really slows it): rank 0 listens there; the
    first rank of every other node connects, and on each of rank 0's EXCHANGE_ROUNDS words
    sends EXCHANGE_BYTES, receives as many back and acknowledges. Rank 0 returns the slowest
    node's best round in GB/s (both directions' bytes over the time from its word to the
    acknowledgement); the others return None. A node that never connects fails the run, as NCCL's bootstrap does."""
    import socket

    block = b"\0" * (1 << 16)

    def send(conn, n: int) -> None:
        while n > 0:
            n -= conn.send(block[: min(len(block), n)])

    if mpi.rank == 0:
        rates = []
        with socket.create_server(root) as srv:
            srv.settimeout(EXCHANGE_TIMEOUT_S)
            for _ in range(mpi.nodes - 1):
                try:
                    conn, _peer = srv.accept()
                except OSError as exc:
                    die(f"{os.uname().nodename}: NCCL WARN Bootstrap : no connection from the other nodes on "
                        f"{root[0]}:{root[1]} ({exc})\n .. Test failure common.cu:891\n", 1)
                best = 0.0
                with conn:
                    conn.settimeout(EXCHANGE_TIMEOUT_S)
                    for _ in range(EXCHANGE_ROUNDS):
                        start = time.monotonic()
                        conn.sendall(b"g")
                        _recv_exactly(conn, EXCHANGE_BYTES)
                        send(conn, EXCHANGE_BYTES)
                        _recv_exactly(conn, 1)
                        best = max(best, 2 * EXCHANGE_BYTES / max(time.monotonic() - start, 1e-6) / 1e9)
                    conn.sendall(b"e")
                rates.append(best)
        return min(rates) if rates else None
    if mpi.local_rank != 0 or mpi.node_of(mpi.rank) == 0:
        return None
    deadline = time.monotonic() + EXCHANGE_TIMEOUT_S
    while True:
        try:
            conn = socket.create_connection(root, timeout=5)
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                die(f"{os.uname().nodename}: NCCL WARN Bootstrap : cannot reach {root[0]}:{root[1]} ({exc})\n", 1)
            time.sleep(0.2)
    with conn:
        conn.settimeout(EXCHANGE_TIMEOUT_S)
        while conn.recv(1) == b"g":
            send(conn, EXCHANGE_BYTES)
            _recv_exactly(conn, EXCHANGE_BYTES)
            conn.sendall(b"k")
    return None


def nccl_test(name: str, args: list[str]) -> None:
    """all_reduce_perf & co. Alone: one process drives `-g` GPUs. Under mpirun (MPI=1
    build): every rank drives `-g` GPUs from its local rank on, checks them on its own
    node (a rank with no such GPU fails the job), and only world rank 0 prints — the
    others wait about as long as the run and exit 0 silently."""
    profile = load_profile()
    node = Node(profile, load_faults())
    mpi = mpi_world()
    try:
        kernel = sys_path("/sys/module/nvidia/version").read_text().strip()
    except OSError:
        kernel = ""
    lo = _size(_opt_value(args, "-b", "--minbytes") or "32M")
    hi = _size(_opt_value(args, "-e", "--maxbytes") or "32M")
    factor = int(_opt_value(args, "-f", "--stepfactor") or "2")
    ngpus = int(_opt_value(args, "-g", "--ngpus") or "1")
    iters = int(_opt_value(args, "-n", "--iters") or "20")
    warm = int(_opt_value(args, "-w", "--warmup_iters") or "1")
    check = int(_opt_value(args, "-c", "--check") or "1")
    host = os.uname().nodename
    first = mpi.local_rank * ngpus if mpi else 0
    if not kernel:
        die(f"{host}: Test CUDA failure common.cu:1014 'CUDA driver version is insufficient for CUDA "
            "runtime version'\n .. {host} pid {os.getpid()}: Test failure common.cu:891\n", 1)
    if first + ngpus > len(node.gpus):
        die(f"{host}: Test CUDA failure common.cu:1014 'invalid device ordinal'\n"
            f" .. {host} pid {os.getpid()}: Test failure common.cu:891\n", 1)
    try:
        nccl_version = os.readlink(sys_path("/usr/lib/x86_64-linux-gnu/libnccl.so.2")).rsplit("libnccl.so.", 1)[1]
    except (OSError, IndexError):
        die(f"{name}: error while loading shared libraries: libnccl.so.2: cannot open shared object file: "
            "No such file or directory", 127)
        return
    major, minor, patch = (int(x) for x in nccl_version.split(".")[:3])
    lib_code = str(major * 10000 + minor * 100 + patch)
    figures = profile.get("figures", {})
    peak = float(figures.get("all_reduce_busbw_gb_s") or 0.0)
    if name == "all_gather_perf" or name == "reduce_scatter_perf":
        peak *= 0.97
    if node.slow_nccl:
        peak *= 0.6
    if node.nvlink_pairs or len(node.gpus) < node.gpu["count"]:
        peak *= 0.5
    measured = None
    if mpi and mpi.nodes > 1:
        peak = min(peak, inter_node_busbw(profile, node))
        root = bootstrap_root()
        if root is not None:  # gpuctl named a bootstrap root: measure real bytes between the nodes
            measured = exchange(mpi, root)
            if mpi.rank != 0:
                return
            peak = measured or 0.0
    ranks = ngpus * (mpi.size if mpi else 1)
    busfactor = {"all_reduce_perf": 2 * (ranks - 1) / ranks, "all_gather_perf": (ranks - 1) / ranks,
                 "reduce_scatter_perf": (ranks - 1) / ranks}.get(name, 1.0)
    out = [f"# nccl-tests version 2.17.6 nccl-headers={lib_code} nccl-library={lib_code}",
           f"# Collective test starting: {name}",
           f"# nThread 1 nGpus {ngpus} minBytes {lo} maxBytes {hi} step: {factor}(factor) warmup iters: {warm} "
           f"iters: {iters} agg iters: 1 validation: {check} graph: 0", "#", "# Using devices"]
    if mpi is None:
        for r, g in enumerate(node.gpus[:ngpus]):
            bus = g["bus_id"][4:12].lower()
            out.append(f"#  Rank {r:>2} Group  0 Pid {os.getpid():>6} on {host:>10} device {r:>2} [{bus}] "
                       f"{node.gpu['model']}")
    else:
        out += _mpi_device_lines(mpi, node, ngpus, host)
    out += ["#",
            "#                                                              out-of-place                       "
            "in-place          ",
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   "
            "algbw   busbw  #wrong ",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  "
            "(GB/s)  (GB/s)         "]
    rng = random.Random(hash((name, lo, hi, ngpus)) & 0xFFFF)
    size = lo
    busbws = []
    run_us = 0.0
    redop = "sum" if name != "all_gather_perf" else "none"
    while size <= hi:
        count = size // 4 if name != "all_gather_perf" else size // 4 // max(ranks, 1)
        # latency-bound below ~64 MiB, bandwidth-bound above (shape of a real sweep)
        eff = (size / (size + 48 * (1 << 20)) if measured is None else 1.0) if ranks > 1 else 0.0
        row = [f"{size:>12}", f"{count:>12}", f"{'float':>8}", f"{redop:>6}", f"{-1:>6}"]
        for _ in range(2):
            bus = peak * eff * (1 + rng.uniform(-0.004, 0.004)) if ranks > 1 else 0.0
            alg = bus / busfactor if busfactor else 0.0
            t_us = size / (alg * 1e3) if alg > 0 else 0.2 + size / 1e6
            if ranks == 1:
                alg = size / (t_us * 1e3)
            busbws.append(bus)
            run_us += t_us * (warm + iters)
            # nccl-tests prints GB/s with 2 decimals; a measured lab figure (MB/s over an emulated
            # NIC) keeps 5, or it would read 0.00
            fmt = ">7.2f" if measured is None else ">7.5f"
            row += [f"{t_us:>8.1f}" if t_us >= 1000 else f"{t_us:>8.2f}", f"{alg:{fmt}}", f"{bus:{fmt}}",
                    f"{0 if check else 'N/A':>6}"]
        out.append(" ".join(row))
        if factor <= 1:
            break
        size *= factor
    if mpi and mpi.rank != 0:
        time.sleep(min(MPI_RANK_WAIT_MAX_S, max(MPI_RANK_WAIT_MIN_S, run_us / 1e6)))
        return
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.3f} ", "#",
            f"# Collective test concluded: {name}", ""]
    sys.stdout.write("\n".join(out) + "\n")


#: How long a silent rank (not world rank 0) stays up: about the simulated run, bounded.
MPI_RANK_WAIT_MIN_S = 0.2
MPI_RANK_WAIT_MAX_S = 3.0


def _mpi_device_lines(mpi: MpiWorld, node: Node, ngpus: int, host: str) -> list[str]:
    """One `# Rank` line per GPU of every MPI rank, as nccl-tests prints after gathering
    them. Rank 0 knows its own node; the other nodes are named by mpirun's host list in
    mapping order (the first entry is the launching node), `node<k>` where it has none.
    Bus ids come from this node's profile (the lab's nodes share a SKU); a pid is known
    for this process only (0 for the others)."""
    launched = launcher_hosts()
    lines = []
    for r in range(mpi.size):
        k = mpi.node_of(r)
        where = host if k == mpi.node_of(mpi.rank) else (launched[k] if k < len(launched) else f"node{k}")
        local = r - k * mpi.local_size
        pid = os.getpid() if r == mpi.rank else 0
        for j in range(ngpus):
            dev = local * ngpus + j
            g = node.profile["gpus"][dev % len(node.profile["gpus"])]
            bus = g["bus_id"][4:12].lower()
            lines.append(f"#  Rank {r * ngpus + j:>2} Group  0 Pid {pid:>6} on {where:>10} device {dev:>2} [{bus}] "
                         f"{node.gpu['model']}")
    return lines


# ---------------------------------------------------------------------------- bandwidth probe


def bwprobe(args: list[str]) -> None:
    profile = load_profile()
    node = Node(profile, load_faults())
    f = profile.get("figures", {})
    try:
        sys_path("/sys/module/nvidia/version").read_text()
    except OSError:
        sys.stdout.write(json.dumps({"tool": "gpuctl-bwprobe", "version": 1, "gpus": [],
                                     "error": "CUDA driver not loaded (cudaErrorInsufficientDriver)"}) + "\n")
        sys.exit(1)
    gpus = []
    for i, g in enumerate(node.gpus):
        scale = 0.5 if g["index"] in node.pcie_x8 else 1.0
        peers = {}
        for j, h in enumerate(node.gpus):
            if j == i:
                continue
            cell = node.link(g, h)
            p2p = float(f.get("p2p_gb_s") or 0.0)
            peers[str(j)] = round(p2p if cell.startswith("NV") else min(p2p, float(f.get("h2d_gb_s") or 0)), 1)
        gpus.append({"index": i, "bus_id": g["bus_id"],
                     "h2d_gb_s": round(float(f.get("h2d_gb_s") or 0) * scale, 1),
                     "d2h_gb_s": round(float(f.get("d2h_gb_s") or 0) * scale, 1),
                     "hbm_copy_gb_s": round(float(f.get("hbm_copy_gb_s") or 0), 1),
                     "p2p_gb_s": peers})
    sys.stdout.write(json.dumps({"tool": "gpuctl-bwprobe", "version": 1, "gpus": gpus}, indent=2) + "\n")


# ---------------------------------------------------------------------------- gdsio


def gdsio(args: list[str]) -> None:
    profile = load_profile()
    node = Node(profile, load_faults())
    try:
        sys_path("/sys/module/nvidia_fs/version").read_text()
    except OSError:
        die("Error: nvidia-fs driver not loaded (cuFileDriverOpen failed: GPUDirect Storage not supported on "
            "current file)\nfile register error: GPUDirect Storage not supported on current file\n", 1)
    io = {"0": "READ", "1": "WRITE", "2": "RANDREAD", "3": "RANDWRITE"}.get(_opt_value(args, "-I") or "0", "READ")
    xfer = {"0": "GPUD", "1": "CPUONLY", "2": "CPU_GPU", "3": "CPU_ASYNC_GPU", "4": "CPU_CACHED_GPU",
            "5": "GPUD_ASYNC", "6": "GPU_BATCH"}.get(_opt_value(args, "-x") or "0", "GPUD")
    threads = int(_opt_value(args, "-w") or "1")
    io_kib = _size(_opt_value(args, "-i") or "1M") // 1024
    size_kib = _size(_opt_value(args, "-s") or "1G") // 1024
    gpu = int(_opt_value(args, "-d") or "0")
    if gpu >= len(node.gpus):
        die(f"Error: invalid gpu index {gpu}\n", 1)
    gib_s = float(profile.get("figures", {}).get("gdsio_gib_s") or 5.0)
    if "RAND" in io:
        gib_s *= 0.8
    data_kib = size_kib * threads
    seconds = data_kib / (gib_s * 1024 * 1024)
    ops = data_kib // max(io_kib, 1)
    lat = seconds * 1e6 * threads / max(ops, 1)
    sys.stdout.write(f"IoType: {io} XferType: {xfer} Threads: {threads} DataSetSize: {data_kib}/{size_kib}(KiB) "
                     f"IOSize: {io_kib}(KiB) Throughput: {gib_s:.6f} GiB/sec, Avg_Latency: {lat:.6f} usecs "
                     f"ops: {ops} total_time {seconds:.6f} secs\n")


# ---------------------------------------------------------------------------- daemons


def _write_pid(pidfile: str) -> None:
    path = sys_path(pidfile)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n")


def _daemonize() -> None:
    """Fork into the background like the real daemons (their units are Type=forking)."""
    if os.fork() > 0:
        time.sleep(0.2)
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)


def _serve(pidfile: str, check=None, interval: float = 2.0) -> None:
    _write_pid(pidfile)
    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while running:
        if check is not None:
            problem = check()
            if problem:
                sys.stderr.write(problem + "\n")
                sys_path(pidfile).unlink(missing_ok=True)
                sys.exit(1)
        time.sleep(interval)
    sys_path(pidfile).unlink(missing_ok=True)


def _log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def fabricmanager(args: list[str]) -> None:
    info = package_info()
    own = info.get("upstream", "")

    def problem() -> str | None:
        try:
            loaded = sys_path("/sys/module/nvidia/version").read_text().strip()
        except OSError:
            return ("fabric manager failed to open NVIDIA GPU driver: the nvidia kernel module is not loaded. "
                    "Please load the NVIDIA driver.")
        if loaded != own:
            return (f"fabric manager NVIDIA GPU driver interface version {own} don't match with driver version "
                    f"{loaded}. Please update with matching NVIDIA driver package.")
        if "fm_down" in load_faults():
            return ("request to query NVSwitch device information from NVSwitch driver failed with "
                    "error:WARNING Nothing to do (gpuctl lab fault fm_down)")
        return None

    first = problem()
    if first:
        _log(first)
        sys.exit(1)
    _log(f"Fabric Manager version {own} is running with the following configuration options")
    _daemonize()
    _serve(FM_PIDFILE, problem)


def persistenced(args: list[str]) -> None:
    if not sys_path("/sys/module/nvidia/version").is_file():
        _log("nvidia-persistenced failed to initialize. Check syslog for more details.")
        sys.exit(1)
    _log(f"Started (version {package_info().get('upstream', '')}).")
    _daemonize()
    _serve(PERSISTENCED_PIDFILE)


def hostengine(args: list[str]) -> None:
    if "-n" not in args and "--no-daemon" not in args:
        _daemonize()
    _log(f"DCGM initialized (nv-hostengine {package_info().get('upstream', '')})")
    _serve(HOSTENGINE_PIDFILE)


# ---------------------------------------------------------------------------- small tools


def nvcc(args: list[str]) -> None:
    info = package_info()
    cuda = info.get("cuda_version", "")
    full = info.get("upstream", cuda)
    if "--version" in args or "-V" in args:
        sys.stdout.write("nvcc: NVIDIA (R) Cuda compiler driver\n"
                         "Copyright (c) 2005-2025 NVIDIA Corporation\n"
                         "Built on Wed_Aug_20_01:58:59_PM_PDT_2025\n"
                         f"Cuda compilation tools, release {cuda}, V{full}\n"
                         f"Build cuda_{cuda}.r{cuda}/compiler.00000000_0\n")
        return
    die("nvcc fatal   : No input files specified; use option --help for more information", 1)


def ofed_info(args: list[str]) -> None:
    info = package_info()
    label = info.get("ofed_label", "")
    if "-s" in args:
        sys.stdout.write(f"{label}:\n")
        return
    sys.stdout.write(f"{label} (gpuctl lab stand-in: the verbs stack is Debian's rdma-core)\n")


def lctl(args: list[str]) -> None:
    version = package_info().get("upstream", "")
    if "--version" in args:
        sys.stdout.write(f"lctl {version}\n")
        return
    if args[:2] == ["get_param", "version"] or args[:3] == ["get_param", "-n", "version"]:
        if not sys_path("/sys/module/lustre/version").is_file():
            die('error: get_param: param_path \'version\': No such file or directory', 2)
        sys.stdout.write(("" if "-n" in args else "version=") + version + "\n")
        return
    die(f"lctl: unknown command {' '.join(args)} (gpuctl lab stand-in)", 1)


TOOLS = {
    "nvidia-smi": nvidia_smi,
    "dcgmi": dcgmi,
    "nv-hostengine": hostengine,
    "nv-fabricmanager": fabricmanager,
    "nvidia-persistenced": persistenced,
    "all_reduce_perf": lambda a: nccl_test("all_reduce_perf", a),
    "all_gather_perf": lambda a: nccl_test("all_gather_perf", a),
    "reduce_scatter_perf": lambda a: nccl_test("reduce_scatter_perf", a),
    "gpuctl-bwprobe": bwprobe,
    "gdsio": gdsio,
    "nvcc": nvcc,
    "ofed_info": ofed_info,
    "lctl": lctl,
}


# The tools whose output holds benchmark figures declare, on stderr, that they are stand-ins
# (the prefix is gpuctl.provenance.STANDIN_MARK; the report and the bench table mark every
# figure of such an output as emulated). stdout stays shaped exactly like the real tool's.
STANDIN_MARK = "gpuctl-lab-standin:"
FIGURE_TOOLS = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "gpuctl-bwprobe", "gdsio")


def declares(tool: str, args: list[str]) -> bool:
    """Whether this call prints figures: a figure tool, or `dcgmi diag`; under mpirun only
    world rank 0 (the one that prints), so the other ranks stay silent."""
    if tool not in FIGURE_TOOLS and not (tool == "dcgmi" and args[:1] == ["diag"]):
        return False
    mpi = mpi_world()
    return mpi is None or mpi.rank == 0


def declare(tool: str) -> None:
    info = package_info()
    package = f"{info.get('package') or 'unknown package'} {info.get('version') or ''}".strip()
    mpi = mpi_world()
    if tool in FIGURE_TOOLS[:3] and mpi is not None and mpi.nodes > 1 and bootstrap_root() is not None:
        what = ("figures measured: bytes exchanged over TCP between the ranks' nodes through the NCCL_COMM_ID "
                "address, not NCCL")
    else:
        what = "figures from the node's hardware profile, nothing measured"
    sys.stderr.write(f"{STANDIN_MARK} {tool} from the lab stand-in package {package}; emulated output, {what}\n")
    sys.stderr.flush()


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TOOLS:
        die(f"usage: labhw.py TOOL [ARGS]; tools: {', '.join(sorted(TOOLS))}", 2)
    if declares(argv[1], argv[2:]):
        declare(argv[1])
    TOOLS[argv[1]](argv[2:])


if __name__ == "__main__":
    main(sys.argv)
