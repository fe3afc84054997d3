"""Pinned version matrices: load `matrices/<name>.yaml` into a typed model.

A matrix pins every NVIDIA component exactly (driver, fabric manager, CUDA, cuDNN,
NCCL, DCGM, OFED, GDS, Lustre client) and lists, per OS family, the packages with
their exact versions (epochs included). `gpuctl.rules` checks a matrix before any
host is touched; `gpuctl.spec` turns it into per-host package pins.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuctl.errors import InputError
from gpuctl.paths import matrices_dir
from gpuctl.validation import validate_document
from gpuctl.yamlsrc import SourceMap, load_yaml

OS_FAMILIES: tuple[str, ...] = ("ubuntu2204", "ubuntu2404", "debian12", "rhel9")
COMPONENTS: tuple[str, ...] = (
    "driver", "persistenced", "fabricmanager", "cuda", "cudnn", "nccl", "dcgm", "ofed", "gds", "lustre",
)
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
