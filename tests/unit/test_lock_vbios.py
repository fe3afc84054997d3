"""The lock reads the GPUs' VBIOS from the one `nvidia-smi -q -x` health and verify read, through
the one parser (`gpuctl.parsers.nvidia_smi`), not from a `--query-gpu` of its own (issue 18): one
reading of the fact, and the value it records for a GPU is the one the old query recorded."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpuctl.checks.probe import NVIDIA_SMI_FORMS
from gpuctl.inventory import load_inventory
from gpuctl.lock.read import parse_read, read_script
from gpuctl.spec import resolve
from tests.unit.lab_local import standin_gpu_node

FIX = Path(__file__).resolve().parents[1] / "data" / "fixtures" / "nvidia_smi"
LAB = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"


def _spec():
    return resolve(load_inventory(LAB))[0]


def _lock_output(vbios_section: str) -> str:
    return ("##gpuctl-lock os\nID=debian\n##gpuctl-lock kernel\n6.1.0\n##gpuctl-lock packages\n"
            f"##gpuctl-lock vbios\n{vbios_section}\n##gpuctl-lock files\n##gpuctl-lock end\n")


def test_the_lock_reads_the_vbios_with_the_command_health_and_verify_run() -> None:
    script = read_script(_spec())
    assert f"{NVIDIA_SMI_FORMS['xml'][0]} " in script and "--query-gpu" not in script


def test_a_real_h200_report_gives_the_vbios_nvidia_smi_prints() -> None:
    """The real H200 (driver 580.159.04): `-q -x` and `-q` of the same GPU both say 96.00.A5.00.1A."""
    xml = (FIX / "nvidia-smi-q-x-h200-1gpu-580.159-real.xml").read_text()
    text = (FIX / "nvidia-smi-q-h200-1gpu-580.159.txt").read_text()
    assert "VBIOS Version                                      : 96.00.A5.00.1A" in text
    assert parse_read(_lock_output(xml), _spec()).firmware == {"vbios/0": "96.00.A5.00.1A"}


def test_a_failing_nvidia_smi_records_no_vbios() -> None:
    out = _lock_output("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                       "Make sure that the latest NVIDIA driver is installed and running.")
    assert parse_read(out, _spec()).firmware == {}
    assert parse_read(_lock_output(""), _spec()).firmware == {}


def test_the_recorded_value_is_the_old_querys_for_the_same_gpus(tmp_path: Path) -> None:
    """The lab's stand-in GPUs (8, one with another VBIOS): the read script's whole run gives the
    values `--query-gpu=index,vbios_version` gives, key for key."""
    _inv, env = standin_gpu_node(tmp_path, "vbios_differs version=96.00.61.00.01\n")
    env = {**os.environ, **env}
    old = subprocess.run(["nvidia-smi", "--query-gpu=index,vbios_version", "--format=csv,noheader"], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    want = {f"vbios/{i.strip()}": v.strip() for i, v in (ln.split(",", 1) for ln in old.splitlines() if ln.strip())}
    assert len(want) == 8
    spec = _spec()
    run = subprocess.run(["bash", "-c", read_script(spec)], env=env, capture_output=True, text=True, timeout=120)
    got = parse_read(run.stdout, spec).firmware
    assert {k: v for k, v in got.items() if k.startswith("vbios/")} == want
