"""Lab only: emulated NVIDIA devices in a lab node's sysfs PCI view.

Preflight reads GPUs, NVSwitches and their PCIe links from `/sys/bus/pci/devices` —
which works on real hardware before any driver is installed. A QEMU guest has no NVIDIA
devices, so the lab gives each node a PCI view that holds its real devices (symlinks to
their real sysfs directories) plus emulated GPU and NVSwitch entries from the node's
hardware profile (`/etc/gpuctl-lab/profile.json`), with the `gpu_missing` and `pcie_x8`
faults applied, and bind-mounts it over `/sys/bus/pci/devices`. gpuctl's preflight reads
the same files on a lab node as on a real one; nothing in the product knows about this.

`GUEST_SCRIPT` runs inside the guest (python3, as root); `refresh_command()` is the shell
line that (re)builds and mounts the view — run after the profile is pushed and after every
fault change. `install_unit_script()` installs a oneshot unit so the view survives reboots;
at boot it also loads the driver modules when installed, as udev's PCI modalias match
does for real GPUs (the emulated devices raise no uevent).
"""

from __future__ import annotations

import shlex

VIEW_DIR = "/run/gpuctl-lab/pci"
SCRIPT_PATH = "/usr/local/lib/gpuctl-lab/pcisim.py"
UNIT_NAME = "gpuctl-lab-pcisim.service"

GUEST_SCRIPT = r'''
import json, os, shutil, subprocess, sys
LAB = os.environ.get("GPUCTL_LAB_ETC", "/etc/gpuctl-lab")
PROFILE, FAULTS = LAB + "/profile.json", LAB + "/faults"
VIEW = os.environ.get("GPUCTL_LAB_PCI_VIEW", "/run/gpuctl-lab/pci")
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
tmp = VIEW + ".new"
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)
for name in os.listdir(TARGET):
    os.symlink(os.path.realpath(os.path.join(TARGET, name)), os.path.join(tmp, name))

def device(bus, dev, cls, gen, width):
    d = os.path.join(tmp, bus)
    os.makedirs(d)
    for key, value in (("vendor", "0x10de"), ("device", dev), ("class", cls),
                       ("current_link_speed", GTS[gen]), ("current_link_width", str(width)),
                       ("max_link_speed", GTS[gen]), ("max_link_width", str(profile["pcie"]["width"])),
                       ("irq", "0"), ("resource", "\n".join(["0x0000000000000000 " * 2 + "0x0000000000000000"] * 13))):
        with open(os.path.join(d, key), "w") as out:
            out.write(value + "\n")
    # libpci (lspci, perftest) reads the config space: a 256-byte header with the same ids
    config = bytearray(256)
    config[0:2] = (0x10de).to_bytes(2, "little")
    config[2:4] = int(dev, 16).to_bytes(2, "little")
    config[9:12] = int(cls, 16).to_bytes(3, "little")
    with open(os.path.join(d, "config"), "wb") as out:
        out.write(bytes(config))

gen = profile["pcie"]["generation"]
for g in profile["gpus"]:
    if g["index"] in missing:
        continue
    bus = g["bus_id"].lower()[-12:]  # 00000000:18:00.0 -> 0000:18:00.0
    device(bus, "0x" + profile["gpu"]["device_id"].lower().removeprefix("0x"), "0x030200", gen,
           8 if g["index"] in narrow else profile["pcie"]["width"])
if profile["nvlink"].get("nvswitch"):
    for i in range(4):
        device("0000:%02x:00.0" % (5 + i), NVSWITCH_IDS.get(profile["gpu"]["architecture"], "0x22a3"),
               "0x068000", gen, 2)
shutil.rmtree(VIEW, ignore_errors=True)
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
