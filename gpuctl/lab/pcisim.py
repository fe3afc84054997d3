"""Lab only: emulated NVIDIA devices in a lab node's sysfs PCI view.

Preflight reads GPUs, NVSwitches and their PCIe links from `/sys/bus/pci/devices` —
which works on real hardware before any driver is installed. A QEMU guest has no NVIDIA
devices, so the lab gives each node a PCI view that holds its real devices (symlinks to
their real sysfs directories) plus emulated GPU and NVSwitch entries from the node's
hardware profile (`/etc/gpuctl-lab/profile.json`), with the `gpu_missing` and `pcie_x8`
faults applied, and bind-mounts it over `/sys/bus/pci/devices`. gpuctl's preflight reads
the same files on a lab node as on a real one; nothing in the product knows about this.

As on an HGX baseboard, each emulated GPU sits below a PCIe switch: root port (bus-3):01.0
→ switch upstream port (bus-2):00.0 → downstream port (bus-1):00.0 → GPU; the entries in
the view are symlinks into a device tree (`TREE_DIR`), so `readlink -f` gives the real
nesting. The bridges carry a config space with a PCI Express capability and an ACS
extended capability (what `lspci -vvv` decodes into ACSCtl); every emulated device has the
kernel's `aer_dev_{correctable,fatal,nonfatal}` counter files (Documentation/ABI/testing/
sysfs-bus-pci-devices-aer_stats). Faults: `acs_redirect gpu=N` turns ACS request and
completion redirect on at the switch downstream port above GPU N; `pcie_aer gpu=N` gives
GPU N one non-fatal (completion timeout) and 40 correctable (bad TLP) AER errors.

`GUEST_SCRIPT` runs inside the guest (python3, as root); `refresh_command()` is the shell
line that (re)builds and mounts the view — run after the profile is pushed and after every
fault change. `install_unit_script()` installs a oneshot unit so the view survives reboots;
at boot it also loads the driver modules when installed, as udev's PCI modalias match
does for real GPUs (the emulated devices raise no uevent).
"""

from __future__ import annotations

import shlex

VIEW_DIR = "/run/gpuctl-lab/pci"
TREE_DIR = "/run/gpuctl-lab/pcitree"
SCRIPT_PATH = "/usr/local/lib/gpuctl-lab/pcisim.py"
UNIT_NAME = "gpuctl-lab-pcisim.service"

GUEST_SCRIPT = r'''
import json, os, shutil, subprocess, sys
LAB = os.environ.get("GPUCTL_LAB_ETC", "/etc/gpuctl-lab")
PROFILE, FAULTS = LAB + "/profile.json", LAB + "/faults"
VIEW = os.environ.get("GPUCTL_LAB_PCI_VIEW", "/run/gpuctl-lab/pci")
TREE = os.environ.get("GPUCTL_LAB_PCI_TREE", "/run/gpuctl-lab/pcitree")
TARGET = "/sys/bus/pci/devices"
GTS = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe",
       6: "64.0 GT/s PCIe"}
NVSWITCH_IDS = {"ampere": "0x1af1", "hopper": "0x22a3", "blackwell": "0x2901"}

def faults():
    out = {}
    try:
        for line in open(FAULTS):
            parts = line.split()
            if parts:
                out.setdefault(parts[0], []).append(dict(p.split("=", 1) for p in parts[1:] if "=" in p))
    except FileNotFoundError:
        pass
    return out

def gpus_with(f, name, default):
    return {int(p.get("gpu", default)) for p in f.get(name, [])}

def mounted():
    with open("/proc/self/mounts") as m:
        return any(l.split()[1] == TARGET for l in m)

if mounted():
    subprocess.run(["umount", TARGET], check=True)
try:
    profile = json.load(open(PROFILE))
except FileNotFoundError:
    sys.exit(0)  # no profile yet: leave the real view alone
f = faults()
count = profile["gpu"]["count"]
missing = gpus_with(f, "gpu_missing", count - 1)
narrow = gpus_with(f, "pcie_x8", 0)
acs_on = gpus_with(f, "acs_redirect", 0)
aer_bad = gpus_with(f, "pcie_aer", 0)
tmp, tree = VIEW + ".new", TREE + ".new"
for d in (tmp, tree):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
for name in os.listdir(TARGET):
    os.symlink(os.path.realpath(os.path.join(TARGET, name)), os.path.join(tmp, name))

# the kernel's AER statistics files (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats)
AER_NAMES = {
    "correctable": ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF"),
    "fatal": ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP",
              "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr",
              "PoisonTLPBlocked"),
}
AER_NAMES["nonfatal"] = AER_NAMES["fatal"]
AER_TOTAL = {"correctable": "TOTAL_ERR_COR", "fatal": "TOTAL_ERR_FATAL", "nonfatal": "TOTAL_ERR_NONFATAL"}

def aer_files(d, counts):
    for kind, names in AER_NAMES.items():
        mine = counts.get(kind, {})
        lines = ["%s %d" % (n, mine.get(n, 0)) for n in names] + ["%s %d" % (AER_TOTAL[kind], sum(mine.values()))]
        with open(os.path.join(d, "aer_dev_" + kind), "w") as out:
            out.write("\n".join(lines) + "\n")

# PCI Express port types (PCIe base spec, PCI Express Capabilities register bits 7:4)
ROOT_PORT, UPSTREAM, DOWNSTREAM = 4, 5, 6
ACS_CAP = 0x5f  # SrcValid TransBlk ReqRedir CmpltRedir UpstreamFwd DirectTrans (a PEX switch port's)
ACS_REDIRECT = 0x1d  # SrcValid ReqRedir CmpltRedir UpstreamFwd: what the kernel sets with an IOMMU on

def device(path, bus, vendor, dev, cls, gen, width, bridge=None, numa=-1):
    """An emulated PCI function at `path` in the tree, linked into the view as `bus`.
    bridge: (port type, primary, secondary, subordinate bus, ACSCtl) for a PCIe port."""
    d = os.path.join(tree, path)
    os.makedirs(d)
    os.symlink(d.replace(tree, TREE, 1), os.path.join(tmp, bus))
    max_width = width if bridge else profile["pcie"]["width"]
    for key, value in (("vendor", vendor), ("device", dev), ("class", cls),
                       ("current_link_speed", GTS[gen]), ("current_link_width", str(width)),
                       ("max_link_speed", GTS[gen]), ("max_link_width", str(max_width)),
                       ("irq", "0"), ("numa_node", str(numa)),
                       ("resource", "\n".join(["0x0000000000000000 " * 2 + "0x0000000000000000"] * 13))):
        with open(os.path.join(d, key), "w") as out:
            out.write(value + "\n")
    aer_files(d, {})
    # libpci (lspci, perftest) reads the config space: the header with the same ids; a bridge
    # has a type-1 header, a PCI Express capability and an ACS extended capability (4 KiB)
    config = bytearray(4096 if bridge else 256)
    config[0:2] = int(vendor, 16).to_bytes(2, "little")
    config[2:4] = int(dev, 16).to_bytes(2, "little")
    config[9:12] = int(cls, 16).to_bytes(3, "little")
    if bridge:
        kind, primary, secondary, subordinate, acs_ctl = bridge
        config[0x04:0x06] = (0x0407).to_bytes(2, "little")  # I/O, memory, bus master
        config[0x06:0x08] = (0x0010).to_bytes(2, "little")  # capabilities list
        config[0x0e] = 0x01  # header type 1 (bridge)
        config[0x18:0x1b] = bytes((primary, secondary, subordinate))
        config[0x34] = 0x40
        config[0x40:0x42] = bytes((0x10, 0x00))  # PCI Express capability, last in the list
        config[0x42:0x44] = (0x0002 | kind << 4).to_bytes(2, "little")
        config[0x4c:0x50] = (gen | width << 4).to_bytes(4, "little")  # LnkCap: speed, width
        config[0x52:0x54] = (gen | width << 4).to_bytes(2, "little")  # LnkSta
        config[0x100:0x104] = (0x000D | 1 << 16).to_bytes(4, "little")  # ACS extended capability, v1, last
        config[0x104:0x106] = ACS_CAP.to_bytes(2, "little")
        config[0x106:0x108] = acs_ctl.to_bytes(2, "little")
    with open(os.path.join(d, "config"), "wb") as out:
        out.write(bytes(config))
    return d

gen = profile["pcie"]["generation"]
width = profile["pcie"]["width"]
for g in profile["gpus"]:
    bus = g["bus_id"].lower()[-12:]  # 00000000:18:00.0 -> 0000:18:00.0
    n = int(bus[5:7], 16)
    root, up, down = ("0000:%02x:01.0" % (n - 3), "0000:%02x:00.0" % (n - 2), "0000:%02x:00.0" % (n - 1))
    chain = "pci0000:%02x/%s" % (n - 3, root)
    device(chain, root, "0x8086", "0x352a", "0x060400", gen, width, (ROOT_PORT, n - 3, n - 2, n, 0))
    chain += "/" + up
    device(chain, up, "0x1000", "0xc030", "0x060400", gen, width, (UPSTREAM, n - 2, n - 1, n, 0))
    chain += "/" + down
    device(chain, down, "0x1000", "0xc030", "0x060400", gen, width,
           (DOWNSTREAM, n - 1, n, n, ACS_REDIRECT if g["index"] in acs_on else 0))
    if g["index"] in missing:
        continue
    d = device(chain + "/" + bus, bus, "0x10de", "0x" + profile["gpu"]["device_id"].lower().removeprefix("0x"),
               "0x030200", gen, 8 if g["index"] in narrow else width, numa=g.get("numa", -1))
    if g["index"] in aer_bad:
        aer_files(d, {"correctable": {"BadTLP": 40}, "nonfatal": {"CmpltTO": 1}})
if profile["nvlink"].get("nvswitch"):
    for i in range(4):
        bus = "0000:%02x:00.0" % (5 + i)
        device("pci0000:%02x/%s" % (5 + i, bus), bus, "0x10de",
               NVSWITCH_IDS.get(profile["gpu"]["architecture"], "0x22a3"), "0x068000", gen, 2)
shutil.rmtree(VIEW, ignore_errors=True)
shutil.rmtree(TREE, ignore_errors=True)
os.rename(tree, TREE)
os.rename(tmp, VIEW)
subprocess.run(["mount", "--bind", VIEW, TARGET], check=True)
# On real hardware udev loads the driver through the GPUs' PCI modalias at boot; these
# emulated devices raise no uevent, so do what udev would do, if a driver is installed.
if os.environ.get("GPUCTL_LAB_LOAD_DRIVER", "1") == "1" and "--no-modprobe" not in sys.argv:
    subprocess.run(["modprobe", "-q", "-a", "nvidia", "nvidia_uvm"], check=False)
'''

UNIT = f"""[Unit]
Description=gpuctl lab: emulated NVIDIA devices in the PCI sysfs view
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 {SCRIPT_PATH}
# like udev's modalias load on real hardware: the driver comes up at boot when installed
Before=nvidia-persistenced.service nvidia-fabricmanager.service nvidia-dcgm.service
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""


def install_unit_script() -> str:
    """Shell (as root on the guest) that installs the script and its unit and runs it."""
    return (
        f"mkdir -p {shlex.quote(SCRIPT_PATH.rsplit('/', 1)[0])}\n"
        f"cat > {SCRIPT_PATH} <<'GPUCTL_PCISIM'\n{GUEST_SCRIPT}\nGPUCTL_PCISIM\n"
        f"cat > /etc/systemd/system/{UNIT_NAME} <<'GPUCTL_UNIT'\n{UNIT}GPUCTL_UNIT\n"
        f"systemctl daemon-reload\nsystemctl enable -q {UNIT_NAME}\n{refresh_command()}\n"
    )


def refresh_command() -> str:
    """Rebuild and remount the view (after a profile push or a fault change); loads no
    driver (faults such as driver_mismatch manage the loaded module themselves)."""
    return f"python3 {SCRIPT_PATH} --no-modprobe"
