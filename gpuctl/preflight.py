"""Preflight: is the hardware that arrived the hardware that was ordered?

Runs before anything is installed, so it reads only what a bare OS has: sysfs (GPUs by
PCI vendor/device id and their PCIe links work before any driver), /proc/meminfo,
/etc/os-release, df, the NVMe and InfiniBand classes. One remote script per node
(`PREFLIGHT_SCRIPT`) prints tagged sections; `parse_preflight` turns them into a
`NodeFacts`; `judge_node` compares those with the NodeSpec and returns verdicts naming
the device (bus id, HCA port) and the expected and found values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuctl.catalog import load_health
from gpuctl.errors import ParseError
from gpuctl.inventory import LoadedInventory
from gpuctl.parsers.ibstat import IbCa, IbPort, parse_sysfs_ports
from gpuctl.parsers.kernel import parse_meminfo_kib
from gpuctl.parsers.os_release import parse_os_release
from gpuctl.remediation import Remediation
from gpuctl.spec import NodeSpec
from gpuctl.verdicts import (
    Status,
    Subject,
    Verdict,
    could_not_run,
    judge_fact,
    judge_pcie_gen_max,
    judge_pcie_width,
    judge_port_rate,
    overall,
)

# Each section starts with a line "### <name>"; the script never fails as a whole.
PREFLIGHT_SCRIPT = r"""
echo '### os-release'; cat /etc/os-release 2>/dev/null
echo '### kernel'; uname -r
echo '### secureboot'
if [ -d /sys/firmware/efi ]; then
  f=$(ls /sys/firmware/efi/efivars/SecureBoot-* 2>/dev/null | head -1)
  if [ -n "$f" ]; then echo "efivar $(od -An -t u1 "$f" | awk '{print $NF}')"; else echo "efi-no-var"; fi
else echo "legacy-bios"; fi
echo '### df-root'; df -B1 --output=avail / 2>/dev/null | tail -1
echo '### meminfo'; grep -E '^MemTotal:' /proc/meminfo
echo '### pci'
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
  printf '%s %s %s %s %s %s %s\n' "$(basename "$d")" "$(cat "$d/device")" "$(cat "$d/class")" \
    "$(tr ' ' '_' < "$d/current_link_speed" 2>/dev/null || echo -)" \
    "$(cat "$d/current_link_width" 2>/dev/null || echo -)" \
    "$(tr ' ' '_' < "$d/max_link_speed" 2>/dev/null || echo -)" \
    "$(cat "$d/max_link_width" 2>/dev/null || echo -)"
done
echo '### nvme'; ls -1 /sys/class/nvme 2>/dev/null
echo '### infiniband'
for h in /sys/class/infiniband/*; do
  [ -d "$h" ] || continue
  for p in "$h"/ports/*; do
    printf '%s %s %s %s %s %s\n' "$(basename "$h")" "$(basename "$p")" \
      "$(tr ' ' '_' < "$h/hca_type" 2>/dev/null || echo -)" "$(cat "$p/link_layer" 2>/dev/null || echo -)" \
      "$(tr ' ' '_' < "$p/state" 2>/dev/null)" "$(tr ' ' '_' < "$p/rate" 2>/dev/null)"
  done
done
echo '### end'
"""

_OS_FAMILY = {("ubuntu", "22.04"): "ubuntu2204", ("ubuntu", "24.04"): "ubuntu2404", ("debian", "12"): "debian12"}
_RHEL_LIKE = {"rhel", "rocky", "almalinux", "centos"}
# "32.0_GT/s_PCIe" → 32.0 ; PCIe generation by transfer rate
_GTS = re.compile(r"^(\d+(?:\.\d+)?)_GT/s")
_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
GPU_CLASS_PREFIX = "0x0302"  # 3D controller
NVSWITCH_CLASS_PREFIX = "0x0680"  # bridge (NVSwitch)


@dataclass(frozen=True)
class PciDevice:
    bus_id: str
    device_id: str  # '2330'
    pci_class: str
    current_gen: int | None
    current_width: int | None
    max_gen: int | None
    max_width: int | None


@dataclass(frozen=True)
class NodeFacts:
    os_id: str
    os_version: str
    kernel: str
    secure_boot: bool | None  # None: unknown (no EFI variable)
    free_root_bytes: int | None
    mem_total_kib: int | None
    pci: tuple[PciDevice, ...]
    nvme: tuple[str, ...]
    ib_cas: tuple[IbCa, ...]  # sysfs read into `gpuctl.parsers.ibstat` (state in ibstat's words)
    sections: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def os_family(self) -> str | None:
        if self.os_id in _RHEL_LIKE and self.os_version.split(".")[0] == "9":
            return "rhel9"
        return _OS_FAMILY.get((self.os_id, self.os_version))

    @property
    def ib_ports(self) -> tuple[IbPort, ...]:
        return tuple(p for ca in self.ib_cas for p in ca.ports)

    @property
    def gpus(self) -> tuple[PciDevice, ...]:
        return tuple(d for d in self.pci if d.pci_class.startswith(GPU_CLASS_PREFIX))

    @property
    def nvswitches(self) -> tuple[PciDevice, ...]:
        return tuple(d for d in self.pci if d.pci_class.startswith(NVSWITCH_CLASS_PREFIX))


def _gen(text: str) -> int | None:
    m = _GTS.match(text)
    return _GEN_BY_GTS.get(float(m.group(1))) if m else None


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def parse_preflight(text: str) -> NodeFacts:
    """Parse the tagged output of PREFLIGHT_SCRIPT; ParseError if it is cut short."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("### "):
            current = line[4:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    if "end" not in sections:
        last = text.strip().splitlines()[-1] if text.strip() else "(no output)"
        raise ParseError(f"preflight output is incomplete (no '### end'); last line: {last!r}")
    osr = parse_os_release(sections.get("os-release", []))
    os_id, os_version = osr.get("ID", ""), osr.get("VERSION_ID", "")
    sb_line = " ".join(sections.get("secureboot", [])).strip()
    secure_boot: bool | None = None
    if sb_line.startswith("efivar "):
        secure_boot = sb_line.split()[-1] == "1"
    elif sb_line == "legacy-bios":
        secure_boot = False
    df = "".join(sections.get("df-root", [])).strip()
    try:
        mem_kib: int | None = parse_meminfo_kib("\n".join(sections.get("meminfo", [])))
    except ParseError:
        mem_kib = None
    pci = []
    for line in sections.get("pci", []):
        parts = line.split()
        if len(parts) != 7:
            continue
        bus, dev, cls, cur_s, cur_w, max_s, max_w = parts
        pci.append(PciDevice(bus, dev.lower().removeprefix("0x"), cls, _gen(cur_s), _int(cur_w), _gen(max_s),
                             _int(max_w)))
    return NodeFacts(
        os_id=os_id, os_version=os_version, kernel="".join(sections.get("kernel", [])).strip(),
        secure_boot=secure_boot, free_root_bytes=int(df) if df.isdigit() else None,
        mem_total_kib=mem_kib, pci=tuple(pci),
        nvme=tuple(x for x in sections.get("nvme", []) if x.strip()),
        ib_cas=parse_sysfs_ports(sections.get("infiniband", [])).cas,
        sections={k: "\n".join(v) for k, v in sections.items()},
    )


def judge_node(facts: NodeFacts, spec: NodeSpec, loaded: LoadedInventory) -> list[Verdict]:
    """Everything preflight knows about one node, as verdicts (pass/warn/fail)."""
    node = Subject(node=spec.node)
    hw = spec.hardware
    out: list[Verdict] = []
    inv_src = f"inventory {loaded.path}"

    out.append(judge_fact(
        "os", facts.os_family == spec.os_family, value=f"{facts.os_id} {facts.os_version}",
        expected=spec.os, subject=node, source=inv_src, remediation=Remediation.RECONFIGURE,
        message=f"runs {facts.os_id or '?'} {facts.os_version or '?'}, the inventory says {spec.os} "
                f"(matrix {spec.matrix} packages are for {spec.os_family})"))
    out.append(judge_fact("kernel", bool(facts.kernel), value=facts.kernel, expected="a running kernel",
                          subject=node, source="uname -r", remediation=Remediation.RERUN,
                          message="kernel release unreadable"))
    out.append(judge_fact(
        "secure_boot", facts.secure_boot is not True, value={True: "enabled", False: "disabled",
                                                              None: "unknown"}[facts.secure_boot],
        expected="disabled, or a MOK enrolled for DKMS modules", subject=node, source="EFI SecureBoot variable",
        remediation=Remediation.RECONFIGURE, warn_only=True,
        message="Secure Boot is enabled: the NVIDIA DKMS modules must be signed with an enrolled MOK or they "
                "will not load"))
    fig = load_health().preflight.min_free_root_gib
    pre = loaded.inventory.preflight
    min_free, free_src = (pre.min_free_root_gib, f"inventory override: {pre.source}") \
        if pre.min_free_root_gib is not None else (fig.value, fig.source)
    free_gib = facts.free_root_bytes / 2**30 if facts.free_root_bytes is not None else None
    if free_gib is None:
        out.append(could_not_run("free_disk", "df gave no figure for /", node))
    else:
        out.append(judge_fact("free_disk", free_gib >= min_free, value=round(free_gib, 1), expected=min_free,
                              unit="GiB", subject=node, source=free_src, remediation=Remediation.RECONFIGURE,
                              message=f"{free_gib:.1f} GiB free on /, need {min_free:g} GiB"))
    mem_gib = facts.mem_total_kib / 2**20 if facts.mem_total_kib else None
    if mem_gib is None:
        out.append(could_not_run("cpu_memory", "MemTotal missing from /proc/meminfo", node))
    else:
        out.append(judge_fact("cpu_memory", mem_gib >= hw.min_cpu_memory_gib * 0.97, value=round(mem_gib, 1),
                              expected=hw.min_cpu_memory_gib, unit="GiB", subject=node,
                              source=hw.min_cpu_memory_source, remediation=Remediation.RESEAT_OR_REPLACE,
                              message=f"{mem_gib:.1f} GiB of CPU memory, the {spec.sku} minimum is "
                                      f"{hw.min_cpu_memory_gib:g} GiB (a DIMM missing or failed?)"))
    gpus = facts.gpus
    sku_src = f"SKU catalog {spec.sku}"
    out.append(judge_fact("gpu_count", len(gpus) == hw.gpu_count, value=len(gpus), expected=hw.gpu_count,
                          subject=node, source=sku_src, remediation=Remediation.RESEAT_OR_REPLACE,
                          message=f"{len(gpus)} NVIDIA GPU(s) on the PCI bus, ordered {hw.gpu_count} "
                                  f"({', '.join(g.bus_id for g in gpus) or 'none found'})"))
    for g in gpus:
        sub = Subject(node=spec.node, bus_id=g.bus_id)
        out.append(judge_fact("gpu_model", g.device_id in hw.gpu_pci_ids, value=f"10de:{g.device_id}",
                              expected=" or ".join(f"10de:{i}" for i in hw.gpu_pci_ids), subject=sub,
                              source=sku_src, remediation=Remediation.VENDOR_RMA,
                              message=f"PCI device 10de:{g.device_id} is not a {hw.gpu_model}"))
        out.append(judge_pcie_width(g.current_width, hw.pcie_width, sub, sku_src, check="gpu_pcie_width"))
        out.append(judge_pcie_gen_max(g.max_gen, hw.pcie_generation, sub, sku_src, check="gpu_pcie_gen"))
    if hw.nvswitch:
        out.append(judge_fact("nvswitch_present", len(facts.nvswitches) > 0, value=len(facts.nvswitches),
                              expected=">= 1", subject=node, source=sku_src, remediation=Remediation.VENDOR_RMA,
                              message="no NVSwitch found on the PCI bus of an NVSwitch SKU", warn_only=True))
    out.append(judge_fact("nvme_count", len(facts.nvme) >= hw.nvme_count, value=len(facts.nvme),
                          expected=hw.nvme_count, subject=node, source=hw.nvme_count_source,
                          remediation=Remediation.RESEAT_OR_REPLACE,
                          message=f"{len(facts.nvme)} NVMe controller(s), expected {hw.nvme_count}"))
    fab = spec.fabric
    if fab.type != "none":
        if fab.soft_roce:
            out.append(Verdict("hca_count", Status.NOT_APPLICABLE, node, len(facts.ib_ports), len(fab.ports), "", "lab",
                               Remediation.NONE, f"{spec.node}: hca_count not applicable: Soft-RoCE devices are "
                                                 "created by the network role, not found before it"))
        else:
            hcas = sorted({p.ca for p in facts.ib_ports})
            out.append(judge_fact("hca_count", len(hcas) >= len(fab.ports), value=len(hcas),
                                  expected=len(fab.ports), subject=node, source=inv_src,
                                  remediation=Remediation.RESEAT_OR_REPLACE,
                                  message=f"{len(hcas)} RDMA device(s) ({', '.join(hcas) or 'none'}), "
                                          f"expected {len(fab.ports)}"))
            ca_types = {ca.name: ca.ca_type for ca in facts.ib_cas}
            for p in facts.ib_ports:
                sub = Subject(node=spec.node, port=p.name)
                if p.rate_gbps is None:
                    out.append(judge_fact("hca_rate", False, value=None, expected=fab.rate_gbps, unit="Gb/s",
                                          subject=sub, source=inv_src, remediation=Remediation.RESEAT_OR_REPLACE,
                                          message=f"port rate unreadable, expected {fab.rate_gbps} Gb/s"))
                elif fab.rate_gbps is not None:
                    out.append(judge_port_rate(p.rate_gbps, fab.rate_gbps, sub, inv_src, ca_types.get(p.ca),
                                               check="hca_rate"))
    return out


def rack_power(loaded: LoadedInventory, nodes: Sequence[str] | None = None) -> list[dict[str, object]]:
    """Per rack: budget, nodes and the SKU power they draw (the inventory validated that it fits)."""
    kw = loaded.sku.node_power_kw.value
    rows = []
    for rack in loaded.inventory.racks:
        members = [n.name for n in loaded.inventory.nodes
                   if n.rack == rack.name and (nodes is None or n.name in nodes)]
        rows.append({"rack": rack.name, "cooling": rack.cooling, "budget_kw": rack.power_kw, "nodes": members,
                     "draw_kw": round(kw * len(members), 2), "source": loaded.sku.node_power_kw.source})
    return rows


@dataclass
class PreflightResult:
    """Per node verdicts (or the reason the node could not be read) and the rack table."""

    verdicts: dict[str, list[Verdict]]
    racks: list[dict[str, object]]

    def status(self, node: str) -> Status:
        return overall(self.verdicts[node])

    @property
    def failed(self) -> bool:
        return any(self.status(n) in (Status.FAIL, Status.ERROR) for n in self.verdicts)

    def as_dict(self) -> dict[str, object]:
        return {
            "status": "fail" if self.failed else "pass",
            "hosts": {n: {"status": self.status(n).value, "verdicts": [v.as_dict() for v in vs]}
                      for n, vs in self.verdicts.items()},
            "racks": self.racks,
        }


def run_preflight(loaded: LoadedInventory, specs: Sequence[NodeSpec], record: object | None = None,
                  timeout_s: float = 60) -> PreflightResult:
    """Run the preflight script on every node in parallel and judge the results."""
    from gpuctl.bench.remote import run_parallel, targets_for

    targets = targets_for(loaded, specs)
    results = run_parallel({s.node: (targets[s.node], PREFLIGHT_SCRIPT) for s in specs}, timeout_s)
    verdicts: dict[str, list[Verdict]] = {}
    for spec in specs:
        res = results[spec.node]
        if record is not None:
            record.raw(spec.node, "preflight.txt", res.transcript())  # type: ignore[attr-defined]
        node = Subject(node=spec.node)
        if res.unreachable or res.timed_out:
            reason = (res.stderr.strip().splitlines() or ["no answer"])[-1] if not res.timed_out else "timed out"
            verdicts[spec.node] = [could_not_run("ssh", f"cannot reach {spec.address}:{spec.ssh_port}: {reason}",
                                                 node, Remediation.RECONFIGURE)]
            continue
        try:
            facts = parse_preflight(res.stdout)
        except ParseError as exc:
            verdicts[spec.node] = [could_not_run("preflight", str(exc), node)]
            continue
        verdicts[spec.node] = [judge_fact("ssh", True, value="reachable", expected="reachable", subject=node,
                                          source="ssh", remediation=Remediation.NONE, message="")]
        verdicts[spec.node] += judge_node(facts, spec, loaded)
    racks = rack_power(loaded, [s.node for s in specs])
    out = PreflightResult(verdicts, racks)
    if record is not None:
        record.stage("preflight", out.as_dict())  # type: ignore[attr-defined]
    return out
