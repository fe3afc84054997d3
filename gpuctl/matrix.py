"""Pinned version matrices: load `matrices/<name>.yaml` into a typed model.

A matrix pins every NVIDIA component exactly (driver, fabric manager, CUDA, cuDNN,
NCCL, DCGM, OFED, GDS, Lustre client) and the training environment (Python, torch
build, its CUDA runtime and NCCL wheels, the hash lock of its closure), and lists, per OS family, the packages with
their exact versions (epochs included). `gpuctl.rules` checks a matrix before any
host is touched; `gpuctl.spec` turns it into per-host package pins.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuctl.components import matrix_parts
from gpuctl.errors import InputError
from gpuctl.paths import matrices_dir
from gpuctl.validation import validate_document
from gpuctl.yamlsrc import SourceMap, load_yaml

OS_FAMILIES: tuple[str, ...] = ("ubuntu2204", "ubuntu2404", "debian12", "rhel9")
#: The matrix parts a matrix may list packages for: declared by the components that install
#: them (`Component.parts`, roles/<component>/__init__.py), in provision order.
COMPONENTS: tuple[str, ...] = matrix_parts()
OsFamily = Literal["ubuntu2204", "ubuntu2404", "debian12", "rhel9"]

# e.g. "1:4.5.2-1", "570.133.20-0ubuntu1", "2.25.1-1+cuda12.8", "3:570.133.20-1.el9"
_EXACT_VERSION = re.compile(r"^(\d+:)?[0-9][A-Za-z0-9.+~-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Package(_Strict):
    """One package pinned at one exact version (with epoch where the repo has one)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9+.-]+$")
    version: str

    @field_validator("version")
    @classmethod
    def _exact(cls, v: str) -> str:
        if not _EXACT_VERSION.fullmatch(v) or any(c in v for c in "*?[]<>=, "):
            raise ValueError(f"'{v}' is not an exact version (no wildcards, ranges or spaces)")
        return v

    @property
    def upstream(self) -> str:
        """Version without epoch and distro revision: '1:4.5.2-1' → '4.5.2'."""
        v = self.version.split(":", 1)[-1]
        return v.rsplit("-", 1)[0] if "-" in v else v

    @property
    def pin(self) -> str:
        return f"{self.name}={self.version}"


class Driver(_Strict):
    branch: str = Field(pattern=r"^\d{3}$")
    version: str
    flavour: Literal["open", "proprietary"]
    source: str


class Versioned(_Strict):
    version: str
    source: str


class Cuda(_Strict):
    version: str = Field(pattern=r"^\d+\.\d+$")
    full_version: str
    source: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


class Cudnn(_Strict):
    version: str
    cuda_major: int
    source: str


class Nccl(_Strict):
    version: str
    cuda: str
    source: str


class Dcgm(_Strict):
    version: str
    cuda_major: int
    source: str


class Ofed(_Strict):
    kind: Literal["doca", "mlnx"]
    series: str
    version: str
    source: str


class Gds(_Strict):
    version: str
    requires_ofed: bool = True
    source: str


# ------------------------------------------------------------------ training environment

# PEP 503 normalised distribution name; PEP 440 public version (+ optional local label)
_DIST_NAME = r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$"
_PEP440 = r"^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9.]+)?$"


class WheelPin(_Strict):
    """One Python distribution at one exact version."""

    name: str = Field(pattern=_DIST_NAME)
    version: str = Field(pattern=_PEP440)

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


class SourcedWheelPin(WheelPin):
    source: str


class LockedWheel(WheelPin):
    """A line of the training environment's hash lock: pip installs it only from a file
    whose sha256 is listed (`--require-hashes`); `marker` (PEP 508, e.g.
    "python_version == '3.12'") limits it to some of the matrix's Pythons."""

    marker: str = Field(default="", pattern=r"^[a-z_]+ *[=<>!]=? *'[0-9.]+'( or [a-z_]+ *[=<>!]=? *'[0-9.]+')*$|^$")
    sha256: tuple[str, ...] = Field(min_length=1)

    @field_validator("sha256")
    @classmethod
    def _hex(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for h in v:
            if not re.fullmatch(r"[0-9a-f]{64}", h):
                raise ValueError(f"'{h}' is not a sha256 (64 lowercase hex digits)")
        return v

    def lock_line(self) -> str:
        """The requirements-file line: `name==version ; marker --hash=sha256:… …`."""
        marker = f" ; {self.marker}" if self.marker else ""
        return f"{self.requirement}{marker} " + " ".join(f"--hash=sha256:{h}" for h in self.sha256)


class TorchBuild(_Strict):
    """The PyTorch build: the distribution version pip installs and the CUDA it was built
    with (`torch.version.cuda`); `torch.__version__` is `<version>+cu<XY>`."""

    version: str = Field(pattern=_PEP440)
    cuda: str = Field(pattern=r"^\d+\.\d+$")
    source: str

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])

    @property
    def local(self) -> str:
        return "cu" + self.cuda.replace(".", "")

    @property
    def runtime_version(self) -> str:
        """What `torch.__version__` prints: '2.8.0' built for CUDA 12.8 → '2.8.0+cu128'."""
        return self.version if "+" in self.version else f"{self.version}+{self.local}"

    @property
    def dist_version(self) -> str:
        """The version pip and importlib.metadata see: on PyPI without the local label."""
        return self.version


class TrainLock(_Strict):
    source: str
    packages: tuple[LockedWheel, ...] = Field(min_length=1)

    def get(self, name: str) -> LockedWheel | None:
        return next((p for p in self.packages if p.name == name), None)


class CpuTorchBuild(_Strict):
    """A CPU build of torch: `version` carries the `+cpu` local label (the wheel's METADATA
    version and `torch.__version__` alike, e.g. 2.13.0+cpu); no CUDA, no NCCL (gloo)."""

    version: str = Field(pattern=r"^\d+(\.\d+)*\+cpu$")
    source: str

    @property
    def release(self) -> str:
        """The release without the local label: '2.13.0+cpu' -> '2.13.0'."""
        return self.version.split("+")[0]


class TrainEnvCpu(_Strict):
    """The training environment's CPU build (nodes without a GPU: a CPU lab, login or head
    nodes), chosen per inventory by roles/train_env's `train_env_build: cpu`: its own torch,
    the index it comes from (PyTorch's CPU index) and its own hash lock. `pythons` are the
    CPython versions the lock's torch hashes cover (a CPU wheel is one file per Python)."""

    torch: CpuTorchBuild
    index_url: str = Field(pattern=r"^https?://[A-Za-z0-9._~:/%+-]+$")
    pythons: tuple[str, ...] = Field(min_length=1)
    lock: TrainLock

    @field_validator("pythons")
    @classmethod
    def _pys(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for py in v:
            if not re.fullmatch(r"3\.\d+", py):
                raise ValueError(f"'{py}' is not a Python version like 3.11")
        return v


class TrainEnv(_Strict):
    """The training environment (a Python venv with PyTorch) the matrix pins: the Python
    per OS family (the OS's own python3.X), the torch build, the CUDA runtime and NCCL
    wheels that build pins exactly in its metadata, optional extra packages, the index
    the wheels come from and the hash lock of the whole closure; optionally a CPU build
    (`cpu`) for nodes without a GPU."""

    python: dict[OsFamily, str]
    python_source: str
    torch: TorchBuild
    cuda_runtime: SourcedWheelPin
    nccl: SourcedWheelPin
    extra_packages: tuple[WheelPin, ...] = ()
    index_url: str = Field(default="https://pypi.org/simple", pattern=r"^https?://[A-Za-z0-9._~:/%+-]+$")
    lock: TrainLock
    cpu: TrainEnvCpu | None = None

    @field_validator("python")
    @classmethod
    def _py(cls, v: dict[str, str]) -> dict[str, str]:
        for fam, py in v.items():
            if not re.fullmatch(r"3\.\d+", py):
                raise ValueError(f"{fam}: '{py}' is not a Python version like 3.11")
        return v

    @property
    def nccl_version(self) -> str:
        return self.nccl.version


class Matrix(_Strict):
    name: str
    description: str = ""
    driver: Driver
    fabricmanager: Versioned
    cuda: Cuda
    cudnn: Cudnn
    nccl: Nccl
    dcgm: Dcgm
    ofed: Ofed | None = None
    gds: Gds | None = None
    lustre: Versioned | None = None
    packages: dict[OsFamily, dict[str, tuple[Package, ...]]]
    #: the training environment (PyTorch venv); `gpuctl.rules` fails a matrix without one
    train_env: TrainEnv | None = None

    @field_validator("packages")
    @classmethod
    def _known_components(cls, v: dict[str, dict[str, tuple[Package, ...]]]) -> dict:
        for os_family, comps in v.items():
            unknown = sorted(set(comps) - set(COMPONENTS))
            if unknown:
                raise ValueError(
                    f"{os_family}: unknown component(s) {', '.join(unknown)}; known: {', '.join(COMPONENTS)}"
                )
        return v

    def packages_for(self, os_family: str, component: str) -> tuple[Package, ...]:
        return self.packages.get(os_family, {}).get(component, ())  # type: ignore[call-overload]


class LoadedMatrix:
    """A matrix with the file it came from and its source map (for error lines)."""

    def __init__(self, matrix: Matrix, path: Path, smap: SourceMap) -> None:
        self.matrix = matrix
        self.path = path
        self.smap = smap


def matrix_names() -> list[str]:
    return sorted(p.stem for p in matrices_dir().glob("*.yaml"))


def resolve_matrix_path(name_or_path: str, relative_to: Path | None = None) -> Path:
    """A shipped matrix name ('r570-cuda12.8') or a path to a matrix file."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        p = Path(name_or_path)
        if not p.is_absolute() and relative_to is not None and (relative_to / p).is_file():
            p = relative_to / p
        return p
    if relative_to is not None:
        local = relative_to / "matrices" / f"{name_or_path}.yaml"
        if local.is_file():
            return local
    shipped = matrices_dir() / f"{name_or_path}.yaml"
    if not shipped.is_file():
        raise InputError(f"unknown matrix '{name_or_path}'; known: {', '.join(matrix_names())}")
    return shipped


@cache
def _load_cached(path: Path, mtime: float) -> LoadedMatrix:
    data, smap = load_yaml(path)
    matrix = validate_document(Matrix, data, smap, "matrix")
    return LoadedMatrix(matrix, path, smap)


def load_matrix(name_or_path: str, relative_to: Path | None = None) -> LoadedMatrix:
    path = resolve_matrix_path(name_or_path, relative_to).resolve()
    try:
        mtime = path.stat().st_mtime
    except OSError:
        raise InputError(f"{path}: no such matrix file") from None
    return _load_cached(path, mtime)
