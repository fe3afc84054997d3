"""`gpuctl lock` / `drift` cover the training environment (issue 16, item 4): the read script
lists the venv's distributions, the lock records them, a node whose torch was replaced drifts
from the lock and from its peers, naming the distribution and both versions."""

from __future__ import annotations

from gpuctl.inventory import load_inventory
from gpuctl.lock import compare, model, read
from gpuctl.paths import inventories_dir
from gpuctl.spec import resolve

LOADED = load_inventory(inventories_dir() / "h100-8x4.yaml")
SPEC = resolve(LOADED)[0]


def output(bump: dict[str, str] | None = None, env: bool = True) -> str:
    te = SPEC.train_env
    assert te is not None
    lines = ["##gpuctl-lock os", "ID=ubuntu", "VERSION_ID=\"22.04\"",
             "##gpuctl-lock kernel", "5.15.0-1", "##gpuctl-lock module",
             SPEC.driver_version, "##gpuctl-lock packages"]
    lines += [f"{p.name}\t{p.version}\thold ok installed" for p in SPEC.all_packages()]
    lines += ["##gpuctl-lock train_env"]
    if env:
        lines += ["dist=pip==25.1"] + [f"dist={n}=={(bump or {}).get(n, v)}" for n, v in te.packages.items()]
    lines += ["##gpuctl-lock end"]
    return "\n".join(lines) + "\n"


def test_read_script_lists_the_environment_with_its_python():
    script = read.read_script(SPEC)
    assert "##gpuctl-lock train_env" in script
    assert "/opt/gpuctl/train-env/bin/python -c" in script and "importlib.metadata" in script


def test_parse_read_records_the_distributions():
    entry = read.parse_read(output(), SPEC)
    assert entry.train_env["torch"] == "2.8.0" and entry.train_env["nvidia-nccl-cu12"] == "2.27.3"


def test_replaced_torch_drifts_from_the_lock_and_the_peers():
    base = read.parse_read(output(), SPEC)
    lock = model.build_lock(LOADED, {"gpu-01": base, "gpu-02": base, "gpu-03": base})
    swapped = read.parse_read(output(bump={"torch": "2.7.1"}), SPEC)
    report = compare.diff(lock, {"gpu-01": base, "gpu-02": swapped, "gpu-03": base})
    by_kind = {(d.kind, d.key): d for d in report.items}
    assert {d.node for d in report.items} == {"gpu-02"}
    d = by_kind[("lock", "train_env torch")]
    assert (d.expected, d.found) == ("2.8.0", "2.7.1")
    assert ("peers", "train_env torch") in by_kind
    assert compare.diff(lock, {"gpu-01": base, "gpu-02": base, "gpu-03": base}).clean


def test_a_node_without_the_environment_drifts():
    base = read.parse_read(output(), SPEC)
    lock = model.build_lock(LOADED, {"gpu-01": base, "gpu-02": base})
    gone = read.parse_read(output(env=False), SPEC)
    report = compare.diff(lock, {"gpu-01": base, "gpu-02": gone})
    assert any(d.key == "train_env torch" and d.found is None and d.node == "gpu-02" for d in report.items)
