"""PCIe: lspci -vvv (ACS redirects, AER errors) and the `nvidia-smi topo -m` connection matrix
(symmetry, GPU↔NIC paths)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuctl.catalog import Measured, Sku, outside_workload
from gpuctl.parsers.lspci import LspciResult, PciDevice
from gpuctl.parsers.topo import PCIE_PATHS, TopoLink, TopoResult, path_rank
from gpuctl.remediation import Remediation
from gpuctl.verdicts.core import NODE, Status, Subject, Verdict, judge_fact
from gpuctl.verdicts.gpu import judge_gpu_count

# ---------------------------------------------------------------- lspci -vvv: ACS and AER

ACS_SOURCE = ("NCCL User Guide, Troubleshooting, PCI Access Control Services (ACS) (docs.nvidia.com/deeplearning/nccl/"
              "user-guide/docs/troubleshooting.html#pci-access-control-services-acs): ACS redirects peer-to-peer PCI "
              "traffic through the CPU root complex, which breaks or slows GPUDirect P2P and RDMA; NVIDIA/nccl#304")
_PCIEPORT = "PCIe port"  # lspci's `Kernel driver in use: pcieport` without the Express capability line
AER_SOURCE = ("PCI Express Base Specification, Advanced Error Reporting: Uncorrectable and Correctable Error Status "
              "registers (lspci -vvv UESta/CESta; a '+' is a status bit set since it was last cleared)")


def judge_acs(devices: Sequence[PciDevice], subject: Subject = NODE) -> list[Verdict]:
    """ACS request/completion redirect (ACSCtl ReqRedir+/CmpltRedir+): on a PCIe switch port
    or bridge it fails (peer traffic of the GPUs and NICs below it goes through the root
    complex); on a root port, or a device whose header the paste does not show, it warns.
    With no redirect anywhere, one pass naming how many devices have ACS."""
    out = []
    with_acs = [d for d in devices if d.acs_ctl is not None]
    for d in with_acs:
        flags = d.acs_redirect
        if not flags:
            continue
        s = Subject(subject.node, bus_id=d.bus_id)
        fix = (f"disable ACS in the BIOS, or until reboot: setpci -s {d.bus_id or 'BUS'} ECAP_ACS+0x6.w=0000 "
               "(PLX switches: f2a.w=0000)")
        what = f"ACS {'+ '.join(flags)}+ on "
        if d.is_bridge and d.port_type not in ("Root Port", _PCIEPORT):
            desc = f" ({d.description})" if d.description else ""
            out.append(judge_fact("acs_redirect", False, value=" ".join(f + "+" for f in flags), expected="off",
                                  subject=s, source=ACS_SOURCE, remediation=Remediation.RECONFIGURE,
                                  message=f"{what}PCIe bridge {d.bus_id}{desc}: GPUDirect P2P/RDMA traffic between "
                                          f"the devices below it is redirected through the root complex; {fix}"))
        else:
            if d.port_type == "Root Port":
                kind = "root port"
            elif d.is_bridge is False:
                kind = "an endpoint"
            elif d.port_type == _PCIEPORT:
                kind = "a PCIe port (pcieport driver) whose type, root or switch port, the paste does not show"
            else:
                kind = "a device whose bus id and type the paste does not show"
            out.append(judge_fact("acs_redirect", False, value=" ".join(f + "+" for f in flags), expected="off",
                                  subject=s, source=ACS_SOURCE, remediation=Remediation.RECONFIGURE, warn_only=True,
                                  message=f"{what}{kind} ({d.label}): it redirects peer traffic only if GPUs or NICs "
                                          "sit below it; give the whole lspci -vvv (or lspci -s BUS -vvv) to tell; "
                                          f"{fix}"))
    if with_acs and not out:
        out.append(Verdict("acs_redirect", Status.PASS, subject, 0, 0, "devices", ACS_SOURCE, Remediation.NONE,
                           f"{subject.label()}: acs_redirect: no request/completion redirect on the {len(with_acs)} "
                           "devices with an ACSCtl line"))
    return out


def judge_aer(devices: Sequence[PciDevice], subject: Subject = NODE) -> list[Verdict]:
    """AER status bits set: an uncorrectable error (UESta) fails the device, correctable
    errors (CESta) warn; a device with AER and nothing set passes (one summary)."""
    out = []
    with_aer = [d for d in devices if d.ue_status is not None or d.ce_status is not None]
    for d in with_aer:
        ue = [k for k, on in (d.ue_status or {}).items() if on]
        ce = [k for k, on in (d.ce_status or {}).items() if on]
        if not ue and not ce:
            continue
        s = Subject(subject.node, bus_id=d.bus_id)
        value = "; ".join(x for x in (f"UESta {' '.join(u + '+' for u in ue)}" if ue else "",
                                      f"CESta {' '.join(c + '+' for c in ce)}" if ce else "") if x)
        out.append(judge_fact("pcie_aer", False, value=value, expected="no status bit set", subject=s,
                              source=AER_SOURCE, remediation=Remediation.RESEAT_OR_REPLACE, warn_only=not ue,
                              message=f"PCIe AER on {d.label}: {value}: "
                                      + ("uncorrectable errors on the link or device (reseat, then replace)" if ue else
                                         "corrected errors: the link retried (a marginal link, riser or slot if they "
                                         "keep rising)")))
    if with_aer and not out:
        out.append(Verdict("pcie_aer", Status.PASS, subject, 0, 0, "devices", AER_SOURCE, Remediation.NONE,
                           f"{subject.label()}: pcie_aer: no AER status bit set on {len(with_aer)} devices"))
    return out


def judge_lspci(result: LspciResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """ACS redirect (`judge_acs`) and AER status (`judge_aer`) of an `lspci -vvv`."""
    return [*judge_acs(result.devices, subject), *judge_aer(result.devices, subject)]


# ---------------------------------------------------------------- topo -m

TOPO_SOURCE = "nvidia-smi topo -m: a connection matrix is symmetric"


def judge_nvlink_pair(link: TopoLink, sku: Sku, subject: Subject = NODE) -> Verdict:
    """One GPU pair of `topo -m` against the SKU's NVLink bond (code, e.g. NV18): the one rule,
    shared by `gpuctl analyze topo` and verify (nvidia_driver.nvlink_pair). No NVLink at all is
    an RMA; fewer links a reseat. The SKU must have a topo code."""
    code = sku.nvlink.topo_code
    pair = Subject(subject.node, int(link.a[3:]), None, int(link.b[3:]))
    rem = Remediation.VENDOR_RMA if link.nvlinks == 0 else Remediation.RESEAT_OR_REPLACE
    why = "no NVLink at all (PCIe/SMP path)" if link.nvlinks == 0 else f"only {link.nvlinks} NVLinks"
    return judge_fact("nvlink_pair", link.code == code, value=link.code, expected=code, subject=pair,
                      source=sku.nvlink.source, remediation=rem,
                      message=f"{link.a}↔{link.b} is {link.code}, expected {code}: {why}")


def judge_topo(result: TopoResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    out = []
    asym = result.asymmetric_pairs()
    out.append(judge_fact(
        "topo_symmetric", not asym, value=not asym, expected=True, subject=subject, source=TOPO_SOURCE,
        remediation=Remediation.RERUN,
        message="matrix not symmetric: " + ", ".join(f"{a}→{b} {x} but {b}→{a} {y}" for a, b, x, y in asym),
    ))
    for note in result.notes:
        out.append(Verdict("topo_nic_columns", Status.WARN, subject, None, None, "", TOPO_SOURCE, Remediation.RERUN,
                           f"{subject.label()}: {note}; NIC affinity not judged (rerun `nvidia-smi topo -m | cat` "
                           "or widen the terminal)"))
    if sku is None:
        return out
    out.append(judge_gpu_count(len(result.gpus), sku, subject, "in topo -m"))
    code = sku.nvlink.topo_code
    if code is None:
        out.append(Verdict("nvlink_topology", Status.NOT_APPLICABLE, subject, None, None, "", sku.nvlink.source,
                           Remediation.NONE, f"{subject.label()}: {sku.name} has no NVLink peers to check"))
        return out
    bad = result.unconnected_pairs(code)
    out.extend(judge_nvlink_pair(link, sku, subject) for link in bad)
    if not bad:
        mesh = result.nvlink_full_mesh(code)
        out.append(judge_fact(
            "nvlink_full_mesh", mesh, value=code if mesh else None, expected=code, subject=subject,
            source=sku.nvlink.source, remediation=Remediation.VENDOR_RMA,
            message=f"no GPU pairs to check (expected {code} between all {sku.gpu.count} GPUs)",
        ))
    return out + _gpu_nic_paths(result, sku, subject)


def _gpu_nic_paths(result: TopoResult, sku: Sku, subject: Subject) -> list[Verdict]:
    """One `gpu_nic_path` verdict per GPU: its nearest NIC must be no farther than the
    SKU's `fabric.gpu_nic_max_path` (PIX < PXB < PHB < NODE < SYS). Not judged when the
    SKU names no limit, or the NIC part of the matrix was not read (already a warning)."""
    limit = sku.fabric.gpu_nic_max_path
    if limit is None or result.notes:
        return []
    if not result.nics:
        return [Verdict("gpu_nic_path", Status.NOT_APPLICABLE, subject, None, limit.code, "", limit.source,
                        Remediation.NONE, f"{subject.label()}: no NIC in this topo -m (RDMA devices not visible "
                        "here?); GPU–NIC paths not judged")]
    # NIC sites, not NIC names: the ports and virtual functions of one adapter are one place
    why = outside_workload(limit.applies_to, Measured(nics=len(result.nic_sites()), gpus=len(result.gpus)))
    if why is not None:
        assert limit.applies_to is not None
        out = []
        for gpu in result.gpus:
            near = result.nearest_nic(gpu)
            out.append(Verdict(
                "gpu_nic_path", Status.NOT_APPLICABLE, Subject(subject.node, int(gpu[3:])), near[1] if near else None,
                limit.code, "", f"{limit.source}; workload: {limit.applies_to.source}", Remediation.NONE,
                f"{subject.label()}: {gpu}: nearest NIC "
                + (f"{result.nic_label(near[0])} is {near[1]}" if near else "none over PCIe")
                + f", not judged: {why} (the {limit.code}-or-nearer rule is for {limit.applies_to.describe()})"))
        return out
    out = []
    for gpu in result.gpus:
        s = Subject(subject.node, int(gpu[3:]))
        near = result.nearest_nic(gpu)
        nic, code = near if near else (None, None)
        rank = path_rank(code) if code else None
        out.append(judge_fact(
            "gpu_nic_path", rank is not None and rank <= PCIE_PATHS.index(limit.code), value=code,
            expected=limit.code, subject=s, source=limit.source, remediation=Remediation.RESEAT_OR_REPLACE,
            message=(f"nearest NIC {result.nic_label(nic)} is {code}, expected {limit.code} or nearer: "
                     "GPUDirect RDMA crosses the host bridge (compute NIC missing, dead or in another slot)"
                     if nic else "no NIC reachable over PCIe"),
        ))
    return out
