"""NodeSpec: the single source of truth for what one host must look like.

`resolve(loaded_inventory)` combines the inventory, its pinned matrix, the SKU catalog
and the host's OS family into one frozen `NodeSpec` per node: exact packages per
component (with holds), services, kernel modules, kernel command line, sysctl, files to
render, fabric and VLAN addressing, RAID, Lustre, nccl.conf, the hardware the node
must have and the effective acceptance thresholds. Roles install exactly this; checks
verify exactly this; nothing downstream computes a version.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpuctl.catalog import Threshold
from gpuctl.components import (
    Module,
    When,
    container_reasons,
    defaults,
    knob_value,
    provision_order,
    provisioned,
    resolve_reasons,
)
from gpuctl.errors import InputError
from gpuctl.inventory import Inventory, LoadedInventory, Node
from gpuctl.matrix import Package
from gpuctl.parsers.nccl_env import exact_list
from gpuctl.paths import catalog_dir
from gpuctl.repocache import apply_cache
from gpuctl.rules import check_matrix, failures
from gpuctl.yamlsrc import load_yaml

#: Provision order (design.md), read from the component registry (roles/<component>/__init__.py).
#: A role is skipped on a node when its spec says so (`NodeSpec.roles`). On "container" nodes
#: (lab.kind in the inventory, written by `gpuctl lab up --kind container`) the components that
#: need a kernel of the node's own are not applicable (`Component.container` says why).
ROLE_ORDER: tuple[str, ...] = provision_order()


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ComponentSpec(_Spec):
    """One matrix component on this host: its packages, pinned and held, or why not."""

    name: str
    version: str
    packages: tuple[Package, ...]
    enabled: bool = True
    reason: str = ""


class ServiceSpec(_Spec):
    name: str
    component: str
    enabled: bool = True
    running: bool = True


class ModuleSpec(_Spec):
    name: str
    component: str
    version: str | None = None


class RepoSpec(_Spec):
    url: str
    keyring_url: str
    keyring_sha256: str | None
    keyring_path: str
    origin: str
    apt_proxy: str | None
    offline: bool
    source: str


class HardwareSpec(_Spec):
    gpu_count: int
    gpu_model: str
    gpu_pci_ids: tuple[str, ...]
    gpu_memory_mib: int
    compute_capability: str
    pcie_generation: int
    pcie_width: int
    nvlink_topo_code: str | None
    nvswitch: bool
    nvme_count: int
    nvme_count_source: str
    min_cpu_memory_gib: float
    min_cpu_memory_source: str
    fabric_rate_gbps: int | None


class FabricPort(_Spec):
    hca: str
    interface: str
    address: str | None  # "192.168.1.11/16"


class FabricSpec(_Spec):
    type: Literal["infiniband", "roce", "none"]
    rate_gbps: int | None
    link_layer: Literal["InfiniBand", "Ethernet"] | None
    ports: tuple[FabricPort, ...]
    mtu: int | None
    ipoib_mode: Literal["connected", "datagram"] | None = None
    roce_gid_index: int | Literal["auto"] | None = None
    roce_traffic_class: int | None = None
    roce_pfc_priority: int | None = None
    roce_ecn: bool | None = None
    soft_roce: bool = False


class VlanSpec(_Spec):
    id: int
    name: str
    parent: str
    interface: str  # "eth1.100"
    address: str | None  # "10.100.0.11/24"
    mtu: int | None


class RaidSpec(_Spec):
    level: int
    devices: Literal["auto"] | tuple[str, ...]
    chunk_kib: int
    fs: str
    mount: str
    name: str
    wipe: tuple[str, ...]
    expected_members: int


class LustreSpec(_Spec):
    mgs_nids: tuple[str, ...]
    fsname: str
    mount: str
    lnet: str
    mount_options: str

    @property
    def source(self) -> str:
        return ":".join(self.mgs_nids) + f":/{self.fsname}"


class TrainEnvSpec(_Spec):
    """The training environment this node must have (matrix `train_env`, for this node's
    OS family): the venv's Python, the torch build and the NCCL/CUDA runtime wheels it
    pins, the index to install from and the hash lock (as pip reads it, and as the
    distributions this node's Python installs from it)."""

    python: str
    build: Literal["cuda", "cpu"] = "cuda"  # roles/train_env's train_env_build
    torch_version: str           # as pip / importlib.metadata see it: "2.8.0" ("2.13.0+cpu")
    torch_runtime_version: str   # torch.__version__: "2.8.0+cu128" ("2.13.0+cpu")
    torch_cuda: str | None       # torch.version.cuda: "12.8" (None: a CPU build)
    nccl: str | None             # "nvidia-nccl-cu12==2.27.3" (None: a CPU build bundles no NCCL)
    nccl_version: str | None     # torch.cuda.nccl.version() joined: "2.27.3"
    cuda_runtime: str | None     # "nvidia-cuda-runtime-cu12==12.8.90"
    index_url: str
    lock_text: str               # the requirements file pip installs with --require-hashes
    packages: dict[str, str]     # distribution → version this node's Python installs
    source: str

    @property
    def lock_sha256(self) -> str:
        import hashlib

        return hashlib.sha256(self.lock_text.encode()).hexdigest()

    def differences(self, installed: dict[str, str]) -> list[str]:
        """How `installed` ({canonical name: version} in the venv) differs from the lock; []
        when it is the lock. pip/setuptools/wheel that `python -m venv` brings are not extra."""
        out = [f"{n} {installed[n]} (lock {v})" if n in installed else f"{n} missing"
               for n, v in sorted(self.packages.items()) if installed.get(n) != v]
        out += [f"{n} {v} not in the lock" for n, v in sorted(installed.items())
                if n not in self.packages and n not in VENV_BOOTSTRAP]
        return out


#: distributions `python -m venv` installs by itself (not in a lock, not a difference)
VENV_BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})


def _marker_applies(marker: str, python: str) -> bool:
    if not marker:
        return True
    from packaging.markers import Marker

    return Marker(marker).evaluate({"python_version": python, "python_full_version": python + ".0"})


def train_env_spec(matrix: Any, os_family: str, build: str = "cuda") -> TrainEnvSpec | None:
    """The matrix's training environment for one OS family and build ("cuda": the matrix's
    torch; "cpu": its `train_env.cpu`), None when it pins none or names no Python for the
    family (the rules fail such a matrix before this runs) or pins no CPU build when asked
    for one (`check_train_env_build` refuses that inventory first)."""
    te = matrix.train_env
    if te is None or os_family not in te.python:
        return None
    py = te.python[os_family]
    if build == "cpu":
        if te.cpu is None:
            return None
        lock, index_url, runtime = te.cpu.lock, te.cpu.index_url, te.cpu.torch.version
        build_fields: dict[str, Any] = dict(torch_version=te.cpu.torch.version, torch_cuda=None, nccl=None,
                                            nccl_version=None, cuda_runtime=None)
        where = "train_env.cpu"
    else:
        lock, index_url, runtime = te.lock, te.index_url, te.torch.runtime_version
        build_fields = dict(torch_version=te.torch.dist_version, torch_cuda=te.torch.cuda, nccl=te.nccl.requirement,
                            nccl_version=te.nccl.version, cuda_runtime=te.cuda_runtime.requirement)
        where = "train_env"
    header = (f"# gpuctl train_env lock: matrix {matrix.name}, torch {runtime}, Python {py}\n"
              f"# {lock.source}\n")
    lines = [p.lock_line() for p in lock.packages]
    return TrainEnvSpec(
        python=py, build="cpu" if build == "cpu" else "cuda", torch_runtime_version=runtime, index_url=index_url,
        lock_text=header + "\n".join(lines) + "\n",
        packages={p.name: p.version for p in lock.packages if _marker_applies(p.marker, py)},
        source=f"matrix {matrix.name} {where} ({lock.source})", **build_fields,
    )


def train_env_build(inv: Inventory) -> str:
    """The training environment build this inventory asks for: role_vars.train_env_build
    (typed: cuda | cpu, gpuctl.knobs), else roles/train_env's default."""
    return str(knob_value("train_env_build", inv.role_vars))


class NodeSpec(_Spec):
    cluster: str
    node: str
    address: str
    ssh_port: int
    ssh_user: str
    management_interface: str | None  # never reconfigured by any role
    os: str
    os_family: str
    package_manager: Literal["apt", "dnf"]
    sku: str
    matrix: str
    driver_version: str
    driver_branch: str
    driver_flavour: str
    components: dict[str, ComponentSpec]
    services: tuple[ServiceSpec, ...]
    kernel_modules: tuple[ModuleSpec, ...]
    kernel_cmdline: tuple[str, ...]
    blacklisted_modules: tuple[str, ...]
    sysctl: dict[str, str]
    #: sysctl keys whose value is a floor (a limit or buffer size): a higher value already on
    #: the node is kept, never lowered; the others must be exactly as given
    sysctl_minimums: tuple[str, ...] = ()
    repo: RepoSpec
    hardware: HardwareSpec
    fabric: FabricSpec
    vlans: tuple[VlanSpec, ...]
    raid: RaidSpec | None
    lustre: LustreSpec | None
    nccl_conf: dict[str, str]
    thresholds: dict[str, Threshold]
    roles: dict[str, str]  # role → "" when it runs here, else why it is skipped
    role_vars: dict[str, Any] = {}  # inventory overrides of roles/<role>/defaults.yaml
    #: "machine" (own kernel: bare metal or a QEMU lab node) or "container" (lab
    #: systemd-nspawn node sharing the host kernel: kernel-feature work is not applicable).
    node_kind: Literal["machine", "container"] = "machine"
    #: the training environment (roles/train_env); None when the matrix pins none
    train_env: TrainEnvSpec | None = None

    def sysctl_met(self, key: str, value: str) -> bool:
        """`value` (as /proc/sys prints it) satisfies the spec's `key`: at least the floor for
        a key in sysctl_minimums, else exactly the value (whitespace folded)."""
        want = " ".join(self.sysctl[key].split())
        value = " ".join(value.split())
        if key in self.sysctl_minimums and want.isdigit():
            return value.isdigit() and int(value) >= int(want)
        return value == want

    def service(self, part: str) -> str:
        """The unit of a matrix part's service, as resolved once from its knob (role_vars, else
        the component's default): what install enables and verify checks."""
        for s in self.services:
            if s.component == part:
                return s.name
        raise KeyError(f"{self.node}: no service of {part} in this spec")

    def pins(self, component: str) -> list[str]:
        c = self.components.get(component)
        return [p.pin for p in c.packages] if c and c.enabled else []

    def all_packages(self) -> list[Package]:
        return [p for c in self.components.values() if c.enabled for p in c.packages]


@cache
def _repos_catalog() -> dict[str, Any]:
    data, _ = load_yaml(catalog_dir() / "repos.yaml")
    return data["nvidia_cuda"]


def _repo(loaded: LoadedInventory) -> RepoSpec:
    cat = _repos_catalog()
    inv = loaded.inventory
    fam = inv.cluster.os_family
    base = (inv.repos.mirror or cat["base_url"]).rstrip("/")
    url = f"{base}/{cat['path'].format(distro=fam)}"
    key = cat["keys"][fam]
    key_file = inv.repos.keyring_file or key["file"]
    sha = inv.repos.keyring_sha256 or (None if inv.repos.mirror else key["sha256"])
    host = base.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    return RepoSpec(
        url=url,
        keyring_url=url + key_file,
        keyring_sha256=sha,
        keyring_path="/usr/share/keyrings/gpuctl-nvidia-cuda.gpg",
        origin=host,
        apt_proxy=inv.repos.apt_proxy,
        offline=inv.repos.offline,
        source=key["source"] if not inv.repos.keyring_sha256 else "inventory repos.keyring_sha256",
    )


def _fabric(loaded: LoadedInventory, node: Node) -> FabricSpec:
    f = loaded.inventory.fabric
    if f.type == "none":
        return FabricSpec(type="none", rate_gbps=None, link_layer=None, ports=(), mtu=None)
    n = f.hcas_per_node
    hcas = f.hcas or [f"mlx5_{i}" for i in range(n)]
    ifaces = f.interfaces or [f"ib{i}" for i in range(n)]
    settings = f.ipoib or f.roce
    prefix = settings.cidr.prefixlen if settings else None
    ports = tuple(
        FabricPort(
            hca=hcas[i],
            interface=ifaces[i],
            address=f"{node.fabric_ips[i]}/{prefix}" if i < len(node.fabric_ips) and prefix else None,
        )
        for i in range(n)
    )
    if f.type == "infiniband":
        mode = f.ipoib.mode if f.ipoib else "datagram"
        mtu = (f.ipoib.mtu if f.ipoib and f.ipoib.mtu else (65520 if mode == "connected" else 4092))
        return FabricSpec(type="infiniband", rate_gbps=f.rate_gbps, link_layer="InfiniBand", ports=ports,
                          mtu=mtu, ipoib_mode=mode)
    r = f.roce
    return FabricSpec(
        type="roce", rate_gbps=f.rate_gbps, link_layer="Ethernet", ports=ports,
        mtu=r.mtu if r else 4200, roce_gid_index=r.gid_index if r else "auto",
        roce_traffic_class=r.traffic_class if r else 106,
        roce_pfc_priority=r.pfc_priority if r else 3, roce_ecn=r.ecn if r else True, soft_roce=f.soft_roce,
    )


def _nccl_conf(fabric: FabricSpec) -> dict[str, str]:
    conf: dict[str, str] = {}
    if fabric.type == "none":
        return conf
    conf["NCCL_IB_HCA"] = exact_list(p.hca for p in fabric.ports)
    socket_if = [p.interface for p in fabric.ports if p.address] or [p.interface for p in fabric.ports]
    conf["NCCL_SOCKET_IFNAME"] = exact_list(socket_if)
    if fabric.type == "roce":
        if isinstance(fabric.roce_gid_index, int):
            conf["NCCL_IB_GID_INDEX"] = str(fabric.roce_gid_index)
        conf["NCCL_IB_TC"] = str(fabric.roce_traffic_class)
    else:
        conf["NCCL_IB_SL"] = "0"
    return conf


def resolve_node(loaded: LoadedInventory, node: Node) -> NodeSpec:
    inv, sku, matrix = loaded.inventory, loaded.sku, loaded.matrix.matrix
    fam = inv.cluster.os_family
    nvswitch = sku.nvlink.nvswitch
    fabric = _fabric(loaded, node)
    lustre = inv.storage.lustre

    when = When(sku=sku.name, package_manager=_package_manager(fam), nvswitch=nvswitch, fabric=fabric.type,
                soft_roce=fabric.soft_roce, vlans=bool(inv.vlans), raid=inv.storage.raid is not None,
                lustre=lustre is not None, matrix=matrix, role_vars=inv.role_vars)
    roles = resolve_reasons(when)
    components: dict[str, ComponentSpec] = {}
    services: list[ServiceSpec] = []
    modules: list[ModuleSpec] = []
    for c in provisioned():
        reason = roles[c.name]
        for part in c.parts:
            components[part.name] = ComponentSpec(
                name=part.name, version=part.version(matrix), packages=matrix.packages_for(fam, part.name),
                enabled=not reason, reason=reason)
        if reason:
            continue
        services += [ServiceSpec(name=_unit(when.knob(s.knob), when.package_manager), component=s.part or c.name)
                     for s in c.services]
        modules += [ModuleSpec(name=_module_name(m, when), component=m.part or c.name,
                               version=components[m.part].version if m.versioned else None)
                    for m in c.modules if m.when is None or m.when(when)]
    for comp in components.values():
        if comp.enabled and not comp.packages:
            raise InputError(f"matrix {matrix.name} lists no {fam} packages for component {comp.name}")

    vlans = tuple(
        VlanSpec(
            id=v.id, name=v.name, parent=v.parent, interface=f"{v.parent}.{v.id}",
            address=f"{node.vlan_ips[v.id]}/{v.cidr.prefixlen}" if v.id in node.vlan_ips else None,
            mtu=v.mtu,
        )
        for v in inv.vlans
    )
    nvme = inv.hardware.nvme_count
    nvme_count, nvme_src = (int(nvme.value), f"inventory override: {nvme.source}") if nvme else \
        (int(sku.nvme_count.value), sku.nvme_count.source)
    raid = None
    if inv.storage.raid is not None:
        r = inv.storage.raid
        raid = RaidSpec(
            level=r.level, devices=r.devices if r.devices == "auto" else tuple(r.devices),
            chunk_kib=r.chunk_kib, fs=r.fs, mount=r.mount, name=r.name, wipe=tuple(r.wipe),
            expected_members=len(r.devices) if isinstance(r.devices, list) else nvme_count,
        )
    lustre_spec = None
    if lustre is not None:
        lustre_spec = LustreSpec(mgs_nids=tuple(lustre.mgs_nids), fsname=lustre.fsname, mount=lustre.mount,
                                 lnet=lustre.lnet, mount_options=lustre.mount_options)

    thresholds = dict(sku.thresholds)
    for key, override in inv.thresholds.items():
        thresholds[key] = Threshold(**{**override.model_dump(), "source": f"inventory override: {override.source}"})

    mem = inv.hardware.min_cpu_memory_gib
    min_mem, min_mem_src = (mem.value, f"inventory override: {mem.source}") if mem else \
        (sku.min_cpu_memory_gib.value, sku.min_cpu_memory_gib.source)
    hardware = HardwareSpec(
        gpu_count=sku.gpu.count, gpu_model=sku.gpu.model, gpu_pci_ids=sku.gpu.pci_ids,
        gpu_memory_mib=sku.gpu.memory_mib, compute_capability=sku.gpu.compute_capability,
        pcie_generation=sku.pcie.generation, pcie_width=sku.pcie.width,
        nvlink_topo_code=sku.nvlink.topo_code, nvswitch=nvswitch,
        nvme_count=nvme_count, nvme_count_source=nvme_src,
        min_cpu_memory_gib=min_mem, min_cpu_memory_source=min_mem_src,
        fabric_rate_gbps=fabric.rate_gbps,
    )
    kind = node_kind(inv)
    if kind == "container":
        for role, why in container_reasons().items():
            if not roles[role]:
                roles[role] = f"not applicable in this node kind (container: {why})"
    return NodeSpec(
        cluster=inv.cluster.name, node=node.name, address=node.address,
        ssh_port=node.ssh_port or inv.ssh.port, ssh_user=inv.ssh.user,
        management_interface=inv.management.interface,
        os=inv.cluster.os, os_family=fam, package_manager=_package_manager(fam),
        sku=sku.name, matrix=matrix.name, driver_version=matrix.driver.version,
        driver_branch=matrix.driver.branch, driver_flavour=matrix.driver.flavour,
        components=components, services=tuple(services), kernel_modules=tuple(modules),
        kernel_cmdline=("iommu=pt",),
        blacklisted_modules=("nouveau",),
        sysctl={"vm.max_map_count": "1048576", "net.core.rmem_max": "134217728",
                "net.core.wmem_max": "134217728", "kernel.numa_balancing": "0"},
        sysctl_minimums=("net.core.rmem_max", "net.core.wmem_max", "vm.max_map_count"),
        repo=_repo(loaded), hardware=hardware, fabric=fabric, vlans=vlans, raid=raid, lustre=lustre_spec,
        nccl_conf=_nccl_conf(fabric), thresholds=thresholds, roles=roles,
        role_vars=dict(inv.role_vars), node_kind=kind,
        train_env=_train_env_index(train_env_spec(matrix, fam, train_env_build(inv)), inv),
    )


def _train_env_index(te: TrainEnvSpec | None, inv: Inventory) -> TrainEnvSpec | None:
    """With a cluster mirror (repos.mirror: air-gapped), the training environment's wheels come
    from `<mirror>/gpuctl/wheels/simple` (a tree `gpuctl mirror wheels INVENTORY DEST` writes),
    like the other files gpuctl fetches from a mirror; a cache host serving wheels overrides it
    (gpuctl.repocache.apply_cache)."""
    if te is None or not inv.repos.mirror:
        return te
    return te.model_copy(update={"index_url": inv.repos.mirror.rstrip("/") + "/gpuctl/wheels/simple"})


def train_env_knob(spec: NodeSpec, key: str) -> Any:
    """A roles/train_env knob as this node's inventory sets it (role_vars), else its default:
    where the role put the environment (`train_env_path`), its probe, … — for the checks, the
    lock read and the bench, which run outside the role's deploy."""
    return knob_value(key, spec.role_vars)


def train_env_default(key: str) -> Any:
    """A roles/train_env knob's default (its defaults.yaml), e.g. where the environment lives."""
    return defaults("train_env").get(key)


def _package_manager(os_family: str) -> Literal["apt", "dnf"]:
    return "dnf" if os_family == "rhel9" else "apt"


def _unit(value: Any, package_manager: str) -> str:
    """A service knob's unit: the value, or its entry for this package manager."""
    return str(value[package_manager] if isinstance(value, dict) else value)


def _module_name(m: Module, when: When) -> str:
    """A module as /proc/modules names it ('_' where modprobe also takes '-'): the declared
    name, else its knob's value (the name the role loads)."""
    return (m.name or str(when.knob(m.knob))).replace("-", "_")


def node_kind(inv: Inventory) -> Literal["machine", "container"]:
    """The inventory's node kind: "container" for a container lab, else "machine"."""
    return "container" if (inv.lab or {}).get("kind") == "container" else "machine"


def check_before_touching(loaded: LoadedInventory) -> None:
    """Run the matrix rules for this inventory's SKU and OS; InputError on any failure."""
    results = check_matrix(loaded.matrix.matrix, loaded.sku, (loaded.inventory.cluster.os_family,),
                           build=train_env_build(loaded.inventory))
    bad = failures(results)
    if bad:
        raise InputError(
            f"{loaded.matrix.path}: matrix {loaded.matrix.matrix.name} fails {len(bad)} rule(s) for "
            f"{loaded.sku.name} on {loaded.inventory.cluster.os}; nothing was touched",
            [f"{r.rule}: {r.reason}" for r in bad],
        )


def resolve(loaded: LoadedInventory, limit: tuple[str, ...] | list[str] = ()) -> list[NodeSpec]:
    """NodeSpecs for the selected nodes, after the matrix rules pass."""
    check_before_touching(loaded)
    specs = [resolve_node(loaded, n) for n in loaded.inventory.select(limit)]
    if loaded.inventory.repos.cache_host is None:
        return specs
    return apply_cache(loaded, specs)  # repos.cache_host: nodes fetch through the cluster's cache
