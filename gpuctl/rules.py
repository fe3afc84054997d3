"""Matrix compatibility rules, run before any host is touched.

Each rule is a small function `(ctx) -> list[RuleResult]` registered in `RULES`; the
facts it compares against (CUDA's minimum driver, NCCL builds, …) come from
`catalog/compat.yaml`, each with its source. `check_matrix` runs every rule and
returns every result, passing ones included, so `gpuctl matrix check` can print the
whole picture.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gpuctl.catalog import Sku
from gpuctl.components import required_parts
from gpuctl.matrix import OS_FAMILIES, Matrix, TrainLock
from gpuctl.paths import catalog_dir
from gpuctl.validation import validate_document
from gpuctl.yamlsrc import load_yaml

Status = Literal["pass", "fail", "warn", "n/a"]


@dataclass(frozen=True)
class RuleResult:
    rule: str
    status: Status
    reason: str


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str


class _CudaMinDriver(_Table):
    versions: dict[str, str]


class _DriverCudaMajor(_Table):
    first_branch_of_major: dict[str, int]


class _NcclBuilds(_Table):
    builds: dict[str, tuple[str, ...]]


class _CcCuda(_Table):
    first_cuda: dict[str, str]
    last_cuda: dict[str, str]


class _OfedOs(_Table):
    mlnx: dict[str, tuple[str, ...]]
    doca: dict[str, tuple[str, ...]]


class _Eol(_Table):
    dates: dict[str, dt.date]


class _TorchWheels(_Table):
    pythons: dict[str, tuple[str, ...]]


class _OsPython(_Table):
    versions: dict[str, tuple[str, ...]]


class Compat(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    cuda_min_driver: _CudaMinDriver
    driver_cuda_major: _DriverCudaMajor
    nccl_builds: _NcclBuilds
    compute_capability_cuda: _CcCuda
    ofed_os_support: _OfedOs
    branch_eol: _Eol
    torch_wheels: _TorchWheels
    os_python: _OsPython


@cache
def load_compat() -> Compat:
    data, smap = load_yaml(catalog_dir() / "compat.yaml")
    return validate_document(Compat, data, smap, "compatibility table")


def version_key(v: str) -> tuple[int, ...]:
    """'570.133.20' → (570, 133, 20); non-numeric parts are dropped."""
    out = []
    for part in v.split(":")[-1].split("-")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


@dataclass(frozen=True)
class RuleContext:
    matrix: Matrix
    compat: Compat
    sku: Sku | None
    os_families: tuple[str, ...]
    today: dt.date
    #: the training environment build an inventory asks for (roles/train_env `train_env_build`):
    #: "cuda", "cpu", or None for the matrix alone (both builds it pins are checked)
    build: str | None = None


Rule = Callable[[RuleContext], list[RuleResult]]
RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return register


def _r(name: str, ok: bool, good: str, bad: str, warn: bool = False) -> list[RuleResult]:
    if ok:
        return [RuleResult(name, "pass", good)]
    return [RuleResult(name, "warn" if warn else "fail", bad)]


def driver_supports_cuda(compat: Compat, driver: str, cuda: str) -> tuple[bool | None, str | None]:
    """(driver >= CUDA `cuda`'s minimum driver, that minimum); (None, None) when `cuda` is
    not in the table. The one judgement of "this driver runs this CUDA runtime", used for
    the toolkit and for the torch build's bundled runtime alike."""
    need = compat.cuda_min_driver.versions.get(cuda)
    if need is None:
        return None, None
    return version_key(driver) >= version_key(need), need


@rule("cuda-min-driver")
def _cuda_min_driver(c: RuleContext) -> list[RuleResult]:
    ok, need = driver_supports_cuda(c.compat, c.matrix.driver.version, c.matrix.cuda.version)
    if ok is None:
        cuda = c.matrix.cuda.version
        return [RuleResult("cuda-min-driver", "fail", f"CUDA {cuda} is not in the compatibility table")]
    have = c.matrix.driver.version
    return _r(
        "cuda-min-driver",
        bool(ok),
        f"driver {have} >= {need}, the minimum for CUDA {c.matrix.cuda.version}",
        f"CUDA {c.matrix.cuda.version} needs driver >= {need}, matrix pins {have} "
        f"({c.compat.cuda_min_driver.source})",
    )


@rule("driver-branch")
def _driver_branch(c: RuleContext) -> list[RuleResult]:
    d = c.matrix.driver
    return _r("driver-branch", d.version.split(".")[0] == d.branch,
              f"driver {d.version} is on branch R{d.branch}",
              f"driver {d.version} is not on the declared branch R{d.branch}")


@rule("fabricmanager-equals-driver")
def _fm_equals_driver(c: RuleContext) -> list[RuleResult]:
    drv, fm = c.matrix.driver.version, c.matrix.fabricmanager.version
    out = _r("fabricmanager-equals-driver", fm == drv,
             f"fabric manager {fm} == driver {drv}",
             f"fabric manager {fm} != driver {drv}: they must be identical (a mismatch stops NVSwitch systems)")
    for os_family in c.os_families:
        driver_pkgs = c.matrix.packages_for(os_family, "driver")
        for pkg in c.matrix.packages_for(os_family, "fabricmanager"):
            if pkg.upstream != drv:
                out.append(RuleResult(
                    "fabricmanager-equals-driver", "fail",
                    f"{os_family}: {pkg.pin} is not at the driver version {drv}"))
        for pkg in driver_pkgs:
            if pkg.upstream != drv:
                out.append(RuleResult("fabricmanager-equals-driver", "fail",
                                      f"{os_family}: driver package {pkg.pin} is not at {drv}"))
    return out


@rule("nccl-build-for-cuda")
def _nccl_build(c: RuleContext) -> list[RuleResult]:
    n, cuda = c.matrix.nccl, c.matrix.cuda.version
    builds = c.compat.nccl_builds.builds.get(n.version)
    if builds is None:
        return [RuleResult("nccl-build-for-cuda", "fail", f"NCCL {n.version} is not in the NCCL build table")]
    out = _r("nccl-build-for-cuda", cuda in builds and n.cuda == cuda,
             f"NCCL {n.version}+cuda{cuda} exists",
             f"NCCL {n.version} has builds for CUDA {', '.join(builds)}, not for {cuda} "
             f"(matrix says +cuda{n.cuda}; {c.compat.nccl_builds.source})")
    for os_family in c.os_families:
        for pkg in c.matrix.packages_for(os_family, "nccl"):
            if not pkg.version.endswith(f"+cuda{cuda}") or not pkg.version.startswith(n.version):
                out.append(RuleResult("nccl-build-for-cuda", "fail",
                                      f"{os_family}: {pkg.pin} is not the {n.version} +cuda{cuda} build"))
    return out


@rule("cudnn-cuda-major")
def _cudnn(c: RuleContext) -> list[RuleResult]:
    major = c.matrix.cuda.major
    out = _r("cudnn-cuda-major", c.matrix.cudnn.cuda_major == major,
             f"cuDNN {c.matrix.cudnn.version} is built for CUDA {major}",
             f"cuDNN {c.matrix.cudnn.version} is built for CUDA {c.matrix.cudnn.cuda_major}, toolkit is CUDA {major}")
    for os_family in c.os_families:
        for pkg in c.matrix.packages_for(os_family, "cudnn"):
            if not pkg.name.endswith(f"cuda-{major}"):
                out.append(RuleResult("cudnn-cuda-major", "fail",
                                      f"{os_family}: {pkg.name} is not a CUDA {major} build of cuDNN"))
    return out


def cuda_supports_cc(compat: Compat, cuda: str, cc: str) -> tuple[bool | None, str | None]:
    """(CUDA `cuda` builds for compute capability `cc`, the first CUDA that does); (None, None)
    when `cc` is not in the table. The one judgement for the toolkit and the torch build."""
    first = compat.compute_capability_cuda.first_cuda.get(cc)
    if first is None:
        return None, None
    last = compat.compute_capability_cuda.last_cuda.get(cc)
    ok = version_key(cuda) >= version_key(first) and (last is None or version_key(cuda) <= version_key(last))
    return ok, first


@rule("gpu-arch-supported")
def _arch(c: RuleContext) -> list[RuleResult]:
    if c.sku is None:
        return [RuleResult("gpu-arch-supported", "n/a", "no SKU given (--sku)")]
    cc = c.sku.gpu.compute_capability
    cuda = c.matrix.cuda.version
    ok, first = cuda_supports_cc(c.compat, cuda, cc)
    if ok is None:
        return [RuleResult("gpu-arch-supported", "fail", f"compute capability {cc} unknown to the table")]
    return _r("gpu-arch-supported", bool(ok),
              f"{c.sku.gpu.model} (sm_{cc.replace('.', '')}) is supported by CUDA {cuda}",
              f"{c.sku.gpu.model} (compute capability {cc}) needs CUDA >= {first}, matrix has {cuda}")


@rule("open-modules-blackwell")
def _open_modules(c: RuleContext) -> list[RuleResult]:
    if c.sku is None:
        return [RuleResult("open-modules-blackwell", "n/a", "no SKU given (--sku)")]
    if c.sku.gpu.architecture != "blackwell":
        return [RuleResult("open-modules-blackwell", "n/a", f"{c.sku.gpu.architecture} GPUs run either flavour")]
    return _r("open-modules-blackwell", c.matrix.driver.flavour == "open",
              "Blackwell with open kernel modules",
              "Blackwell GPUs require the open kernel modules; matrix pins the proprietary flavour")


@rule("dcgm-cuda-flavour")
def _dcgm(c: RuleContext) -> list[RuleResult]:
    branch = int(c.matrix.driver.branch)
    majors = c.compat.driver_cuda_major.first_branch_of_major
    driver_major = max((int(m) for m, b in majors.items() if branch >= b), default=0)
    out = _r("dcgm-cuda-flavour", c.matrix.dcgm.cuda_major == driver_major,
             f"DCGM cuda{c.matrix.dcgm.cuda_major} flavour matches driver R{branch} (CUDA {driver_major})",
             f"DCGM cuda{c.matrix.dcgm.cuda_major} flavour does not match driver R{branch}, "
             f"whose CUDA major is {driver_major}")
    for os_family in c.os_families:
        for pkg in c.matrix.packages_for(os_family, "dcgm"):
            if "-cuda" in pkg.name and not pkg.name.endswith(f"-cuda{c.matrix.dcgm.cuda_major}"):
                out.append(RuleResult("dcgm-cuda-flavour", "fail",
                                      f"{os_family}: {pkg.name} is not the cuda{c.matrix.dcgm.cuda_major} flavour"))
    return out


@rule("gds-requires-ofed")
def _gds(c: RuleContext) -> list[RuleResult]:
    if c.matrix.gds is None:
        return [RuleResult("gds-requires-ofed", "n/a", "matrix pins no GDS")]
    return _r("gds-requires-ofed", not c.matrix.gds.requires_ofed or c.matrix.ofed is not None,
              "GDS with OFED pinned", "GDS (nvidia-fs) needs OFED/DOCA-OFED, and the matrix pins none")


@rule("ofed-supports-os")
def _ofed_os(c: RuleContext) -> list[RuleResult]:
    o = c.matrix.ofed
    if o is None:
        return [RuleResult("ofed-supports-os", "n/a", "matrix pins no OFED")]
    table = c.compat.ofed_os_support.doca if o.kind == "doca" else c.compat.ofed_os_support.mlnx
    supported = table.get(o.series)
    if supported is None:
        return [RuleResult("ofed-supports-os", "fail", f"{o.kind.upper()}-OFED {o.series} is not in the support table")]
    out = []
    for os_family in c.os_families:
        out += _r("ofed-supports-os", os_family in supported,
                  f"{o.kind.upper()}-OFED {o.version} supports {os_family}",
                  f"{o.kind.upper()}-OFED {o.version} does not support {os_family} "
                  f"(supported: {', '.join(supported)})")
    return out


@rule("packages-pinned")
def _pinned(c: RuleContext) -> list[RuleResult]:
    out = []
    for os_family in c.os_families:
        comps = c.matrix.packages.get(os_family)  # type: ignore[call-overload]
        if not comps:
            out.append(RuleResult("packages-pinned", "fail", f"no packages listed for {os_family}"))
            continue
        for comp in required_parts():
            if not comps.get(comp):
                out.append(RuleResult("packages-pinned", "fail", f"{os_family}: component {comp} lists no package"))
        if not out:
            out.append(RuleResult("packages-pinned", "pass", f"{os_family}: every package pinned exactly"))
    return out


@rule("branch-end-of-life")
def _eol(c: RuleContext) -> list[RuleResult]:
    eol = c.compat.branch_eol.dates.get(c.matrix.driver.branch)
    if eol is None:
        return [RuleResult("branch-end-of-life", "warn", f"no end-of-life date known for R{c.matrix.driver.branch}")]
    return _r("branch-end-of-life", c.today <= eol,
              f"R{c.matrix.driver.branch} supported until {eol}",
              f"R{c.matrix.driver.branch} reached end of life on {eol}: plan a move to a supported branch",
              warn=True)


# ------------------------------------------------------------ training environment


def _no_train_env(name: str, c: RuleContext) -> list[RuleResult] | None:
    if c.matrix.train_env is None:
        return [RuleResult(name, "fail", "matrix pins no training environment (train_env: python, torch, "
                                         "cuda_runtime, nccl, lock)")]
    return None


#: the rules about the CUDA build's runtime, driver, GPU architecture and bundled NCCL
CUDA_BUILD_RULES = ("torch-cuda-major", "torch-driver", "torch-gpu-arch", "torch-nccl-vs-system")


def _cpu_build_na(name: str, c: RuleContext) -> list[RuleResult]:
    """A CUDA-build rule on the CPU build: not applicable (never a pass). For an inventory that
    asks for the CPU build it is the rule's one result; for the matrix alone it is reported
    beside the CUDA build's result when the matrix pins a CPU build too."""
    te = c.matrix.train_env
    if te is None or te.cpu is None or c.build == "cuda":
        return []
    return [RuleResult(name, "n/a", f"train_env.cpu: torch {te.cpu.torch.version} is a CPU build (no CUDA runtime, "
                                    "no NCCL: gloo); this rule is about the CUDA build")]


def _cuda_rule(fn: Rule) -> Rule:
    """Run a CUDA-build rule for the CUDA build only; the CPU build gets `_cpu_build_na`."""
    name = next(n for n in CUDA_BUILD_RULES if fn.__name__ == "_" + n.replace("-", "_"))

    def wrapped(c: RuleContext) -> list[RuleResult]:
        if (missing := _no_train_env(name, c)) is not None:
            return missing
        if c.build == "cpu":
            return _cpu_build_na(name, c)
        return fn(c) + _cpu_build_na(name, c)
    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


@rule("torch-cuda-major")
@_cuda_rule
def _torch_cuda_major(c: RuleContext) -> list[RuleResult]:
    te = c.matrix.train_env
    assert te is not None
    t, major = te.torch, c.matrix.cuda.major
    out = _r("torch-cuda-major", t.cuda_major == major,
             f"torch {t.runtime_version} is built for CUDA {t.cuda}, toolkit is CUDA {c.matrix.cuda.version}",
             f"torch {t.runtime_version} is built for CUDA {t.cuda} (major {t.cuda_major}), the matrix's "
             f"toolkit is CUDA {c.matrix.cuda.version} (major {major})")
    if ".".join(te.cuda_runtime.version.split(".")[:2]) != t.cuda:
        out.append(RuleResult("torch-cuda-major", "fail", f"{te.cuda_runtime.requirement} is not the CUDA {t.cuda} "
                                                          f"runtime torch {t.runtime_version} is built with"))
    for pin in (te.cuda_runtime, te.nccl):
        # the CUDA 12 wheels are named *-cu12; CUDA 13's runtime wheels carry no suffix, NCCL's -cu13
        tagged = pin.name.rsplit("-", 1)[-1]
        if tagged.startswith("cu") and tagged[2:].isdigit() and int(tagged[2:]) != t.cuda_major:
            out.append(RuleResult("torch-cuda-major", "fail",
                                  f"{pin.requirement} is a CUDA {tagged[2:]} wheel; torch is built for CUDA {t.cuda}"))
    return out


@rule("torch-driver")
@_cuda_rule
def _torch_driver(c: RuleContext) -> list[RuleResult]:
    te = c.matrix.train_env
    assert te is not None
    t, d = te.torch, c.matrix.driver
    ok, need = driver_supports_cuda(c.compat, d.version, t.cuda)
    if ok is None:
        return [RuleResult("torch-driver", "fail", f"torch {t.runtime_version}: CUDA {t.cuda} is not in the "
                                                   "minimum-driver table")]
    return _r("torch-driver", bool(ok),
              f"torch {t.runtime_version} (CUDA {t.cuda}) runs on driver {d.version} (>= {need})",
              f"torch {t.runtime_version} brings the CUDA {t.cuda} runtime, which needs driver >= {need}; the "
              f"matrix pins driver {d.version} (branch R{d.branch}) ({c.compat.cuda_min_driver.source})")


@rule("torch-gpu-arch")
@_cuda_rule
def _torch_gpu_arch(c: RuleContext) -> list[RuleResult]:
    if c.sku is None:
        return [RuleResult("torch-gpu-arch", "n/a", "no SKU given (--sku)")]
    te = c.matrix.train_env
    assert te is not None
    cc = c.sku.gpu.compute_capability
    ok, first = cuda_supports_cc(c.compat, te.torch.cuda, cc)
    if ok is None:
        return [RuleResult("torch-gpu-arch", "fail", f"compute capability {cc} unknown to the table")]
    sm = "sm_" + cc.replace(".", "")
    return _r("torch-gpu-arch", bool(ok),
              f"torch {te.torch.runtime_version} (CUDA {te.torch.cuda}) runs on {c.sku.gpu.model} ({sm})",
              f"{c.sku.gpu.model} (compute capability {cc}) needs a CUDA >= {first} build; torch "
              f"{te.torch.runtime_version} is built with CUDA {te.torch.cuda} "
              f"({c.compat.compute_capability_cuda.source})")


@rule("torch-python-os")
def _torch_python_os(c: RuleContext) -> list[RuleResult]:
    if (missing := _no_train_env("torch-python-os", c)) is not None:
        return missing
    te = c.matrix.train_env
    assert te is not None
    cpu = _cpu_python_os(c) if te.cpu is not None and c.build != "cuda" else []
    if c.build == "cpu":
        return cpu or [RuleResult("torch-python-os", "fail", "role_vars.train_env_build is cpu; the matrix pins no "
                                                             "train_env.cpu")]
    return _cuda_python_os(c) + cpu


def _cpu_python_os(c: RuleContext) -> list[RuleResult]:
    """The CPU build's lock holds a torch wheel for each OS family's Python (a fail for an
    inventory that asks for the CPU build, a warning for the matrix alone)."""
    te = c.matrix.train_env
    assert te is not None and te.cpu is not None
    out: list[RuleResult] = []
    for fam in c.os_families:
        py = te.python.get(fam)  # type: ignore[call-overload]
        if py is None:
            continue  # the CUDA build's check names it (and it is the same Python)
        if py in te.cpu.pythons:
            out.append(RuleResult("torch-python-os", "pass", f"{fam}: train_env.cpu locks torch {te.cpu.torch.version} "
                                                             f"for Python {py}"))
        else:
            out.append(RuleResult("torch-python-os", "fail" if c.build == "cpu" else "warn",
                                  f"{fam}: train_env.cpu locks torch {te.cpu.torch.version} for Python "
                                  f"{', '.join(te.cpu.pythons)} only, not {py} (add its wheel's sha256)"))
    return out


def _cuda_python_os(c: RuleContext) -> list[RuleResult]:
    te = c.matrix.train_env
    assert te is not None
    t = te.torch
    shipped = c.compat.torch_wheels.pythons.get(t.version.split("+")[0])
    if shipped is None:
        return [RuleResult("torch-python-os", "fail", f"torch {t.version} is not in the torch wheel table "
                                                      f"({c.compat.torch_wheels.source})")]
    out: list[RuleResult] = []
    for fam in c.os_families:
        py = te.python.get(fam)  # type: ignore[call-overload]
        if py is None:
            out.append(RuleResult("torch-python-os", "fail", f"{fam}: train_env.python names no Python for it"))
            continue
        os_has = c.compat.os_python.versions.get(fam, ())
        if py not in os_has:
            out.append(RuleResult("torch-python-os", "fail",
                                  f"{fam}: the OS ships Python {', '.join(os_has) or 'none known'}, not {py} "
                                  f"({c.compat.os_python.source})"))
        elif py not in shipped:
            out.append(RuleResult("torch-python-os", "fail",
                                  f"{fam}: torch {t.version} has no wheel for Python {py} (it has "
                                  f"{', '.join(shipped)})"))
        else:
            out.append(RuleResult("torch-python-os", "pass", f"{fam}: torch {t.version} wheel for Python {py}"))
    return out


def _major_minor(v: str) -> tuple[int, ...]:
    return version_key(v)[:2]


@rule("torch-nccl-vs-system")
@_cuda_rule
def _torch_nccl_vs_system(c: RuleContext) -> list[RuleResult]:
    te = c.matrix.train_env
    assert te is not None
    system, bundled = c.matrix.nccl.version, te.nccl.version
    names = f"system NCCL {system}+cuda{c.matrix.nccl.cuda} (nccl-tests), torch's NCCL {te.nccl.requirement}"
    if _major_minor(system) == _major_minor(bundled):
        return [RuleResult("torch-nccl-vs-system", "pass", f"{names}: same major.minor")]
    return [RuleResult("torch-nccl-vs-system", "warn",
                       f"{names}: different major.minor, so nccl-tests and the customer's PyTorch jobs measure "
                       "different libraries")]


@rule("train-env-lock")
def _train_lock(c: RuleContext) -> list[RuleResult]:
    if (missing := _no_train_env("train-env-lock", c)) is not None:
        return missing
    te = c.matrix.train_env
    assert te is not None
    cpu = _cpu_lock(c) if te.cpu is not None and c.build != "cuda" else []
    if c.build == "cpu":
        return cpu or [RuleResult("train-env-lock", "fail", "role_vars.train_env_build is cpu; the matrix pins no "
                                                            "train_env.cpu")]
    return _cuda_lock(c) + cpu


def _lock_problems(lock: TrainLock, wanted: list[tuple[str, str]], where: str) -> list[RuleResult]:
    out: list[RuleResult] = []
    names = [p.name for p in lock.packages]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        out.append(RuleResult("train-env-lock", "fail", f"{where} lists {dup} more than once"))
    for name, version in wanted:
        locked = lock.get(name)
        if locked is None:
            out.append(RuleResult("train-env-lock", "fail", f"{name}=={version} is pinned but not in {where}"))
        elif locked.version != version:
            out.append(RuleResult("train-env-lock", "fail", f"{name}=={version} is pinned, {where} has "
                                                            f"{locked.requirement}"))
    return out


def _cpu_lock(c: RuleContext) -> list[RuleResult]:
    te = c.matrix.train_env
    assert te is not None and te.cpu is not None
    wanted = [("torch", te.cpu.torch.version)] + [(p.name, p.version) for p in te.extra_packages]
    out = _lock_problems(te.cpu.lock, wanted, "train_env.cpu.lock")
    return out or [RuleResult("train-env-lock", "pass", f"CPU lock of {len(te.cpu.lock.packages)} distributions "
                                                        f"with hashes holds torch=={te.cpu.torch.version}")]


def _cuda_lock(c: RuleContext) -> list[RuleResult]:
    te = c.matrix.train_env
    assert te is not None
    out: list[RuleResult] = []
    names = [p.name for p in te.lock.packages]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        out.append(RuleResult("train-env-lock", "fail", f"lock lists {dup} more than once"))
    wanted = [("torch", te.torch.dist_version), (te.cuda_runtime.name, te.cuda_runtime.version),
              (te.nccl.name, te.nccl.version)] + [(p.name, p.version) for p in te.extra_packages]
    for name, version in wanted:
        locked = te.lock.get(name)
        if locked is None:
            out.append(RuleResult("train-env-lock", "fail", f"{name}=={version} is pinned but not in train_env.lock"))
        elif locked.version != version:
            out.append(RuleResult("train-env-lock", "fail",
                                  f"train_env pins {name}=={version}, its lock has {locked.requirement}"))
    if not out:
        out.append(RuleResult("train-env-lock", "pass",
                              f"lock of {len(names)} distributions with hashes holds torch=={te.torch.dist_version}, "
                              f"{te.cuda_runtime.requirement}, {te.nccl.requirement}"))
    return out


def check_matrix(
    matrix: Matrix,
    sku: Sku | None = None,
    os_families: tuple[str, ...] | None = None,
    today: dt.date | None = None,
    build: str | None = None,
) -> list[RuleResult]:
    """Run every rule; return every result (pass, warn, fail, n/a). `build`: the training
    environment build an inventory asks for (None: every build the matrix pins)."""
    families = os_families or tuple(f for f in OS_FAMILIES if f in matrix.packages)
    ctx = RuleContext(matrix, load_compat(), sku, families, today or dt.date.today(), build)
    results: list[RuleResult] = []
    for fn in RULES.values():
        results.extend(fn(ctx))
    return results


def failures(results: list[RuleResult]) -> list[RuleResult]:
    return [r for r in results if r.status == "fail"]
