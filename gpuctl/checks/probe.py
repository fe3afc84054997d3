"""Remote outputs for the checks: each command runs once per host per verify run.

A `Probe` wraps one testinfra host and the host's NodeSpec. Every accessor runs its
command on first use, keeps the output for every later check (one `nvidia-smi -q -x`
per host, read by all GPU checks), writes the raw text under the raw directory for the
run record, and parses it with `gpuctl.parsers` (the parsers provisioning and the lock use too).

A command that cannot be run (SSH failure, command missing, timeout, unreadable
output) raises `CouldNotRun`; once SSH has failed for a host, every later command on it
fails at once with the same reason instead of waiting for another timeout.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuctl.catalog import load_health
from gpuctl.components import knob_value, provisioned
from gpuctl.errors import ParseError
from gpuctl.parsers.boot import BOOT_SCRIPT, BootState, parse_boot
from gpuctl.parsers.files import parse_tail_bundle
from gpuctl.parsers.health import AER_KINDS, BOOT_ID_PATH, PciSysfs, parse_pci_sysfs
from gpuctl.parsers.ib_counters import NAMES as IB_COUNTER_NAMES
from gpuctl.parsers.ibstat import IbstatResult, parse_ibstat
from gpuctl.parsers.ibv_devinfo import parse_ibv_devinfo
from gpuctl.parsers.kernel import (
    NVIDIA_DRIVER_VERSION_FILE,
    NVIDIA_MODULE_VERSION_FILE,
    LoadedModule,
    loaded_nvidia_version,
    parse_meminfo_kib,
    parse_proc_modules,
    sysctl_path,
)
from gpuctl.parsers.lspci import LspciResult, parse_lspci
from gpuctl.parsers.net import Interface, parse_ip_addr
from gpuctl.parsers.nvidia_smi import q_text, q_xml
from gpuctl.parsers.nvidia_smi.model import (
    DriverLibraryMismatch,
    DriverNotLoaded,
    GpuLost,
    NoDevicesFound,
    NvidiaSmiFailure,
    NvidiaSmiResult,
    check_failure,
)
from gpuctl.parsers.nvidia_smi.q_text import parse_nvidia_smi_q
from gpuctl.parsers.nvidia_smi.q_xml import parse_nvidia_smi_xml
from gpuctl.parsers.nvlink_errors import NvlinkErrorsResult, parse_nvlink_errors
from gpuctl.parsers.packages import DPKG_QUERY, RPM_QUERY, PackageSnapshot, parse_dpkg, parse_rpm
from gpuctl.parsers.rdma import (
    RdmaLink,
    RdmaState,
    parse_rdma,
    parse_rdma_link_json,
    rdma_command,
)
from gpuctl.parsers.storage import MdDetail, Mount, parse_mdadm_detail, parse_proc_mounts
from gpuctl.parsers.systemd import UnitState, parse_systemctl_show, unit_show_command
from gpuctl.parsers.topo import TopoResult, parse_topo_matrix
from gpuctl.parsers.xid import XidResult, parse_xid_log
from gpuctl.runrecord import private_dir, redact, safe_name, write_private
from gpuctl.spec import NodeSpec

from .model import CouldNotRun, Remediation

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 120
# Files read in one `tail -n +1` bundle (plus per-spec ones: sysctl, keyring, nccl.conf, …).
STATIC_FILES: tuple[str, ...] = (
    "/proc/modules", "/proc/meminfo", "/proc/cmdline", "/proc/mounts", "/proc/mdstat",
    NVIDIA_MODULE_VERSION_FILE, NVIDIA_DRIVER_VERSION_FILE,
)


def nccl_conf_path(spec: NodeSpec) -> str:
    """Where the network role writes nccl.conf on this node (its knob `network_nccl_conf`, as the
    inventory sets it, else its default): the file the nccl checks read."""
    return str(knob_value("network_nccl_conf", spec.role_vars))


# Shell globs expanded on the host, read in the same bundle.
STATIC_GLOBS: tuple[str, ...] = ("/etc/modprobe.d/*.conf", "/etc/apt/sources.list.d/*")


# The passive health checks' sysfs reads (gpuctl.parsers.health.parse_pci_sysfs): the GPUs' and
# NICs' PCI functions only (class 0x0300/0x0302/0x0200/0x0207; `read` is a shell builtin, so a
# box with hundreds of PCI functions costs no fork per function), each RDMA device's PCI function
# as a `device-link` entry, and the RDMA devices' firmware and port error counters.
def ib_counter_files() -> tuple[str, ...]:
    """The sysfs port counter files of the counters judged by health.yaml counter_rises.infiniband
    (perfquery names mapped back to the kernel's: SymbolErrorCounter → symbol_error)."""

    rules = (load_health().counter_rises or {}).get("infiniband")
    judged = set(rules.counters) if rules else set()
    return tuple(sorted(sysfs for sysfs, name in IB_COUNTER_NAMES.items() if "_" in sysfs and name in judged))


def health_sysfs_script() -> str:
    """One shell command reading every sysfs file of the passive health checks."""
    return (
        "for d in /sys/bus/pci/devices/*; do { read -r c < \"$d/class\"; } 2>/dev/null || continue; "
        "case \"$c\" in 0x0300*|0x0302*|0x0200*|0x0207*) tail -v -n +1 -- \"$d/class\" \"$d/vendor\" "
        "\"$d/numa_node\" " + " ".join(f'\"$d/aer_dev_{k}\"' for k in AER_KINDS) + " 2>/dev/null; "
        "printf '\\n==> %s <==\\n' \"$d/device-path\"; readlink -f \"$d\";; esac; done; "
        "for i in /sys/class/infiniband/*; do [ -e \"$i\" ] || continue; printf '==> %s <==\\n' \"$i/device-link\"; "
        "readlink -f \"$i/device\" 2>/dev/null || echo; done; "
        f"tail -v -n +1 -- {BOOT_ID_PATH} /sys/class/infiniband/*/fw_ver "
        + " ".join(f"/sys/class/infiniband/*/ports/*/counters/{c}" for c in ib_counter_files()) + " 2>/dev/null; exit 0"
    )

# nvidia-smi's two full reports; both parse to the same NvidiaSmiResult. Verify reads the
# XML (machine-readable); the text form serves outputs recorded as `nvidia-smi -q`.
NVIDIA_SMI_FORMS: dict[str, tuple[str, Any]] = {
    "xml": (q_xml.COMMAND, parse_nvidia_smi_xml),
    "q": (q_text.COMMAND, parse_nvidia_smi_q),
}


class RunsCommands(Protocol):
    """What a Probe needs of a host: testinfra's `Host.run` (or a fake with the same shape)."""

    def run(self, command: str, *args: str, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class Output:
    command: str
    rc: int
    stdout: str
    stderr: str
    seconds: float


# Exit status the wrapper gives a remote command that itself exited 255, so that 255
# means only "ssh failed" (ibv_devinfo exits 255 when there is no RDMA device).
REMOTE_255 = 254


def _timeout(cmd: str, seconds: int) -> str:
    """`cmd` under a remote time limit (exit 124 when it runs out); 255 remapped to 254."""
    return f"timeout {seconds} sh -c {shlex.quote(cmd)}; r=$?; [ $r -eq 255 ] && r={REMOTE_255}; exit $r"


#: What a component may list in `Component.probes` (roles/<component>/__init__.py): Probe
#: methods its checks read, in fetch order; "fabric" stands for the RDMA reads this node's
#: fabric has (rdma_links, verbs_ports, ibstat unless Soft-RoCE, gids on RoCE).
PREFETCHABLE: tuple[str, ...] = ("nvidia_smi", "topo", "kernel_log", "nvlink_errors", "pci_sysfs", "interfaces",
                                 "fabric", "md_detail")

#: Commands of one host fetched at once during prefetch (channels on its one connection).
PREFETCH_CHANNELS = 4


class Probe:
    """Cached command outputs of one host (thread-safe: prefetch runs in threads)."""

    def __init__(self, host: RunsCommands, spec: NodeSpec, raw_dir: Path | None = None,
                 timeout_s: int = COMMAND_TIMEOUT_S, nvidia_smi_form: str = "xml", raw_prefix: str = "") -> None:
        self.host = host
        self.nvidia_smi_form = nvidia_smi_form
        self.spec = spec
        self.raw_dir = raw_dir
        self.raw_prefix = raw_prefix  # verify writes raw/<host>/verify-<key>.txt straight into its run record
        self.timeout_s = timeout_s
        self.unreachable: str | None = None
        self._cache: dict[str, Output | CouldNotRun] = {}
        self._parsed: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._key_locks: dict[str, threading.Lock] = {}
        self.commands_run = 0

    # ------------------------------------------------------------ running

    def output(self, key: str, command: str, *, tool: str | None = None, ok_rc: Iterable[int] = (0,)) -> Output:
        """Run `command` once per host (cached under `key`); CouldNotRun when it cannot."""
        with self._lock:
            klock = self._key_locks.setdefault(key, threading.Lock())
        with klock:
            cached = self._cache.get(key)
            if cached is None:
                cached = self._execute(key, command, tool)
                self._cache[key] = cached
        if isinstance(cached, CouldNotRun):
            raise cached
        if cached.rc not in tuple(ok_rc):
            text = (cached.stderr.strip() or cached.stdout.strip()).splitlines()
            raise CouldNotRun(f"`{command}` exited {cached.rc}: {text[-1] if text else 'no output'}")
        return cached

    def _execute(self, key: str, command: str, tool: str | None) -> Output | CouldNotRun:
        if self.unreachable:
            return CouldNotRun(self.unreachable)
        start = time.monotonic()
        try:
            res = self.host.run(_timeout(command, self.timeout_s))
        except RuntimeError as exc:  # testinfra's ssh backend: ssh exited 255
            err = getattr(exc.args[0], "stderr", "") if exc.args else ""
            reason = (err or str(exc)).strip().splitlines()
            self.unreachable = f"ssh to {self.spec.node} failed: {reason[-1] if reason else 'exit 255'}"
            log.warning("%s", self.unreachable)
            return CouldNotRun(self.unreachable)
        self.commands_run += 1
        # testinfra's .stdout decodes strictly (a binary keyring among the files crashed every
        # check reading them): decode the bytes ourselves, with replacement.
        out = Output(command, int(res.rc), _text(_raw_bytes(res, "stdout")), _text(_raw_bytes(res, "stderr")),
                     time.monotonic() - start)
        self._keep_raw(key, out)
        self._log_command(key, _timeout(command, self.timeout_s), out)
        if out.rc == 124:
            return CouldNotRun(f"`{command}` timed out after {self.timeout_s} s")
        if out.rc == 127 or (tool and re.search(rf"{re.escape(tool)}: (command )?not found", out.stderr)):
            return CouldNotRun(f"`{tool or command.split()[0]}` is not installed on {self.spec.node}")
        return out

    def _keep_raw(self, key: str, out: Output) -> None:
        if self.raw_dir is None:
            return

        d = self.raw_dir / safe_name(self.spec.node)
        private_dir(d)  # a run record: 0700 folders, 0600 files, secrets redacted
        write_private(d / f"{self.raw_prefix}{key}.txt", redact(out.stdout))
        if out.stderr.strip() or out.rc:
            write_private(d / f"{self.raw_prefix}{key}.stderr.txt",
                          redact(f"$ {out.command}\n# exit {out.rc}\n{out.stderr}"))

    def _log_command(self, key: str, remote: str, out: Output) -> None:
        """One JSON line per remote command (as sent, with its time limit) in
        raw/<host>/verify-commands.jsonl (verify's prefix): what ran, for audits and the scale baseline."""
        if self.raw_dir is None:
            return

        d = self.raw_dir / safe_name(self.spec.node)
        private_dir(d)
        line = json.dumps({"key": key, "command": redact(remote), "rc": out.rc, "seconds": round(out.seconds, 3)})
        with self._lock:
            write_private(d / f"{self.raw_prefix}commands.jsonl", line + "\n", append=True)

    def parsed(self, key: str, build: Any) -> Any:
        """Parse once per host; a ParseError becomes CouldNotRun (and is remembered)."""
        with self._lock:
            if key not in self._parsed:
                try:
                    self._parsed[key] = build()
                except ParseError as exc:
                    self._parsed[key] = CouldNotRun(f"unreadable output: {exc}")
                except CouldNotRun as exc:
                    self._parsed[key] = exc
            value = self._parsed[key]
        if isinstance(value, CouldNotRun):
            raise value
        return value

    # ------------------------------------------------------------ files

    def file_paths(self) -> list[str]:
        s = self.spec
        paths = list(STATIC_FILES) + [nccl_conf_path(s)] + [sysctl_path(k) for k in s.sysctl] + [s.repo.keyring_path]
        paths += [f"/sys/class/net/{p.interface}/speed" for p in s.fabric.ports]
        return list(dict.fromkeys(paths))

    def files(self) -> tuple[dict[str, str], dict[str, str]]:
        """Every file of interest in one command: ({path: text}, {path: error})."""
        def build() -> tuple[dict[str, str], dict[str, str]]:
            cmd = "tail -n +1 -- " + " ".join(shlex.quote(p) for p in self.file_paths()) + " " + \
                  " ".join(STATIC_GLOBS)
            out = self.output("files", cmd, ok_rc=(0, 1))
            return parse_tail_bundle(out.stdout, out.stderr)
        return self.parsed("files", build)

    def file(self, path: str) -> str | None:
        """The file's text, or None if it does not exist on the host."""
        files, _errors = self.files()
        return files.get(path)

    def files_under(self, prefix: str) -> dict[str, str]:
        files, _ = self.files()
        return {p: t for p, t in files.items() if p.startswith(prefix)}

    def require_file(self, path: str) -> str:
        text = self.file(path)
        if text is None:
            _files, errors = self.files()
            raise CouldNotRun(f"cannot read {path}: {errors.get(path, 'not in the output')}")
        return text

    # ------------------------------------------------------------ packages, services, modules

    def packages(self) -> PackageSnapshot:
        """Installed packages with their holds: the provisioning fact's own listing and parser
        (`gpuctl.parsers.packages`), so verify and install read one snapshot the same way."""
        def build() -> PackageSnapshot:
            if self.spec.package_manager == "apt":
                return parse_dpkg(self.output("packages", DPKG_QUERY, tool="dpkg-query").stdout.splitlines())
            return parse_rpm(self.output("packages", RPM_QUERY, tool="rpm").stdout.splitlines())
        return self.parsed("packages", build)

    def holds(self) -> set[str]:
        """Names held against upgrades: apt-mark hold (dpkg's 'hold' selection), dnf versionlock."""
        snap = self.packages()
        if snap.manager == "dnf":
            return snap.locked_names()
        return {name for name, p in snap.packages.items() if p.held}

    def units(self) -> dict[str, UnitState]:
        def build() -> dict[str, UnitState]:
            out = self.output("services", unit_show_command(s.name for s in self.spec.services), tool="systemctl")
            return parse_systemctl_show(out.stdout)
        return self.parsed("units", build)

    def modules(self) -> dict[str, LoadedModule]:
        return self.parsed("modules", lambda: parse_proc_modules(self.require_file("/proc/modules")))

    def kernel_module_version(self) -> tuple[str | None, str]:
        """The loaded nvidia kernel module's version and where it was read."""
        return loaded_nvidia_version(self.file(NVIDIA_MODULE_VERSION_FILE), self.file(NVIDIA_DRIVER_VERSION_FILE))

    # ------------------------------------------------------------ GPUs

    def nvidia_smi(self) -> NvidiaSmiResult:
        """`nvidia-smi -q -x` parsed. NVML failures raise NvidiaSmiFailure (for the node-level
        check to judge); other problems CouldNotRun."""
        def build() -> NvidiaSmiResult | NvidiaSmiFailure:
            command, parse = NVIDIA_SMI_FORMS[self.nvidia_smi_form]
            out = self.output("nvidia-smi-q" + ("-x" if self.nvidia_smi_form == "xml" else ""), command,
                              tool="nvidia-smi", ok_rc=range(0, 256))
            try:
                result = parse(out.stdout + ("\n" + out.stderr if out.rc else ""))
            except NvidiaSmiFailure as exc:
                return exc
            if result.partial:
                # a paste may be partial (judged for what it shows); the node's own output may not
                raise CouldNotRun(f"`{command}` printed a cut report: {result.partial}")
            return result
        value = self.parsed("nvidia_smi", build)
        if isinstance(value, NvidiaSmiFailure):
            raise value
        return value

    def gpus(self) -> NvidiaSmiResult:
        """Like `nvidia_smi()`, for per-GPU checks: an NVML failure is 'could not run' here
        (the node-level check `nvml_readable` fails with the remediation)."""
        try:
            return self.nvidia_smi()
        except NvidiaSmiFailure as exc:
            raise CouldNotRun(f"nvidia-smi cannot read the GPUs ({exc.kind}); see nvidia_driver.nvml_readable",
                              nvml_remediation(exc)) from None

    def topo(self) -> TopoResult:
        def build() -> TopoResult:
            out = self.output("nvidia-smi-topo-m", "nvidia-smi topo -m", tool="nvidia-smi", ok_rc=range(0, 256))
            try:
                return parse_topo_matrix(out.stdout)
            except ParseError:
                try:
                    check_failure(out.stdout + "\n" + out.stderr)
                except NvidiaSmiFailure as exc:
                    raise CouldNotRun(f"nvidia-smi topo -m cannot read the GPUs ({exc.kind})",
                                      nvml_remediation(exc)) from None
                raise
        return self.parsed("topo", build)

    def boot(self) -> BootState:
        """GRUB or not (the base role's own probe, `gpuctl.parsers.boot.BOOT_SCRIPT`)."""
        return self.parsed("boot", lambda: parse_boot(self.output("boot", BOOT_SCRIPT).stdout.splitlines()))

    def kernel_log(self) -> XidResult:
        """The kernel ring buffer (`dmesg`): this boot's messages until an operator clears
        them with `dmesg --clear` after handling a fault; `journalctl -k -b` where dmesg
        is not readable."""
        def build() -> XidResult:
            out = self.output("kernel-log", "dmesg 2>/dev/null || journalctl -k -b --no-pager -q -o short-monotonic")
            return parse_xid_log(out.stdout if out.stdout.strip() else "(empty kernel log)\n")
        return self.parsed("kernel_log", build)

    # ------------------------------------------------------------ passive health (gpuctl.healthpolicy)

    def nvlink_errors(self) -> NvlinkErrorsResult:
        """`nvidia-smi nvlink -e`: per GPU and link, the NVLink error counters (since the driver loaded)."""
        def build() -> NvlinkErrorsResult:
            out = self.output("nvidia-smi-nvlink-e", "nvidia-smi nvlink -e", tool="nvidia-smi", ok_rc=range(0, 256))
            if out.rc:
                try:
                    check_failure(out.stdout + "\n" + out.stderr)
                except NvidiaSmiFailure as exc:
                    raise CouldNotRun(f"nvidia-smi cannot read the GPUs ({exc.kind})", nvml_remediation(exc)) \
                        from None
                text = (out.stderr.strip() or out.stdout.strip()).splitlines()
                raise CouldNotRun(f"`{out.command}` exited {out.rc}: {text[-1] if text else 'no output'}")
            return parse_nvlink_errors(out.stdout)
        return self.parsed("nvlink_errors", build)

    def pci_sysfs(self) -> PciSysfs:
        """sysfs of the GPUs' and NICs' PCI functions (class, vendor, numa_node, AER counters) and
        of the RDMA devices (PCI function, fw_ver, port error counters): one command."""
        return self.parsed("pci_sysfs", lambda: parse_pci_sysfs(parse_tail_bundle(
            self.output("health-sysfs", health_sysfs_script(), ok_rc=(0,)).stdout)[0]))

    def pcie_acs(self) -> LspciResult:
        """ACS control of every PCI bridge (`lspci -D -vvv -d ::0604`: class PCI bridge only)."""
        return self.parsed("pcie_acs", lambda: parse_lspci(
            self.output("lspci-acs", "lspci -D -vvv -d ::0604", tool="lspci").stdout or "(no PCI bridge)\n"))

    # ------------------------------------------------------------ fabric, network

    def interfaces(self) -> dict[str, Interface]:
        return self.parsed("interfaces", lambda: parse_ip_addr(
            self.output("ip-addr", "ip -j -d addr show", tool="ip").stdout))

    def rdma_links(self) -> dict[str, RdmaLink]:
        return self.parsed("rdma_links", lambda: parse_rdma_link_json(
            self.output("rdma-link", "rdma -j link show", tool="rdma").stdout))

    def verbs_ports(self) -> IbstatResult:
        """`ibv_devinfo`, read into ibstat's types (`gpuctl.parsers.ibv_devinfo`, as `gpuctl analyze`)."""
        return self.parsed("verbs_ports", lambda: parse_ibv_devinfo(
            self.output("ibv-devinfo", "ibv_devinfo", tool="ibv_devinfo").stdout))

    def ibstat(self) -> IbstatResult:
        return self.parsed("ibstat", lambda: parse_ibstat(self.output("ibstat", "ibstat", tool="ibstat").stdout))

    def gids(self) -> RdmaState:
        """The fabric ports' RDMA devices with their GID tables: the network role's own reading
        (`gpuctl.parsers.rdma.rdma_command`), so install and verify find the same RoCE v2 GID."""
        return self.parsed("gids", lambda: parse_rdma(self.output(
            "roce-gids", rdma_command([(p.hca, p.interface) for p in self.spec.fabric.ports])).stdout))

    # ------------------------------------------------------------ storage, memory

    def md_detail(self) -> MdDetail | None:
        """`mdadm --detail` of the spec's array; None when the array does not exist."""
        raid = self.spec.raid
        assert raid is not None
        name = shlex.quote(raid.name)

        def build() -> MdDetail | None:
            out = self.output("mdadm-detail", f"if [ -e /dev/md/{name} ]; then mdadm --detail /dev/md/{name}; "
                                              f"elif [ -e /dev/{name} ]; then mdadm --detail /dev/{name}; "
                                              "else echo 'no such md device'; exit 3; fi",
                              tool="mdadm", ok_rc=(0, 1, 3))
            if out.rc == 3 or (out.rc == 1 and "No such file" in out.stderr):
                return None
            if out.rc != 0:
                raise CouldNotRun(f"mdadm --detail exited {out.rc}: {out.stderr.strip() or out.stdout.strip()}")
            return parse_mdadm_detail(out.stdout)
        return self.parsed("md_detail", build)

    def mounts(self) -> dict[str, Mount]:
        return self.parsed("mounts", lambda: parse_proc_mounts(self.require_file("/proc/mounts")))

    def memory_kib(self) -> int:
        return self.parsed("meminfo", lambda: parse_meminfo_kib(self.require_file("/proc/meminfo")))

    # ------------------------------------------------------------ prefetch

    def prefetch(self, roles: Iterable[str]) -> None:
        """Run the commands the given roles' checks read, so checks find them cached."""
        declared = [c for c in provisioned() if c.name in set(roles)]
        reads = {r for c in declared for r in c.probes}
        steps = [("files", self.files)]
        if any(c.parts for c in declared):  # a component with matrix parts checks its pins and holds
            steps += [("packages", self.packages), ("holds", self.holds)]
        if self.spec.services:
            steps.append(("units", self.units))
        not_here = {"fabric"} | ({"md_detail"} if self.spec.raid is None else set())
        if not (self.spec.hardware.gpu_count and self.spec.hardware.nvlink_topo_code):
            not_here.add("nvlink_errors")  # no NVLink to count errors on
        steps += [(name, getattr(self, name)) for name in PREFETCHABLE if name in reads and name not in not_here]
        if "fabric" in reads and self.spec.fabric.type != "none":
            steps += [("rdma_links", self.rdma_links), ("verbs_ports", self.verbs_ports)]
            if not self.spec.fabric.soft_roce:
                steps.append(("ibstat", self.ibstat))
            if self.spec.fabric.type == "roce":
                steps.append(("gids", self.gids))

        def run(step: Any) -> None:
            if self.unreachable:
                return
            try:
                step()
            except Exception:  # judged (and reported) by the checks that read it
                return

        # The first command opens the connection (and finds an unreachable host); the rest
        # go out at once as channels of that connection: one round trip instead of one per
        # command (issue 8: verify's wall time at 1-8 nodes was mostly these round trips).
        run(steps[0][1])
        if len(steps) > 1 and not self.unreachable:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(PREFETCH_CHANNELS, len(steps) - 1)) as pool:
                list(pool.map(run, [step for _name, step in steps[1:]]))


def nvml_remediation(exc: NvidiaSmiFailure) -> Remediation:
    if isinstance(exc, (DriverLibraryMismatch, DriverNotLoaded)):
        return Remediation.REBOOT
    if isinstance(exc, (NoDevicesFound, GpuLost)):
        return Remediation.RESEAT_OR_REPLACE
    return Remediation.REBOOT


def _raw_bytes(res: Any, name: str) -> Any:
    """testinfra's undecoded ``stdout_bytes``/``stderr_bytes`` when it has them, else the text."""
    data = getattr(res, f"{name}_bytes", None)
    return data if data is not None else getattr(res, name)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""
