"""Per-node hardware profiles for the lab's emulated GPU tools.

A profile is a JSON document at ``/etc/gpuctl-lab/profile.json`` on a lab node: the
SKU's facts from the catalog (GPU count, model, PCI device id, memory, PCIe, NVLink)
plus per-GPU identities (bus ids laid out like a real HGX board, serials, UUIDs, NUMA)
and the figures the emulated benchmarks print. Figures sit a few percent above the
SKU's warn threshold so a healthy lab node passes and a fault (slow_nccl: 60 %) fails;
the fabric's rate and HCAs per node bound a multi-node all_reduce where the SKU has no
multi-node figure.
Everything is deterministic in (node, SKU, index).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from gpuctl.catalog import Sku, load_sku
from gpuctl.lab.pcisim import install_unit_script
from gpuctl.lab.ssh import ssh_run

log = logging.getLogger(__name__)

PROFILE_PATH = "/etc/gpuctl-lab/profile.json"
FAULTS_PATH = "/etc/gpuctl-lab/faults"
SCHEMA = 1

#: PCI bus numbers of the 8 GPUs on an HGX baseboard (Supermicro/Dell HGX H100 layout).
HGX_BUSES: tuple[str, ...] = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
#: nvidia-smi nvlink --status per-link speed by architecture (GB/s): A100 25.781? — see README.
LINK_GB_S: dict[str, float] = {"ampere": 25.0, "hopper": 26.562, "blackwell": 53.125}
POWER_W: dict[str, int] = {"ampere": 400, "hopper": 700, "blackwell": 1000}
HEADROOM = 1.04


def _healthy(sku: Sku, key: str, fallback: float | None = None) -> float | None:
    """A figure comfortably on the good side of the SKU's threshold `key`."""
    t = sku.thresholds.get(key)
    if t is None or t.not_applicable:
        return fallback
    floor = max(v for v in (t.min, t.warn_below) if v is not None) if (t.min or t.warn_below) else None
    if floor is None:
        return fallback
    return round(floor * HEADROOM, 2)


def _uuid(node: str, sku: str, index: int) -> str:
    h = hashlib.sha256(f"{node}/{sku}/{index}".encode()).hexdigest()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def write_profile(node: str, sku_name: str, index: int) -> dict[str, Any]:
    """The hardware profile of lab node `node` (1-based `index`) pretending to be `sku_name`."""
    sku = load_sku(sku_name)
    count = sku.gpu.count
    numa_split = max(1, count // 2)
    gpus = []
    for i in range(count):
        bus = HGX_BUSES[i] if i < len(HGX_BUSES) else f"{0xc0 + i:02x}"
        gpus.append({
            "index": i,
            "bus_id": f"00000000:{bus.upper()}:00.0",
            "serial": f"16520{index:02d}{i:02d}{int(hashlib.sha256(node.encode()).hexdigest()[:4], 16) % 10000:04d}",
            "uuid": _uuid(node, sku.name, i),
            "numa": 0 if i < numa_split or count == 1 else 1,
            "module_id": i + 1,
            "temp_c": 31 + (i * 3) % 7,
            "power_w": 68 + (i * 5) % 13,
        })
    arch = sku.gpu.architecture
    hbm_tb_s = sku.hbm_bandwidth_tb_s.value
    hbm_fraction = _healthy(sku, "hbm_copy_fraction", 0.85) or 0.85
    figures = {
        "all_reduce_busbw_gb_s": _healthy(sku, "all_reduce_busbw_gb_s"),
        "multi_node_busbw_gb_s": _healthy(sku, "multi_node_busbw_gb_s"),
        "h2d_gb_s": _healthy(sku, "h2d_gb_s", 50.0),
        "d2h_gb_s": _healthy(sku, "d2h_gb_s", 50.0),
        "p2p_gb_s": _healthy(sku, "p2p_gb_s", 0.0),
        "hbm_copy_gb_s": round(hbm_tb_s * 1000 * min(0.95, hbm_fraction), 1),
        "gdsio_gib_s": 6.0,
    }
    return {
        "schema": SCHEMA,
        "node": node,
        "sku": sku.name,
        "index": index,
        "chassis_serial": f"1653{index:02d}00000{index:02d}",
        "gpu": {
            "count": count,
            "model": sku.gpu.model,
            "device_id": sku.gpu.pci_device_ids[0].lower(),
            "memory_mib": sku.gpu.memory_mib,
            "architecture": arch,
            "compute_capability": sku.gpu.compute_capability,
            "power_limit_w": POWER_W.get(arch, 700),
        },
        "pcie": {"generation": sku.pcie.generation, "width": sku.pcie.width},
        "nvlink": {
            "nvswitch": sku.nvlink.nvswitch,
            "links_per_gpu": sku.nvlink.links_per_gpu,
            "topo_code": sku.nvlink.topo_code,
            "link_gb_s": LINK_GB_S.get(arch, 25.0) if sku.nvlink.links_per_gpu else 0.0,
        },
        "cpu_affinity": {"0": "0-47,96-143", "1": "48-95,144-191"},
        "gpus": gpus,
        "figures": figures,
        "fabric": {"rate_gbps": sku.fabric_rate_gbps("roce") or sku.fabric_rate_gbps("infiniband"),
                   "hcas": int(sku.fabric.hcas.value) if sku.fabric.hcas else None},
    }


def profile_json(profile: dict[str, Any]) -> str:
    return json.dumps(profile, indent=2, sort_keys=True) + "\n"


def push_script(profile: dict[str, Any]) -> str:
    """Shell run on the node (as root) that installs the profile; the JSON comes on stdin."""
    rate = profile.get("fabric", {}).get("rate_gbps")
    lines = [
        "set -e",
        "mkdir -p /etc/gpuctl-lab",
        f"cat > {PROFILE_PATH}.new",
        f"mv {PROFILE_PATH}.new {PROFILE_PATH}",
        f"touch {FAULTS_PATH}",
    ]
    # The PCI sysfs view with the profile's GPUs (read by preflight), kept across reboots.
    lines.append(install_unit_script())
    if rate:
        # Soft-RoCE: the verbs stack takes its rate from the netdev; virtio-net lets the
        # speed it reports be set (reporting only). See README "Fabric rate".
        lines.append(f"echo {int(rate) * 1000} > /etc/gpuctl-lab/fabric-speed-mbps")
    return "\n".join(lines) + "\n"


def push_profile(node: str, sku_name: str, index: int, *, state: Any = None,
                 timeout: float = 60) -> dict[str, Any]:
    """Write node `node`'s profile to ``/etc/gpuctl-lab/profile.json`` over SSH (lab-infra's
    `ssh_run`), create an empty fault file, and return the profile. Call after boot; the
    step may take `timeout` seconds (it runs Python on a guest that is still booting)."""
    profile = write_profile(node, sku_name, index)
    ssh_run(node, ["sh", "-c", push_script(profile)], state=state, check=True,
            input=profile_json(profile), timeout=timeout)
    log.info("%s: hardware profile %s (%d GPUs) installed", node, sku_name, profile["gpu"]["count"])
    return profile
