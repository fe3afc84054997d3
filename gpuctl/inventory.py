"""The inventory: one YAML file describing a cluster, validated into a typed model.

`load_inventory(path)` parses the file (remembering lines), validates the schema
(unknown keys are errors, with "did you mean"), checks the SKU and matrix named, then runs
the semantic rules (`gpuctl.inventory_semantics`): the shared model's (unique names and
addresses inside their CIDRs, racks and their power budget, thresholds, role knobs) and then
each component's own, declared beside it (roles/<component>/validate.py: the fabric and
VLANs, RAID and Lustre settings, the package cache host, handover accounts), and raises one
`InputError` listing every problem with `file:line: field: message`.
Warnings (e.g. CPU memory below the SKU's minimum) are returned, not raised.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuctl.boundary import catalog_name_problem, is_host, length_problem, mount_problem
from gpuctl.catalog import Figure, Sku, Threshold, load_sku
from gpuctl.errors import InputError
from gpuctl.inventory_semantics import semantic_problems
from gpuctl.knobs import MountOptions
from gpuctl.matrix import LoadedMatrix, load_matrix
from gpuctl.validation import Problem, validate_collecting
from gpuctl.yamlsrc import SourceMap, load_yaml_text, parse_yaml

OS_NAMES: dict[str, str] = {
    "ubuntu-22.04": "ubuntu2204",
    "ubuntu-24.04": "ubuntu2404",
    "debian-12": "debian12",
    "rocky-9": "rhel9",
    "rhel-9": "rhel9",
}

# Every pattern here is used with fullmatch (re.fullmatch / pydantic's anchored patterns):
# `re.match(...$)` also matched before a final newline (issue 17). No control character
# reaches these checks at all: gpuctl.boundary refuses them in every string first.
_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
_IFNAME = r"^[A-Za-z0-9_.:-]{1,15}$"
# shell safety (issue 12): values that reach commands on the nodes
_IFNAME_RE = re.compile(r"(?!\.{1,2}\Z)[A-Za-z0-9_.:-]{1,15}")  # Linux IFNAMSIZ 16 incl. NUL; no / or space
_HCA_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")  # mlx5_0, rxe0, irdma1
_SAFE_PATH_RE = re.compile(r"/[A-Za-z0-9_.+@=/-]*")
_SAFE_KEY_PATH_RE = re.compile(r"~?[A-Za-z0-9_.+@=/-]+")
_POSIX_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_KnobValue = str | int | float | bool | list[str]  # a role_vars value, or an entry of a map knob


def _check(regex: re.Pattern[str], what: str, v: str | None) -> str | None:
    if v is not None and (".." in v.split("/") if what.endswith("path") else False):
        raise ValueError(f"must be a {what} without '..'")
    if v is not None and not regex.fullmatch(v):
        raise ValueError(f"{v!r} is not a safe {what} (shell metacharacters, spaces or quotes are refused)")
    return v
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cluster(_Strict):
    name: str = Field(pattern=_NAME)
    sku: str
    matrix: str
    os: Literal["ubuntu-22.04", "ubuntu-24.04", "debian-12", "rocky-9", "rhel-9"]

    @field_validator("sku", "matrix")
    @classmethod
    def _catalog_name(cls, v: str, info: Any) -> str:
        problem = catalog_name_problem(v, "SKU" if info.field_name == "sku" else "matrix")
        if problem:
            raise ValueError(problem)
        return v

    @property
    def os_family(self) -> str:
        return OS_NAMES[self.os]


class Ssh(_Strict):
    user: str = "root"
    key: str | None = None
    port: int = Field(default=22, ge=1, le=65535)
    known_hosts: str | None = None
    strict_host_keys: bool = False
    connect_timeout_s: int = Field(default=10, ge=1, le=300)

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        return _check(_POSIX_USER_RE, "POSIX user name", v) or v

    @field_validator("key", "known_hosts")
    @classmethod
    def _keypath(cls, v: str | None) -> str | None:
        too_long = v and length_problem(v, "key path")
        if too_long:
            raise ValueError(too_long)
        return _check(_SAFE_KEY_PATH_RE, "key path", v)


class Repos(_Strict):
    mirror: str | None = Field(default=None, description="URL of the cluster's NVIDIA repository mirror")
    apt_proxy: str | None = Field(default=None, description="HTTP proxy/cache for the OS packages")
    offline: bool = False
    cache_host: str | None = Field(default=None, description="node that runs the cluster's package cache "
                                   "(apt-cacher-ng); the other nodes fetch through it")
    cache_address: str | None = Field(default=None, description="IP address or host name the other nodes reach "
                                      "the cache host on (default: its address)")
    keyring_file: str | None = Field(default=None, description="signing key file name at the repo root")
    keyring_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

    @field_validator("mirror", "apt_proxy")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"(https?|file)://\S+", v):
            raise ValueError("must be an http(s):// or file:// URL")
        # URL characters only, none a shell gives meaning to ($ ` ' " ; & | < > \ ( ) space)
        if v is not None and not re.fullmatch(r"[A-Za-z0-9._~:/?#\[\]@!%+,=*-]+", v):
            raise ValueError("has a character no repository URL needs ($, `, quotes, ;, &, |, <, >, \\, parentheses); "
                             "percent-encode it")
        return v

    @field_validator("keyring_file")
    @classmethod
    def _keyring(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", v):
            raise ValueError("must be a file name (letters, digits, . _ + -)")
        return v

    @field_validator("cache_address")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        if v is not None and not is_host(v):
            raise ValueError("must be an IP address or a host name (no scheme, port or path)")
        return v


class Management(_Strict):
    """The network gpuctl reaches the nodes on; its interface is never reconfigured."""

    interface: str | None = Field(default=None, pattern=_IFNAME)
    cidr: ipaddress.IPv4Network | None = None


class IpoibSettings(_Strict):
    cidr: ipaddress.IPv4Network
    mode: Literal["connected", "datagram"] = "datagram"
    mtu: int | None = Field(default=None, ge=1280, le=65520)


class RoceSettings(_Strict):
    cidr: ipaddress.IPv4Network
    mtu: int = Field(default=4200, ge=1500, le=9216)
    gid_index: int | Literal["auto"] = "auto"
    traffic_class: int = Field(default=106, ge=0, le=255)
    # optional, a cross-check only: NCCL marks its traffic with traffic_class, whose top 6 bits
    # are the DSCP; the inventory refuses a dscp that is not traffic_class >> 2
    dscp: int | None = Field(default=None, ge=0, le=63)
    pfc_priority: int = Field(default=3, ge=0, le=7)
    ecn: bool = True


class Fabric(_Strict):
    type: Literal["infiniband", "roce", "none"]
    rate_gbps: int | None = None
    hcas_per_node: int = Field(default=0, ge=0, le=16)
    hcas: list[str] | None = Field(default=None, description="RDMA device names, default mlx5_0…")
    interfaces: list[str] | None = Field(default=None, description="netdevs, default ib0… for IB")
    ipoib: IpoibSettings | None = None
    roce: RoceSettings | None = None
    soft_roce: bool = Field(default=False, description="lab only: create rdma_rxe devices on the interfaces")

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, v: list[str] | None) -> list[str] | None:
        for x in v or []:
            _check(_HCA_RE, "RDMA device name (like mlx5_0)", x)
        return v

    @field_validator("interfaces")
    @classmethod
    def _ifaces(cls, v: list[str] | None) -> list[str] | None:
        for x in v or []:
            _check(_IFNAME_RE, "interface name (1-15 of A-Z a-z 0-9 _ . : -)", x)
        return v


class Vlan(_Strict):
    id: int = Field(ge=1, le=4094)
    parent: str = Field(pattern=_IFNAME)
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,14}$")
    cidr: ipaddress.IPv4Network
    mtu: int | None = Field(default=None, ge=576, le=9216)


class Raid(_Strict):
    level: Literal[0, 1, 10]
    devices: Literal["auto"] | list[str] = "auto"
    chunk_kib: int = Field(default=512, ge=4, le=65536)
    fs: Literal["xfs", "ext4"] = "xfs"
    mount: str = "/raid"
    name: str = Field(default="md0", pattern=r"^md[0-9]+$")
    wipe: list[str] = Field(default_factory=list, description="devices that may be wiped with --allow-wipe")

    @field_validator("mount")
    @classmethod
    def _abs(cls, v: str) -> str:
        problem = mount_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("devices", "wipe")
    @classmethod
    def _devs(cls, v: Any) -> Any:
        for x in v if isinstance(v, list) else []:
            _check(_SAFE_PATH_RE, "device path", x)
        return v


class Lustre(_Strict):
    mgs_nids: list[str] = Field(min_length=1)
    fsname: str = Field(pattern=r"^[A-Za-z0-9_-]{1,8}$")
    mount: str = "/lustre"
    lnet: str
    mount_options: str = "flock,_netdev"

    @field_validator("mount")
    @classmethod
    def _mount(cls, v: str) -> str:
        problem = mount_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("mount_options")
    @classmethod
    def _opts(cls, v: str) -> str:
        problem = MountOptions().problem(v)
        if problem:
            raise ValueError(problem)
        return v


class Storage(_Strict):
    raid: Raid | None = None
    lustre: Lustre | None = None


class Rack(_Strict):
    name: str = Field(pattern=_NAME)
    power_kw: float = Field(gt=0)
    cooling: Literal["air", "liquid"] = "air"


class Node(_Strict):
    name: str = Field(pattern=_NAME)
    address: str
    ssh_port: int | None = Field(default=None, ge=1, le=65535)
    rack: str | None = None
    fabric_ips: list[ipaddress.IPv4Address] = Field(default_factory=list)
    vlan_ips: dict[int, ipaddress.IPv4Address] = Field(default_factory=dict)
    cpu_memory_gib: float | None = Field(default=None, gt=0)

    @field_validator("fabric_ips", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class Account(_Strict):
    name: str = Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")
    ssh_keys: list[str] = Field(min_length=1)
    sudo: bool = True


class Handover(_Strict):
    accounts: list[Account] = Field(default_factory=list)
    remove_provider_key: bool = False


class HardwareOverrides(_Strict):
    """Per-cluster replacements for SKU hardware expectations, each with its reason."""

    min_cpu_memory_gib: Figure | None = None
    nvme_count: Figure | None = None


class PreflightSettings(_Strict):
    """Overrides of the preflight limits in catalog/health.yaml, each with a reason."""

    min_free_root_gib: float | None = Field(default=None, ge=0)
    source: str | None = None


class TrainingBenchSettings(_Strict):
    """How big and how patient the bench's training run is (`gpuctl bench`, every suite that
    trains: each node's own run and the run across nodes). Unset: the suite's figures. For a
    cluster whose CPUs are slow or emulated (CPU nodes, QEMU without KVM) or whose jobs need
    longer: the judging stays the same (the loss must fall, every rank must agree)."""

    size: Literal["small", "tiny"] | None = Field(
        default=None, description="the learning run's shape (train_smoke.py SIZES); tiny: ~240x fewer FLOPs per step")
    model: Literal["gpt", "llama"] | None = None
    steps: int | None = Field(default=None, ge=10, le=100_000, description="learning steps (the first 5 are warm-up)")
    cpu_ranks_per_node: int | None = Field(
        default=None, ge=1, le=256, description="ranks per node where torch has no GPU (gloo), in both runs")
    timeout_s: int | None = Field(
        default=None, ge=60, le=86_400, description="each node's own run, and each launcher of the run across nodes")
    rdzv_timeout_s: int | None = Field(default=None, ge=10, le=86_400, description="c10d join timeout")
    step_timeout_s: int | None = Field(
        default=None, ge=10, le=86_400, description="the process group's timeout: a collective waiting longer fails")
    source: str | None = Field(default=None, description="why these figures (e.g. which run measured them)")

    @model_validator(mode="after")
    def _bounds_nest(self) -> TrainingBenchSettings:
        # a launcher stopped before its rendezvous or a collective could time out names no node
        for inner in ("rdzv_timeout_s", "step_timeout_s"):
            value = getattr(self, inner)
            if value is not None and self.timeout_s is not None and value >= self.timeout_s:
                raise ValueError(f"{inner} ({value}) must be below timeout_s ({self.timeout_s}): the run would be "
                                 "stopped before its own timeout could name the node at fault")
        return self


class BenchSettings(_Strict):
    """Per-cluster settings of `gpuctl bench`."""

    training: TrainingBenchSettings = TrainingBenchSettings()


class ThresholdOverride(Threshold):
    """A per-cluster threshold that replaces the SKU's; its source says why."""


class Inventory(_Strict):
    cluster: Cluster
    ssh: Ssh = Ssh()
    repos: Repos = Repos()
    management: Management = Management()
    fabric: Fabric = Fabric(type="none")
    vlans: list[Vlan] = Field(default_factory=list)
    storage: Storage = Storage()
    racks: list[Rack] = Field(default_factory=list)
    nodes: list[Node] = Field(min_length=1)
    thresholds: dict[str, ThresholdOverride] = Field(default_factory=dict)
    hardware: HardwareOverrides = HardwareOverrides()
    handover: Handover = Handover()
    preflight: PreflightSettings = PreflightSettings()
    bench: BenchSettings = BenchSettings()
    role_vars: dict[str, _KnobValue | dict[str, _KnobValue]] = Field(
        default_factory=dict, description="overrides of roles/<role>/defaults.yaml knobs for this cluster")
    lab: dict[str, Any] | None = Field(default=None, description="written by `gpuctl lab up`")

    def select(self, limit: tuple[str, ...] | list[str] = ()) -> list[Node]:
        """Nodes whose name matches any of the globs (all nodes when none given)."""
        if not limit:
            return list(self.nodes)
        chosen = [n for n in self.nodes if any(fnmatch.fnmatchcase(n.name, p) for p in limit)]
        if not chosen:
            raise InputError(f"--limit {' '.join(limit)} matches no node; nodes: "
                             f"{', '.join(n.name for n in self.nodes)}")
        return chosen

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise InputError(f"no node named '{name}'; nodes: {', '.join(n.name for n in self.nodes)}")


@dataclass
class LoadedInventory:
    """A validated inventory with everything resolved from it."""

    inventory: Inventory
    path: Path
    smap: SourceMap
    sku: Sku
    matrix: LoadedMatrix
    warnings: list[str] = field(default_factory=list)
    text: str = ""

    @property
    def base_dir(self) -> Path:
        return self.path.parent


def validate_inventory_data(data: Any, smap: SourceMap, base_dir: Path) -> LoadedInventory:
    """Schema + semantic validation of already-parsed data (used by tests and lab).

    First the typed boundary (in validate_collecting): a control character in any string of
    the document (any field, any knob, at any depth, keys included) refuses the file before
    any value is interpreted."""
    model, problems = validate_collecting(Inventory, data, smap, "inventory")
    if model is None:
        raise InputError(f"{smap.file}: {len(problems)} problem(s) in this inventory", [str(p) for p in problems])
    inv = model
    sku: Sku | None = None
    try:
        sku = load_sku(inv.cluster.sku)
    except InputError as exc:
        problems.append(Problem(smap.where(("cluster", "sku")), ("cluster", "sku"), str(exc)))
    matrix: LoadedMatrix | None = None
    try:
        matrix = load_matrix(inv.cluster.matrix, relative_to=base_dir)
    except InputError as exc:
        problems.append(Problem(smap.where(("cluster", "matrix")), ("cluster", "matrix"), str(exc)))
    if matrix is not None and inv.cluster.os_family not in matrix.matrix.packages:
        problems.append(Problem(smap.where(("cluster", "os")), ("cluster", "os"),
                                f"matrix {matrix.matrix.name} has no packages for {inv.cluster.os} "
                                f"(has: {', '.join(matrix.matrix.packages)})"))
    problems += semantic_problems(inv, smap, sku)
    problems.sort(key=lambda p: smap.line_of(p.path) or 0)
    errors = [str(p) for p in problems if not p.warning]
    warnings = [str(p) for p in problems if p.warning]
    if errors:
        raise InputError(f"{smap.file}: {len(errors)} problem(s) in this inventory", errors + warnings)
    assert sku is not None and matrix is not None
    return LoadedInventory(inv, Path(smap.file), smap, sku, matrix, warnings)


def load_inventory(path: str | Path) -> LoadedInventory:
    """Read, validate and resolve an inventory file; InputError lists every problem."""
    p = Path(path)
    data, smap, text = load_yaml_text(p, what="inventory")  # read once: a FIFO or a swapped file cannot differ
    loaded = validate_inventory_data(data, smap, p.resolve().parent)
    loaded.path = p
    loaded.text = text
    return loaded


def load_inventory_text(text: str, name: str = "<inventory>", base_dir: Path | None = None) -> LoadedInventory:
    data, smap = parse_yaml(text, name)
    loaded = validate_inventory_data(data, smap, base_dir or Path.cwd())
    loaded.text = text
    return loaded
