"""Real out-of-tree kernel modules that stand in for nvidia, nvidia_fs and lustre.

The NVIDIA kernel module cannot load in a QEMU guest (no GPU), so the lab builds a
tiny module of the same *name* and *version* against the guest kernel, inside the lab
image's rootfs via chroot (the image ships linux-headers-amd64, gcc and make). The
kernel then really loads it: ``modprobe nvidia`` works, ``lsmod`` lists it (with
nvidia_uvm/nvidia_modeset/nvidia_peermem "using" it), ``modinfo -k KVER -F version
nvidia`` and ``/sys/module/nvidia/version`` report the driver version, and
``/proc/driver/nvidia/version`` has the real first line. See README.md here.

Built modules are cached under ``<lab cache>/standin-kmod/<kver>/<kind>-<version>-<hash>/``
keyed by the C template, the module set and the kernel version.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuctl.errors import ExecutionError, InputError
from gpuctl.lab.image import guest_kernel_version
from gpuctl.lab.image import image_root as lab_image_root
from gpuctl.lab.state import cache_root

log = logging.getLogger(__name__)

_SRC = Path(__file__).with_name("kmod_src") / "standin.c.in"
_BUILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class ModuleDef:
    """One stand-in module: file name (``nvidia-uvm`` → module ``nvidia_uvm``)."""

    file: str
    license: str = "Dual MIT/GPL"
    proc_dir: str = ""        # e.g. "driver/nvidia"
    proc_file: str = ""       # e.g. "version"
    exports: bool = False
    uses: str = ""            # module whose exported symbol this one calls

    @property
    def name(self) -> str:
        return self.file.replace("-", "_")


#: The module sets per kind. The real open NVIDIA driver builds nvidia, nvidia-modeset,
#: nvidia-drm, nvidia-uvm and nvidia-peermem; nvidia-drm is left out (it needs DRM).
KINDS: dict[str, tuple[ModuleDef, ...]] = {
    "nvidia": (
        ModuleDef("nvidia", proc_dir="driver/nvidia", proc_file="version", exports=True),
        ModuleDef("nvidia-uvm", uses="nvidia"),
        ModuleDef("nvidia-modeset", uses="nvidia"),
        ModuleDef("nvidia-peermem", uses="nvidia"),
    ),
    "nvidia-fs": (
        ModuleDef("nvidia-fs", license="GPL", proc_dir="driver/nvidia-fs", proc_file="version"),
    ),
    "lustre": (
        ModuleDef("lnet", license="GPL", exports=True),
        ModuleDef("lustre", license="GPL", uses="lnet"),
    ),
}


def nvrm_line(version: str, flavour: str = "open", build_date: str = "") -> str:
    """The first line of /proc/driver/nvidia/version, as the real driver prints it."""
    kind = "NVIDIA UNIX Open Kernel Module for x86_64" if flavour == "open" else "NVIDIA UNIX x86_64 Kernel Module"
    return f"NVRM version: {kind}  {version}  Release Build  (dvs-builder@U16-I3-B03-4-3)  {build_date}"


def _c_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _proc_text(kind: str, version: str, gcc_line: str, build_date: str) -> str:
    if kind == "nvidia":
        return nvrm_line(version, "open", build_date) + "\n" + f"GCC version:  {gcc_line}\n"
    return f"version: {version}\n"


def render_source(kind: str, module: ModuleDef, version: str, gcc_line: str = "", build_date: str = "") -> str:
    """The C source of one stand-in module."""
    owns_proc = bool(module.proc_dir)
    values = {
        "MODNAME": module.name,
        "KIND": kind,
        "VERSION": version,
        "PROC_DIR": module.proc_dir,
        "PROC_FILE": module.proc_file,
        "OWNS_PROC": "1" if owns_proc else "0",
        "PROC_TEXT": _c_string(_proc_text(kind, version, gcc_line, build_date)) if owns_proc else "",
        "EXPORTS": "1" if module.exports else "0",
        "USES": "1" if module.uses else "0",
        "USES_NAME": module.uses.replace("-", "_") or "none",
        "LICENSE": module.license,
    }
    text = _SRC.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def source_hash() -> str:
    """Hash of everything that determines a module's build (template, module sets, this file)."""
    h = hashlib.sha256(_SRC.read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:12]


def _image(image_root: Path | None, kernel_version: str | None) -> tuple[Path, str]:
    if image_root is None or kernel_version is None:
        image_root = image_root or lab_image_root()
        kernel_version = kernel_version or guest_kernel_version()
    return Path(image_root), kernel_version


def kmod_cache_dir() -> Path:
    return cache_root() / "standin-kmod"


@contextlib.contextmanager
def _lock(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _chroot(root: Path, argv: list[str], timeout: float = _BUILD_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "HOME": "/root"}
    return subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)


def build_modules(
    kind: str,
    version: str,
    *,
    image_root: Path | None = None,
    kernel_version: str | None = None,
    cache_dir: Path | None = None,
) -> dict[str, Path]:
    """Build (or reuse) the stand-in modules of `kind` at `version` for the guest kernel.

    Returns module file name (``nvidia-uvm``) → path of the built ``.ko``. `image_root` and
    `kernel_version` default to the lab image's (`gpuctl.lab.image`)."""
    if kind not in KINDS:
        raise InputError(f"unknown stand-in module kind '{kind}'; known: {', '.join(KINDS)}")
    root, kver = _image(image_root, kernel_version)
    base = (cache_dir or kmod_cache_dir()) / kver
    target = base / f"{kind}-{version}-{source_hash()}"
    modules = KINDS[kind]
    wanted = {m.file: target / f"{m.file}.ko" for m in modules}
    if all(p.is_file() for p in wanted.values()):
        return wanted
    if not (root / "usr/src" / f"linux-headers-{kver}").is_dir():
        raise ExecutionError(f"no kernel headers for {kver} in {root} (usr/src/linux-headers-{kver}): "
                             "the lab image must include linux-headers-amd64")
    with _lock(base):
        if all(p.is_file() for p in wanted.values()):
            return wanted
        start = time.monotonic()
        gcc = _chroot(root, ["gcc", "-v"], timeout=60)
        gcc_line = next((ln.strip() for ln in reversed(gcc.stderr.splitlines()) if ln.startswith("gcc version")),
                        "gcc version unknown")
        build_date = time.strftime("%a %b %e %H:%M:%S UTC %Y", time.gmtime())
        (root / "tmp").mkdir(exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="gpuctl-standin-", dir=root / "tmp"))
        try:
            for m in modules:
                (work / f"{m.file}.c").write_text(render_source(kind, m, version, gcc_line, build_date))
            (work / "Kbuild").write_text("obj-m := " + " ".join(f"{m.file}.o" for m in modules) + "\n")
            inside = "/" + str(work.relative_to(root))
            proc = _chroot(root, ["make", "-C", f"/lib/modules/{kver}/build", f"M={inside}", "-j2", "modules"])
            if proc.returncode != 0:
                raise ExecutionError(f"building stand-in {kind} {version} modules for {kver} failed "
                                     f"(make exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            for m in modules:
                shutil.copy2(work / f"{m.file}.ko", partial / f"{m.file}.ko")
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info("stand-in modules %s %s for %s built in %.1f s", kind, version, kver, time.monotonic() - start)
    return wanted
