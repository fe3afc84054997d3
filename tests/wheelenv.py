"""gpuctl as a user gets it from `pip install .`: the wheel built from this checkout,
installed in a fresh virtual environment (byte-compiled, as pip does), run from a folder
outside the checkout. Shared by the unit test of the installed stand-in repository and the
lab test that boots the lab from the installed gpuctl.

No network: the wheel is built without build isolation (hatchling is in the test
environment) and installed with ``--no-deps --no-index``; gpuctl's dependencies come from
the running interpreter's site-packages through a ``.pth`` file, which adds that folder to
``sys.path`` after the fresh environment's own (the ``.pth`` files *inside* it, such as the
checkout's editable install, are not processed, so the checkout is not importable).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class WheelEnv:
    """A fresh virtual environment with gpuctl installed from its wheel."""

    venv: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def gpuctl(self) -> Path:
        return self.venv / "bin" / "gpuctl"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment to run it with: no PYTHONPATH (the checkout stays out of reach)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.update(extra)
        return env


def _run(argv: list[str | os.PathLike[str]], cwd: Path) -> None:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def build_wheel(out_dir: Path) -> Path:
    """`pip wheel --no-deps .` of this checkout into `out_dir`; returns the wheel."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
          "-w", out_dir, CHECKOUT], cwd=out_dir)
    wheels = sorted(out_dir.glob("gpuctl-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def install_wheel(workdir: Path) -> WheelEnv:
    """Build the wheel and install it in ``workdir/venv``; returns that environment."""
    wheel = build_wheel(workdir / "dist")
    venv = workdir / "venv"
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", venv], cwd=workdir)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "gpuctl-test-dependencies.pth").write_text("".join(f"{p}\n" for p in deps))
    _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", "--no-deps",
          "--no-index", wheel], cwd=workdir)
    return WheelEnv(venv, wheel)
