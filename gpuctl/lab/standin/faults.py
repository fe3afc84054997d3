"""Hardware faults injected into a lab node (`gpuctl lab fault NODE FAULT [--clear]`).

Every fault is recorded as a line in the node's ``/etc/gpuctl-lab/faults`` (so
`active_faults` can list them and the emulated tools can read them). Some faults exist
only in the emulated tools (a GPU missing, a PCIe link at x8, ECC counters …); the
others change the node for real:

- ``ib_port_down``: ``rdma link delete`` removes the Soft-RoCE device, so the port is gone
  from ``ibstat``/``ibv_devinfo`` (the netdev stays up: VLAN and the other node's traffic
  keep working). Clear: ``rdma link add`` on the same netdev.
- ``ib_rate_200``: the fabric netdev's reported speed is set to 200000 Mb/s
  (virtio-net lets ethtool set the speed it reports). Soft-RoCE on Debian 12's kernel
  caps its IB rate at 100 Gb/s (4X EDR) whatever the speed, so ``ibstat`` cannot show
  200 vs 400: checks must read the netdev speed on a Soft-RoCE fabric (see README).
- ``xid_79``: a real-shaped ``NVRM: Xid …: 79`` line is written to ``/dev/kmsg``.
  Clear: ``dmesg --clear`` (the journal keeps the line until reboot).
- ``fm_down``: the fabric-manager stand-in exits non-zero (unit failed), as the real one
  does when it loses the NVSwitches.
- ``driver_mismatch``: the loaded ``nvidia`` module is replaced (rmmod/insmod) by the real
  stand-in module of *another* matrix driver version, so the kernel reports a version
  the installed user space does not have — nvidia-smi then fails like the real one.
  Clear: reload the installed module (a reboot clears it too, as on real nodes).
- ``slow_link``: the node's RDMA netdev shaped with tc (egress token bucket, ingress
  police) to ``SLOW_LINK_RATE`` each way: a real slow link that the fault finding of
  `gpuctl bench` must name (node and interface). Clear: both qdiscs deleted.
- ``raid_degraded``: a RAID member is really removed: ``mdadm --fail/--remove`` on a
  redundant level; on RAID0 (no redundancy; md refuses --fail) the member's NVMe
  controller is removed from the PCI bus, which breaks the array. Clear: PCI rescan and
  re-assemble (RAID0) or ``mdadm --add`` (redundant).
"""

from __future__ import annotations

import base64
import logging
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuctl.errors import ExecutionError, InputError
from gpuctl.lab.pcisim import SCRIPT_PATH, refresh_command
from gpuctl.lab.ssh import ssh_run
from gpuctl.lab.standin import kmod
from gpuctl.lab.standin.profile import FAULTS_PATH, HGX_BUSES
from gpuctl.matrix import load_matrix, matrix_names

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    takes_gpu: bool = False
    default_gpu: int = 0


#: the rate `slow_link` shapes a node's fabric interface to: well under what the emulated fabric
#: moves (Soft-RoCE between TCG guests ~33 MB/s, reference/lab-notes.md), above nothing
SLOW_LINK_RATE = "4mbit"

FAULTS: dict[str, Fault] = {f.name: f for f in (
    Fault("gpu_missing", "one GPU gone from every tool (nvidia-smi, dcgmi, topo)", True, -1),
    Fault("pcie_x8", "one GPU's PCIe link trained at x8 instead of x16", True, 3),
    Fault("nvlink_pairs", "4x2 'fake NVLink': only GPU pairs (0,1),(2,3),(4,5),(6,7) joined by NVLink"),
    Fault("ib_port_down", "the Soft-RoCE device's port removed (rdma link delete)"),
    Fault("ib_rate_200", "the fabric netdev reports 200 Gb/s instead of the SKU's rate"),
    Fault("ecc_uncorrectable", "uncorrectable (DBE) ECC errors on one GPU", True, 2),
    Fault("row_remap_pending", "a row remap pending on one GPU (reset needed)", True, 1),
    Fault("xid_79", "kernel log: Xid 79, GPU has fallen off the bus", True, 5),
    Fault("fm_down", "the fabric manager service failed"),
    Fault("driver_mismatch", "loaded kernel module version differs from the installed user space"),
    Fault("slow_nccl", "NCCL bus bandwidth at 60 % of the SKU's"),
    Fault("raid_degraded", "one member removed from the md array"),
    # passive health checks (gpuctl health, issue 19): emulated-tool faults
    Fault("throttle", "HW slowdown clock-event reason active on one idle GPU", True, 3),
    Fault("gpu_busy", "one GPU at 97 % utilization (its clock events are not judged)", True, 4),
    Fault("fabric_not_ready", "NVSwitch fabric State 'In Progress' on every GPU although the fabric manager runs"),
    Fault("vbios_differs", "this node's GPUs report another VBIOS version than their peers"),
    Fault("nvlink_errors", "NVLink replay and CRC errors rising on link 0 of one GPU (nvidia-smi nvlink -e)", True, 1),
    # fault finding (gpuctl bench, issue 19): a real slow link
    Fault("slow_link", f"traffic on the RDMA netdev shaped to {SLOW_LINK_RATE} each way (tc), as a bad cable"),
    Fault("acs_redirect", "ACS request/completion redirect on at the PCIe switch port above one GPU (lspci -vvv)",
          True, 2),
    Fault("pcie_aer", "one GPU's PCIe AER counters: 1 non-fatal, 40 correctable errors (sysfs aer_dev_*)", True, 4),
)}
#: faults seen on the PCI bus (the sysfs view of `gpuctl.lab.pcisim`, rebuilt when they change)
PCI_VIEW_FAULTS: tuple[str, ...] = ("gpu_missing", "pcie_x8", "acs_redirect", "pcie_aer")

Runner = Callable[[str], str]


def slow_link_script(clear: bool) -> str:
    """`slow_link`: shape the node's RDMA netdev (Soft-RoCE's, else eth1) both ways, as a bad
    cable or switch port does: egress through a token bucket (tc-tbf(8)), ingress policed to
    the same rate (tc-police(8)); Soft-RoCE, TCP and everything else on that interface slows.
    Clear: both qdiscs deleted (the netdev back to its default qdisc)."""
    if clear:
        return ("line=$(grep '^slow_link ' " + FAULTS_PATH + " || true)\n"
                "nd=$(echo \"$line\" | sed -n 's/.* netdev=\\([^ ]*\\).*/\\1/p'); [ -n \"$nd\" ] || nd=eth1\n"
                "tc qdisc del dev \"$nd\" root 2>/dev/null || true\n"
                "tc qdisc del dev \"$nd\" ingress 2>/dev/null || true\n"
                + _record("", "slow_link") + "tc qdisc show dev \"$nd\"\n")
    rate = shlex.quote(SLOW_LINK_RATE)
    return (_rxe_netdev_sh() + "[ -n \"$nd\" ] || nd=eth1\n"
            f"tc qdisc replace dev \"$nd\" root tbf rate {rate} burst 32kbit latency 400ms\n"
            "tc qdisc del dev \"$nd\" ingress 2>/dev/null || true\n"
            "tc qdisc add dev \"$nd\" handle ffff: ingress\n"
            f"tc filter add dev \"$nd\" parent ffff: protocol all u32 match u32 0 0 police rate {rate} "
            "burst 32k drop flowid :1\n"
            + _record("", "slow_link") + f"echo \"slow_link netdev=$nd rate={SLOW_LINK_RATE}\" >> {FAULTS_PATH}\n"
            "tc qdisc show dev \"$nd\"\n")


def _check(fault: str) -> Fault:
    if fault not in FAULTS:
        raise InputError(f"unknown fault '{fault}'", [f"known faults: {', '.join(FAULTS)}"])
    return FAULTS[fault]


def _record(line: str, name: str) -> str:
    """Shell: replace the fault file's line(s) for `name` by `line` (or remove if empty)."""
    add = f"echo {shlex.quote(line)} >> {FAULTS_PATH}\n" if line else ""
    return (f"mkdir -p /etc/gpuctl-lab; touch {FAULTS_PATH}\n"
            f"sed -i '/^{name}\\( \\|$\\)/d' {FAULTS_PATH}\n{add}")


SETSPEED = r"""
import ctypes, fcntl, socket, struct, sys
ifname, speed = sys.argv[1], int(sys.argv[2])
buf = ctypes.create_string_buffer(44)
def call(cmd):
    struct.pack_into("I", buf, 0, cmd)
    ifr = struct.pack("16sQ", ifname.encode(), ctypes.addressof(buf)) + b"\0" * 16
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, 0x8946, ifr)
call(1)  # ETHTOOL_GSET
struct.pack_into("H", buf, 12, speed & 0xFFFF)
struct.pack_into("B", buf, 14, 1)   # full duplex
struct.pack_into("B", buf, 18, 0)   # autoneg off (virtio-net only accepts a fixed setting)
struct.pack_into("H", buf, 28, speed >> 16)
call(2)  # ETHTOOL_SSET
"""


def _rxe_netdev_sh() -> str:
    return ("dev=$(rdma link show | awk '/ netdev /{split($2,a,\"/\"); print a[1]; exit}'); "
            "nd=$(rdma link show | awk '/ netdev /{for(i=1;i<=NF;i++) if($i==\"netdev\") print $(i+1); exit}')\n")


def _script(fault: Fault, gpu: int | None, clear: bool, profile_rate_gbps: float | None) -> str:
    name = fault.name
    gpu_word = f" gpu={gpu}" if gpu is not None else ""
    if name in PCI_VIEW_FAULTS:  # seen on the PCI bus (sysfs, lspci), see gpuctl.lab.pcisim
        return (_record("" if clear else f"{name}{gpu_word}", name)
                + f"if [ -f {SCRIPT_PATH} ]; then {refresh_command()}; fi\n")
    if name in ("nvlink_pairs", "ecc_uncorrectable", "row_remap_pending", "slow_nccl", "throttle", "gpu_busy",
                "fabric_not_ready", "vbios_differs", "nvlink_errors"):
        return _record("" if clear else f"{name}{gpu_word}", name)
    if name == "fm_down":
        if clear:
            return (_record("", name) + "systemctl reset-failed nvidia-fabricmanager 2>/dev/null || true\n"
                    "if systemctl is-enabled -q nvidia-fabricmanager 2>/dev/null; then "
                    "systemctl start nvidia-fabricmanager; fi\n")
        return (_record(name, name) + "if systemctl is-active -q nvidia-fabricmanager; then sleep 5; fi\n"
                "systemctl is-active nvidia-fabricmanager || true\n")
    if name == "xid_79":
        if clear:
            return _record("", name) + "dmesg --clear\n"
        bus = f"0000:{HGX_BUSES[(gpu or 0) % len(HGX_BUSES)]}:00"
        return (_record(f"{name}{gpu_word}", name)
                + f"printf '<3>NVRM: Xid (PCI:{bus}): 79, pid=%s, name=%s, GPU has fallen off the bus.\\n' "
                  "\"'<unknown>'\" '<unknown>' > /dev/kmsg\n"
                + f"printf '<3>NVRM: GPU {bus}.0: GPU has fallen off the bus.\\n' > /dev/kmsg\n"
                + "dmesg | tail -n 2\n")
    if name == "ib_port_down":
        if clear:
            return ("line=$(grep '^ib_port_down ' " + FAULTS_PATH + " || true)\n"
                    "[ -n \"$line\" ] || { echo 'ib_port_down is not active'; exit 0; }\n"
                    "dev=$(echo \"$line\" | sed -n 's/.* dev=\\([^ ]*\\).*/\\1/p'); "
                    "nd=$(echo \"$line\" | sed -n 's/.* netdev=\\([^ ]*\\).*/\\1/p')\n"
                    "rdma link add \"$dev\" type rxe netdev \"$nd\"\n" + _record("", name)
                    + "rdma link show\n")
        return (_rxe_netdev_sh()
                + "[ -n \"$dev\" ] || { echo 'no RDMA link with a netdev on this node'; exit 3; }\n"
                + "rdma link delete \"$dev\"\n"
                + _record("", name) + f"echo \"ib_port_down dev=$dev netdev=$nd\" >> {FAULTS_PATH}\n"
                + "echo \"removed $dev (netdev $nd)\"\n")
    if name == "ib_rate_200":
        speed = 200000 if not clear else int((profile_rate_gbps or 400) * 1000)
        return (_rxe_netdev_sh() + "[ -n \"$nd\" ] || nd=eth1\n"
                + f"python3 -c {shlex.quote(SETSPEED)} \"$nd\" {speed}\n"
                + _record("" if clear else f"{name} speed={speed}", name)
                + "echo \"$nd: $(cat /sys/class/net/$nd/speed) Mb/s\"\n")
    if name == "raid_degraded":
        return _raid_script(clear)
    if name == "slow_link":
        return slow_link_script(clear)
    raise InputError(f"fault '{name}' has no script")  # driver_mismatch is handled separately


def _raid_script(clear: bool) -> str:
    if clear:
        return ("line=$(grep '^raid_degraded ' " + FAULTS_PATH + " || true)\n"
                "[ -n \"$line\" ] || { echo 'raid_degraded is not active'; exit 0; }\n"
                "get() { echo \"$line\" | sed -n \"s/.* $1=\\([^ ]*\\).*/\\1/p\"; }\n"
                "md=$(get md); dev=$(get dev); how=$(get how); mnt=$(get mnt)\n"
                "if [ \"$how\" = mdadm ]; then mdadm /dev/$md --add /dev/$dev\n"
                "else echo 1 > /sys/bus/pci/rescan; sleep 2; udevadm settle || true\n"
                "  [ -n \"$mnt\" ] && umount \"$mnt\"\n"
                "  mdadm --stop /dev/$md; mdadm --assemble --scan || mdadm --assemble /dev/$md\n"
                "  [ -n \"$mnt\" ] && mount \"$mnt\"\nfi\n" + _record("", "raid_degraded") + "cat /proc/mdstat\n")
    return ("md=$(awk '/^md[0-9]+ : active/{print $1; exit}' /proc/mdstat)\n"
            "[ -n \"$md\" ] || { echo 'no active md array on this node'; exit 3; }\n"
            "level=$(cat /sys/block/$md/md/level)\n"
            "dev=$(ls /sys/block/$md/slaves | sort | tail -n 1)\n"
            "mnt=$(findmnt -n -o TARGET /dev/$md || true)\n"
            "case \"$level\" in\n"
            "  raid0|linear)\n"
            "    ctrl=$(readlink -f /sys/block/$dev/device/device 2>/dev/null || readlink -f /sys/block/$dev/device)\n"
            "    pci=$(basename \"$ctrl\")\n"
            "    echo 1 > \"$ctrl/remove\"; sleep 1\n"
            "    dd if=/dev/$md of=/dev/null bs=1M count=16 iflag=direct 2>/dev/null || true\n"
            "    how=pci ;;\n"
            "  *) mdadm /dev/$md --fail /dev/$dev --remove /dev/$dev; how=mdadm ;;\n"
            "esac\n" + _record("", "raid_degraded")
            + f"echo \"raid_degraded md=$md dev=$dev how=$how mnt=$mnt\" >> {FAULTS_PATH}\n"
            "cat /sys/block/$md/md/array_state; cat /proc/mdstat\n")


def _other_driver_version(current: str) -> str:
    versions = sorted({load_matrix(n).matrix.driver.version for n in matrix_names()} - {current},
                      key=lambda v: [int(x) for x in v.split(".")])
    if not versions:
        raise ExecutionError("driver_mismatch needs a second driver version in the matrices")
    older = [v for v in versions if [int(x) for x in v.split(".")] < [int(x) for x in current.split(".")]]
    return older[-1] if older else versions[0]


def _driver_mismatch(run: Runner, clear: bool) -> str:
    if clear:
        # reload the installed module and every dependent the injection unloaded (recorded as mods=)
        return run("line=$(grep '^driver_mismatch ' " + FAULTS_PATH + " 2>/dev/null || true)\n"
                   "was=$(echo \"$line\" | sed -n 's/.*mods=\\([^ ]*\\).*/\\1/p' | tr ',' ' ')\n"
                   "now=$(lsmod | awk '$1 ~ /^nvidia_(uvm|modeset|peermem)$/{print $1}')\n"
                   "rmmod $now nvidia 2>/dev/null || true\nmodprobe nvidia\n"
                   "for m in $was $now; do modprobe $m; done\n"
                   # services that stopped on the mismatched module come back with the right one
                   "for svc in nvidia-fabricmanager nvidia-persistenced; do\n"
                   "  if systemctl is-enabled -q $svc 2>/dev/null; then systemctl reset-failed $svc 2>/dev/null;"
                   " systemctl restart $svc || true; fi\ndone\n" + _record("", "driver_mismatch")
                   + "cat /sys/module/nvidia/version\n")
    current = run("cat /sys/module/nvidia/version 2>/dev/null || true").strip()
    if not current:
        raise ExecutionError("driver_mismatch: the nvidia module is not loaded on this node (provision the "
                             "driver first)")
    other = _other_driver_version(current)
    ko = kmod.build_modules("nvidia", other)["nvidia"]
    blob = base64.b64encode(ko.read_bytes()).decode()
    path = f"/run/gpuctl-lab/nvidia-{other}.ko"
    run(f"mkdir -p /run/gpuctl-lab && base64 -d > {path}", input=blob)
    return run("set -e\nmods=$(lsmod | awk '$1 ~ /^nvidia_(uvm|modeset|peermem)$/{print $1}')\n"
               f"rmmod $mods nvidia\ninsmod {path}\n"
               + _record("", "driver_mismatch")
               + f"echo \"driver_mismatch loaded={other} installed={current} mods=$(echo $mods | tr ' ' ',')\" >> "
                 f"{FAULTS_PATH}\n"
               + "echo \"loaded $(cat /sys/module/nvidia/version), installed "
               "$(modinfo -F version nvidia)\"\n")


def apply_fault(
    node: str,
    fault: str,
    *,
    clear: bool = False,
    gpu: int | None = None,
    state: Any = None,
    runner: Callable[..., str] | None = None,
) -> str:
    """Inject (or with `clear`, remove) `fault` on lab node `node` over SSH; returns the
    node's output. `gpu` picks the GPU for per-GPU faults (default: the fault's own).
    `runner(script, input=None) -> stdout` replaces SSH in tests."""
    f = _check(fault)
    if gpu is not None and not f.takes_gpu:
        raise InputError(f"fault '{fault}' does not take a GPU index")
    if f.takes_gpu and gpu is None and not clear and f.default_gpu >= 0:
        gpu = f.default_gpu
    run = runner or _ssh_runner(node, state)
    if fault == "driver_mismatch":
        out = _driver_mismatch(run, clear)
    else:
        rate = None
        if fault == "ib_rate_200":
            rate = _profile_rate(run)
        out = run(_script(f, gpu, clear, rate))
    log.info("%s: fault %s %s", node, fault, "cleared" if clear else "injected")
    return out


def inject_fault(node: str, fault: str, *, gpu: int | None = None, state: Any = None) -> str:
    return apply_fault(node, fault, gpu=gpu, state=state)


def clear_fault(node: str, fault: str, *, state: Any = None) -> str:
    return apply_fault(node, fault, clear=True, state=state)


def active_faults(node: str, *, state: Any = None, runner: Callable[..., str] | None = None) -> list[str]:
    """The lines of the node's fault file."""
    run = runner or _ssh_runner(node, state)
    return [ln for ln in run(f"cat {FAULTS_PATH} 2>/dev/null || true").splitlines() if ln.strip()]


def _profile_rate(run: Runner) -> float | None:
    out = run("python3 -c 'import json; print(json.load(open(\"/etc/gpuctl-lab/profile.json\"))"
              "[\"fabric\"][\"rate_gbps\"] or \"\")' 2>/dev/null || true").strip()
    try:
        return float(out) if out else None
    except ValueError:
        return None


def _ssh_runner(node: str, state: Any) -> Callable[..., str]:
    def run(script: str, input: str | None = None) -> str:
        proc = ssh_run(node, ["sh", "-c", script], state=state, input=input, timeout=120)
        if proc.returncode != 0:
            raise ExecutionError(f"{node}: fault script failed (exit {proc.returncode}):\n"
                                 f"{(proc.stdout + proc.stderr).strip()[-2000:]}")
        return proc.stdout

    return run
