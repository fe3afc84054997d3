"""The lab's training environment (issue 16, item 7), without a lab: on container nodes the
training rendezvous and gloo use the management network (their fabric addresses never exist:
the network role is not applicable there); the `training` suite runs the training alone; the
stand-in of PyTorch's CPU index is built from a local torch wheel checked against the lock;
`lab up --train-env` switches the written inventory to the CPU build; the access log counts
bytes under a path prefix."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest
import yaml

from gpuctl.bench import suites
from gpuctl.errors import ExecutionError
from gpuctl.inventory import load_inventory, load_inventory_text
from gpuctl.lab import trainenv
from gpuctl.lab.netcache import bytes_served
from gpuctl.matrix import LockedWheel
from gpuctl.paths import inventories_dir
from gpuctl.spec import resolve

LAB = (inventories_dir() / "lab.yaml").read_text()


def _specs(kind: str | None):  # type: ignore[no-untyped-def]
    text = LAB + (f"lab: {{kind: {kind}}}\n" if kind else "")
    return resolve(load_inventory_text(text, "lab.yaml", inventories_dir()))


def test_container_nodes_rendezvous_and_gloo_on_the_management_network() -> None:
    specs = _specs("container")
    head = specs[0]
    assert head.fabric.ports and head.fabric.ports[0].address  # the inventory names fabric addresses ...
    assert head.roles["network"].startswith("not applicable in this node kind")  # ... never configured here
    assert suites.rdzv_endpoint(head) == f"{head.address}:{suites.TRAIN_RDZV_PORT}"
    assert suites.mpi_host(specs[1]) == specs[1].address
    env = suites.training_env(specs[1], specs)
    assert env["GLOO_SOCKET_IFNAME"] == "eth0" and env["GPUCTL_NODE"] == specs[1].node
    assert suites.mpi_networks(specs) == []


def test_machine_nodes_keep_the_fabric() -> None:
    specs = _specs(None)
    assert suites.rdzv_endpoint(specs[0]) == f"192.168.50.11:{suites.TRAIN_RDZV_PORT}"
    assert suites.training_env(specs[0], specs)["GLOO_SOCKET_IFNAME"] == "eth1"


def test_the_training_suite_runs_the_training_alone() -> None:
    s = suites.SUITES["training"]
    assert s.training and s.training_multi_node
    assert not (s.nccl_tests or s.multi_node or s.bwprobe or s.ib or s.fio or s.gdsio or s.dcgm)


def _wheel(name: str, version: str, tag: str) -> tuple[str, bytes]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\nVersion: {version}\n")
    return f"{name}-{version}-{tag}.whl", buf.getvalue()


def test_the_standin_serves_the_local_torch_wheel_checked_against_the_lock(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    fn, data = _wheel("torch", "2.13.0+cpu", "cp311-cp311-manylinux_2_28_x86_64")
    (wheels / fn).write_bytes(data)
    lock = [LockedWheel(name="torch", version="2.13.0+cpu", sha256=(hashlib.sha256(data).hexdigest(),))]
    repo = tmp_path / "repo"
    res = trainenv.build_standin(repo, lock, "3.11", wheels=wheels, pypi="https://pypi.invalid/simple")
    page = (repo / trainenv.STANDIN_PATH / "simple" / "torch" / "index.html").read_text()
    assert f'href="{fn}#sha256={hashlib.sha256(data).hexdigest()}"' in page
    assert res["torch"]["fetched"] == 1 and res["deps"]["fetched"] == 0
    again = trainenv.build_standin(repo, lock, "3.11", wheels=wheels, pypi="https://pypi.invalid/simple")
    assert again["torch"]["fetched"] == 0 and again["torch"]["cached"] == 1


def test_the_standin_without_the_locked_torch_wheel_says_so(tmp_path: Path) -> None:
    lock = [LockedWheel(name="torch", version="2.13.0+cpu", sha256=("0" * 64,))]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExecutionError, match=r"needs the locked CPU torch wheel in .*empty: torch==2.13.0\+cpu"):
        trainenv.build_standin(tmp_path / "repo", lock, "3.11", wheels=tmp_path / "empty")


def test_lab_up_train_env_switches_the_inventory_to_the_cpu_build(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text("# Written by gpuctl lab up\n" + LAB.replace("  train_env_enabled: false\n", ""))
    trainenv.enable_in_inventory(inv)
    text = inv.read_text()
    assert text.startswith("# Written by gpuctl lab up\n")
    data = yaml.safe_load(text)
    assert data["role_vars"]["train_env_enabled"] is True and data["role_vars"]["train_env_build"] == "cpu"
    assert data["role_vars"]["bench_tools_nccl_tests_package"] == "nccl-tests"
    spec = resolve(load_inventory(inv))[0]
    assert spec.roles["train_env"] == "" and spec.train_env is not None and spec.train_env.build == "cpu"


def test_bytes_served_counts_a_path_prefix(tmp_path: Path) -> None:
    log = tmp_path / "access-repo.jsonl"
    rows = [("/standin/download.pytorch.org/whl/cpu/simple/torch/t.whl", 1000),
            ("/gpuctl/wheels/simple/torch/t.whl", 1000), ("/gpuctl/wheels/simple/torch/t.whl", 1000)]
    log.write_text("".join(json.dumps({"time": 1.0 + i, "client": "10.251.1.1", "path": p, "bytes": b}) + "\n"
                           for i, (p, b) in enumerate(rows)))
    assert bytes_served(log, path_prefix="/standin/")["total"] == 1000
    assert bytes_served(log, path_prefix="/gpuctl/wheels/")["total"] == 2000
    assert bytes_served(log)["total"] == 3000
