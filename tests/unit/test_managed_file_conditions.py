"""A managed file's condition (`ManagedFile.when`) is declared by its component as a function of
the node's spec and called by the lock, never a word the lock looks up."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl import components
from gpuctl.components import ManagedFile
from gpuctl.inventory import load_inventory
from gpuctl.lock import managed
from gpuctl.spec import NodeSpec, resolve

LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"


@pytest.fixture(scope="module")
def spec() -> NodeSpec:
    return resolve(load_inventory(LAB_INVENTORY))[0]


def test_every_condition_is_a_function_of_the_spec_or_none() -> None:
    conditioned = [f for f in components.managed_files() if f.when is not None]
    assert conditioned  # apt/dnf files, network's port files, the RAID's mdadm.conf, train_env's
    for f in components.managed_files():
        assert f.when is None or (callable(f.when) and not isinstance(f.when, str)), f


def test_the_lock_calls_the_components_own_condition(spec: NodeSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    """A component may declare any condition on the spec; the lock evaluates it as declared
    (before: a lookup in the lock's table of six words, a KeyError for anything else)."""
    asked: list[NodeSpec] = []

    def on_containers(s: NodeSpec) -> bool:
        asked.append(s)
        return s.node_kind == "container"

    extra = ManagedFile("/etc/gpuctl-test.conf", when=on_containers, role="base")
    monkeypatch.setattr(managed, "declared_files", lambda: (*components.managed_files(), extra))
    assert "/etc/gpuctl-test.conf" not in managed.managed_files(spec)
    assert "/etc/gpuctl-test.conf" in managed.managed_files(spec.model_copy(update={"node_kind": "container"}))
    assert len(asked) == 2


def test_each_components_files_follow_its_condition(spec: NodeSpec) -> None:
    """network's port files where the inventory gives a fabric or VLANs (the rule network's
    `applies` uses), train_env's where the role runs, the RAID's where there is one, apt's and
    dnf's by package manager; files without a condition everywhere."""
    bare = spec.model_copy(update={"fabric": spec.fabric.model_copy(update={"type": "none"}), "vlans": (),
                                   "raid": None})
    files = managed.managed_files(bare)
    assert "/etc/nccl.conf" in files and "/etc/modprobe.d/*gpuctl*" in files  # no condition
    assert not any(f.startswith(("/etc/network/", "/etc/netplan/", "/etc/modules-load.d/")) for f in files)
    assert "/etc/mdadm/mdadm.conf" not in files
    vlans_only = bare.model_copy(update={"vlans": spec.vlans})
    assert spec.vlans and "/etc/netplan/60-gpuctl.yaml" in managed.managed_files(vlans_only)
    assert spec.train_env is not None and spec.roles["train_env"]  # the lab turns the role off
    runs = managed.managed_files(spec.model_copy(update={"roles": {**spec.roles, "train_env": ""}}))
    assert "/etc/profile.d/gpuctl-train-env.sh" in runs
    assert "/etc/profile.d/gpuctl-train-env.sh" not in managed.managed_files(spec)
    assert "/etc/profile.d/gpuctl-train-env.sh" not in managed.managed_files(
        spec.model_copy(update={"roles": {**spec.roles, "train_env": ""}, "train_env": None}))
    dnf = managed.managed_files(spec.model_copy(update={"package_manager": "dnf"}))
    assert "/etc/yum.repos.d/*gpuctl*" in dnf and "/etc/apt/sources.list.d/*gpuctl*" not in dnf
