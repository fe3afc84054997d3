"""A lab node on this machine for CLI tests: the lab's real stand-in tools (labhw.py, run
against a hardware profile and a prepared sysroot, as in a lab guest) on PATH, and a
one-node inventory whose node is `@local`, so `gpuctl bench` runs its real scripts here.

`real_outputs_node` is the same inventory with tools that print recorded outputs of real
hardware (tests/data/fixtures) instead: the report of that run must carry no emulated mark.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import yaml

from gpuctl.lab.standin.profile import write_profile

ROOT = Path(__file__).resolve().parents[2]
LABHW = ROOT / "gpuctl" / "lab" / "standin" / "tools" / "labhw.py"
LAB_INVENTORY = ROOT / "tests" / "data" / "inventories" / "lab-placeholder.yaml"
FIX = ROOT / "tests" / "data" / "fixtures"
DRIVER = "580.95.05"
PACKAGES = {"all_reduce_perf": ("nccl-tests", "2.17.6-1"), "gpuctl-bwprobe": ("gpuctl-bwprobe", "1.0-1"),
            "gdsio": ("nvidia-gds-13-0", "13.0.1-1"), "dcgmi": ("datacenter-gpu-manager-4-core", "1:4.5.2-1")}
# recorded on real 8-GPU H100 nodes (tests/data/fixtures/nccl/SOURCES.md); no synthetic fixture here
REAL = {"all_reduce_perf": FIX / "nccl" / "nccl-allreduce-h100-p5-1node-8gpu-tagoutput-nvls-awsbatch.txt"}


def local_inventory(tmp: Path) -> Path:
    data = yaml.safe_load(LAB_INVENTORY.read_text())
    node = data["nodes"][0]
    node["address"] = "@local"
    node.pop("ssh_port", None)
    data["nodes"] = [node]
    path = tmp / "inventory.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _tool(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def standin_node(tmp: Path) -> tuple[Path, dict[str, str]]:
    """(inventory, environment) for a bench run against the lab's stand-in tools."""
    root = tmp / "node"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/libnccl.so.2").symlink_to("libnccl.so.2.27.7")
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text(DRIVER + "\n")
    (root / "profile.json").write_text(json.dumps(write_profile("gpu-01", "hgx-h100-80gb", 1)))
    (root / "faults").write_text("")
    bindir = tmp / "bin"
    bindir.mkdir()
    for tool, (package, version) in PACKAGES.items():
        info = root / f"{tool}.package.json"
        info.write_text(json.dumps({"package": package, "version": version, "upstream": version.split("-")[0]}))
        env = (f"GPUCTL_LAB_SYSROOT={root} GPUCTL_LAB_PROFILE={root}/profile.json "
               f"GPUCTL_LAB_FAULTS={root}/faults GPUCTL_LAB_PACKAGE={info}")
        _tool(bindir, tool, f'exec env {env} {sys.executable} {LABHW} {tool} "$@"\n')
    return local_inventory(tmp), _env(tmp, bindir)


def real_outputs_node(tmp: Path) -> tuple[Path, dict[str, str]]:
    """(inventory, environment) for a bench run whose tools print real recorded outputs."""
    bindir = tmp / "bin"
    bindir.mkdir()
    for tool, fixture in REAL.items():
        _tool(bindir, tool, f"cat {fixture}\n")
    return local_inventory(tmp), _env(tmp, bindir)


def _env(tmp: Path, bindir: Path) -> dict[str, str]:
    home = tmp / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "HOME": str(home), "GPUCTL_RUNS_DIR": str(tmp / "runs")}


def standin_gpu_node(tmp: Path, faults: str = "", dmesg: str = "[    1.0] Linux version 6.1\n",
                     fm_running: bool = True) -> tuple[Path, dict[str, str]]:
    """A stand-in node with its `nvidia-smi` (the lab's labhw.py with `faults`), `dmesg` and state dir:
    (inventory, environment) for health, verify and lock reads run locally."""
    inv, env = standin_node(tmp)
    bindir = Path(env["PATH"].split(":")[0])
    root = tmp / "node"
    (root / "faults").write_text(faults)
    info = root / "nvidia-smi.package.json"
    info.write_text(json.dumps({"package": "nvidia-driver", "version": "580.95.05-1", "driver_version": "580.95.05"}))
    if fm_running:
        (root / "run/nvidia-fabricmanager").mkdir(parents=True)
        (root / "run/nvidia-fabricmanager/nv-fabricmanager.pid").write_text(f"{os.getpid()}\n")
    e = (f"GPUCTL_LAB_SYSROOT={root} GPUCTL_LAB_PROFILE={root}/profile.json GPUCTL_LAB_FAULTS={root}/faults "
         f"GPUCTL_LAB_PACKAGE={info}")
    (bindir / "nvidia-smi").write_text(f'#!/bin/sh\nexec env {e} {sys.executable} {LABHW} nvidia-smi "$@"\n')
    (bindir / "nvidia-smi").chmod(0o755)
    (tmp / "dmesg.txt").write_text(dmesg)
    (bindir / "dmesg").write_text(f"#!/bin/sh\ncat {tmp / 'dmesg.txt'}\n")
    (bindir / "dmesg").chmod(0o755)
    env["GPUCTL_STATE_DIR"] = str(tmp / "state")
    return inv, env
