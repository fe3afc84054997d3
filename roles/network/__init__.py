"""network: IPoIB / RoCE (lossless settings) / VLANs and nccl.conf."""

from gpuctl.components import Component, ManagedFile, Module
from gpuctl.knobs import PACKAGE, PREFIX, Choice, Path, Word

from .validate import fabric_problems, vlans_problems


def _configured(fabric: str, vlans: bool) -> bool:
    """The one rule for where network applies and where its port files are: the inventory
    gives the nodes a fabric or VLANs."""
    return fabric != "none" or vlans


def _configured_here(spec):
    return _configured(spec.fabric.type, bool(spec.vlans))


COMPONENT = Component(
    name="network", order=120,
    summary="fabric ports (IPoIB, RoCE), VLANs and nccl.conf",
    validate=(fabric_problems, vlans_problems),
    modules=(Module("rdma_rxe", when=lambda w: w.soft_roce), Module("8021q", when=lambda w: w.vlans)),
    files=(
        ManagedFile("/etc/nccl.conf", knob="network_nccl_conf"),
        ManagedFile("/etc/modules-load.d/gpuctl-network.conf", knob="network_modules_file", when=_configured_here),
        ManagedFile("/etc/systemd/system/gpuctl-*", when=_configured_here, covers=(
            "/etc/systemd/system/{network_roce_qos_unit}", "/etc/systemd/system/{network_soft_roce_unit_prefix}*")),
        ManagedFile("/usr/local/sbin/gpuctl-roce-qos", knob="network_roce_qos_script", when=_configured_here),
        ManagedFile("{network_ifupdown_dir}/{network_ifupdown_prefix}*", per_node=True, when=_configured_here),
        ManagedFile("/etc/netplan/60-gpuctl.yaml", knob="network_netplan_file", per_node=True, when=_configured_here),
        ManagedFile("{network_nm_dir}/gpuctl-*", per_node=True, when=_configured_here),
    ),
    applies=lambda w: "" if _configured(w.fabric, w.vlans) else "no fabric and no VLANs in the inventory",
    container="shares the host kernel; cannot create VLAN or RDMA (rxe) devices",
    probes=("pci_sysfs", "interfaces", "fabric"),
    knobs={
        "network_renderer": Choice(("ifupdown", "netplan", "networkmanager"), "network renderer"),
        "network_ifupdown_dir": Path(files=("/etc/network/interfaces.d",)),
        "network_ifupdown_prefix": PREFIX,
        "network_netplan_file": Path(("/etc/netplan",)),
        "network_nm_dir": Path(files=("/etc/NetworkManager/system-connections",)),
        "network_nccl_conf": Path(("/etc/gpuctl",), files=("/etc/nccl.conf",)),
        "network_modules_file": Path(("/etc/modules-load.d",)),
        "network_roce_qos_script": Path(("/usr/local/sbin", "/usr/local/bin")),
        "network_roce_qos_unit": Word(r"[A-Za-z0-9][A-Za-z0-9_.@:-]*\.service", "systemd service name (….service)"),
        "network_soft_roce_unit_prefix": PREFIX,
        "network_packages": PACKAGE,
    },
)
