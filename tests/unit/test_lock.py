"""Lock model, node reads, drift logic, pins from the lock, and the lock/drift CLI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl import lock as lk
from gpuctl.errors import ExecutionError, InputError
from gpuctl.inventory import load_inventory
from gpuctl.lock import compare, drifting, locking, managed, model, pins, read, rebuilding
from gpuctl.spec import NodeSpec, resolve

# the lab inventory as committed (`gpuctl lab up` rewrites inventories/lab.yaml)
LAB_INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"

SHA_A = "a" * 64
SHA_B = "b" * 64


@pytest.fixture(scope="module")
def loaded():
    return load_inventory(LAB_INVENTORY)


@pytest.fixture(scope="module")
def spec(loaded) -> NodeSpec:
    return resolve(loaded)[0]


def node_output(spec: NodeSpec, *, kernel: str = "6.1.0-27-amd64", bump: dict[str, str] | None = None,
                nccl_sha: str = SHA_A, unheld: tuple[str, ...] = (), missing: tuple[str, ...] = (),
                mdadm_sha: str = SHA_B, hca_fw: str = "1.0.0", vbios: str | None = "96.00.89.00.01") -> str:
    """What the read script prints on a Debian node where every pinned package is installed."""
    lines = ["##gpuctl-lock os", "ID=debian", "VERSION_ID=\"12\"",
             "##gpuctl-lock kernel", kernel, "##gpuctl-lock module",
             spec.driver_version, "##gpuctl-lock packages"]
    for p in spec.all_packages():
        if p.name in missing:
            continue
        version = (bump or {}).get(p.name, p.version)
        want = "install" if p.name in unheld else "hold"
        lines.append(f"{p.name}\t{version}\t{want} ok installed")
    lines += ["##gpuctl-lock hca", f"rxe0\t{hca_fw}", "##gpuctl-lock vbios"]
    if vbios:  # `nvidia-smi -q -x` of two GPUs, cut to what the lock reads
        lines += ['<?xml version="1.0" ?>', "<nvidia_smi_log>", "<attached_gpus>2</attached_gpus>",
                  *(f'<gpu id="00000000:{b}:00.0"><vbios_version>{vbios}</vbios_version></gpu>' for b in ("18", "2A")),
                  "</nvidia_smi_log>"]
    lines += ["##gpuctl-lock files", f"{nccl_sha}  /etc/nccl.conf", f"{mdadm_sha}  /etc/mdadm/mdadm.conf",
              "-  /etc/default/grub.d/gpuctl.cfg", "##gpuctl-lock end"]
    return "\n".join(lines) + "\n"


def test_managed_files_in_one_place(spec):
    files = managed.managed_files(spec)
    assert "/etc/nccl.conf" in files
    assert "/etc/modprobe.d/*gpuctl*" in files
    assert "/etc/sysctl.d/90-gpuctl.conf" in files  # from roles/base/defaults.yaml base_sysctl_file
    assert "/etc/mdadm/mdadm.conf" in files  # spec.raid is set in the lab inventory
    assert any(f.startswith("/etc/network/") for f in files)  # RoCE fabric + VLANs
    no_raid = spec.model_copy(update={"raid": None, "package_manager": "dnf"})
    files2 = managed.managed_files(no_raid)
    assert "/etc/mdadm/mdadm.conf" not in files2 and "/etc/mdadm.conf" not in files2
    assert "/etc/yum.repos.d/*gpuctl*" in files2 and "/etc/default/grub.d/gpuctl.cfg" not in files2
    # every managed path is a file name read by the script
    script = read.read_script(spec)
    for f in files:
        assert f in script


def test_node_specific_files(spec):
    assert managed.per_node_file("/etc/mdadm/mdadm.conf", spec)
    assert managed.per_node_file("/etc/network/interfaces.d/gpuctl-eth1.100", spec)
    assert not managed.per_node_file("/etc/nccl.conf", spec)
    assert not managed.per_node_file("/etc/modprobe.d/gpuctl-blacklist.conf", spec)


def test_read_script_quotes_and_queries_every_component_package(spec):
    script = read.read_script(spec)
    for p in spec.all_packages():
        assert p.name in script
    assert "dpkg-query -W" in script and "/sys/class/infiniband/*/fw_ver" in script
    assert "nvidia-smi -q -x 2>&1" in script
    rpm = read.read_script(spec.model_copy(update={"package_manager": "dnf"}))
    assert "rpm -q --qf" in rpm and "versionlock list" in rpm


def test_parse_read_installed_versions_holds_firmware_files(spec):
    pkg = spec.all_packages()[0]
    text = node_output(spec, bump={pkg.name: "999.1-1"}, unheld=(pkg.name,), missing=("libnccl-dev",))
    e = read.parse_read(text, spec, "t0")
    versions = e.package_versions()
    assert versions[pkg.name] == "999.1-1"  # what the node has, not the matrix
    assert versions["libnccl-dev"] is None
    comp = next(c for c, pk in e.packages.items() if pkg.name in pk)
    assert e.packages[comp][pkg.name].held is False
    assert e.packages["cuda"]["cuda-toolkit-13-0"].held is True
    assert e.kernel == "6.1.0-27-amd64" and e.nvidia_module == spec.driver_version and e.os == "debian 12"
    assert e.firmware == {"hca/rxe0": "1.0.0", "vbios/0": "96.00.89.00.01", "vbios/1": "96.00.89.00.01"}
    assert e.files == {"/etc/nccl.conf": SHA_A, "/etc/mdadm/mdadm.conf": SHA_B, "/etc/default/grub.d/gpuctl.cfg": None}


def test_parse_read_ignores_config_files_state_and_nvidia_smi_errors(spec):
    text = node_output(spec, vbios=None).replace(
        "##gpuctl-lock vbios\n",
        "##gpuctl-lock vbios\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    text = text.replace("\thold ok installed", "\tdeinstall ok config-files", 1)
    e = read.parse_read(text, spec)
    assert not any(k.startswith("vbios") for k in e.firmware)
    assert sum(v is None for v in e.package_versions().values()) == 1


def test_parse_read_rpm(spec):
    rspec = spec.model_copy(update={"package_manager": "dnf"})
    text = ("##gpuctl-lock os\nNAME=\"Rocky Linux\"\nID=\"rocky\"\nVERSION_ID=\"9.4\"\n"
            "##gpuctl-lock kernel\n5.14.0\n##gpuctl-lock module\n"
            "##gpuctl-lock packages\ncuda-toolkit-13-0\t13.0.2-1\nnvidia-driver\t3:580.95.05-1.el9\n"
            "##gpuctl-lock locks\nLast metadata expiration check: 0:01:00 ago\nnvidia-driver-3:580.95.05-1.el9.*\n"
            "##gpuctl-lock files\n##gpuctl-lock end\n")
    e = read.parse_read(text, rspec)
    assert e.packages["cuda"]["cuda-toolkit-13-0"] == model.LockedPackage(version="13.0.2-1", held=False)
    assert e.packages["driver"]["nvidia-driver"] == model.LockedPackage(version="3:580.95.05-1.el9", held=True)


@pytest.mark.parametrize("text", ["", "##gpuctl-lock os\ndebian 12\n", "ssh: connect refused"])
def test_truncated_read_is_an_error(spec, text):
    with pytest.raises(ExecutionError, match="incomplete"):
        read.parse_read(text, spec)


def make_lock(loaded, entries: dict[str, model.NodeLock]) -> model.LockFile:
    return model.build_lock(loaded, entries)


def test_lock_round_trip(loaded, spec, tmp_path):
    entries = {n: read.parse_read(node_output(spec), spec, "t") for n in ("gpu-01", "gpu-02")}
    lock = make_lock(loaded, entries)
    path = model.write_lock(lock, tmp_path / "x.lock.yaml")
    text = path.read_text()
    assert text.startswith("# gpuctl lock file")
    back = model.load_lock(path)
    assert back == lock
    assert back.matrix.name == "r580-cuda13.0" and len(back.inventory.sha256) == 64
    assert list(back.nodes) == ["gpu-01", "gpu-02"]


def test_lock_path_beside_inventory():
    assert model.lock_path("inventories/lab.yaml") == Path("inventories/lab.lock.yaml")


@pytest.mark.parametrize("text, match", [
    ("[1, 2]", "expected a mapping"),
    ("lock_version: 7\n", "lock_version 7"),
    ("lock_version: 1\nnodes: {}\n", "not a valid gpuctl lock file"),
    ("a: [", "not valid YAML"),
])
def test_bad_lock_files(text, match):
    with pytest.raises(InputError, match=match):
        model.parse_lock(text)


def test_missing_lock_file(tmp_path):
    with pytest.raises(InputError, match="run `gpuctl lock` first"):
        model.load_lock(tmp_path / "none.lock.yaml")


def test_limit_keeps_other_entries(loaded, spec):
    e1 = read.parse_read(node_output(spec), spec)
    e2 = read.parse_read(node_output(spec, kernel="6.1.0-99"), spec)
    prev = make_lock(loaded, {"gpu-01": e1, "gpu-02": e1})
    new = model.build_lock(loaded, {"gpu-02": e2}, prev)
    assert new.nodes["gpu-01"] == e1 and new.nodes["gpu-02"].kernel == "6.1.0-99"


# ------------------------------------------------------------------ drift logic


def three_nodes(loaded, spec):
    base = read.parse_read(node_output(spec), spec)
    lock = model.LockFile(**{**make_lock(loaded, {}).model_dump(), "nodes": {"gpu-01": base, "gpu-02": base,
                                                                           "gpu-03": base}})
    return lock, base


def test_no_drift(loaded, spec):
    lock, base = three_nodes(loaded, spec)
    report = compare.diff(lock, {"gpu-01": base, "gpu-02": base, "gpu-03": base})
    assert report.clean and report.as_dict()["status"] == "clean"


def test_hand_upgraded_package_on_one_node_shows(loaded, spec):
    lock, base = three_nodes(loaded, spec)
    upgraded = read.parse_read(node_output(spec, bump={"libnccl2": "2.99.9-1+cuda13.0"}, unheld=("libnccl2",)), spec)
    report = compare.diff(lock, {"gpu-01": base, "gpu-02": upgraded, "gpu-03": base})
    assert not report.clean
    assert {d.node for d in report.items} == {"gpu-02"}
    pinned = spec.components["nccl"].packages[0].version
    by_kind = {(d.kind, d.key): d for d in report.items}
    lock_d = by_kind[("lock", "package libnccl2")]
    assert (lock_d.expected, lock_d.found) == (pinned, "2.99.9-1+cuda13.0")
    peer_d = by_kind[("peers", "package libnccl2")]
    assert peer_d.expected == pinned and peer_d.note == "2 of 3 nodes"
    assert ("lock", "hold libnccl2") in by_kind
    assert "libnccl2" in lock_d.message() and "2.99.9-1+cuda13.0" in lock_d.message()


def test_kernel_differs(loaded, spec):
    lock, base = three_nodes(loaded, spec)
    other = read.parse_read(node_output(spec, kernel="6.1.0-28-amd64"), spec)
    report = compare.diff(lock, {"gpu-01": other, "gpu-02": base, "gpu-03": base})
    keys = {(d.node, d.kind, d.key, d.found) for d in report.items}
    assert keys == {("gpu-01", "lock", "kernel", "6.1.0-28-amd64"), ("gpu-01", "peers", "kernel", "6.1.0-28-amd64")}


def test_config_file_hash_differs(loaded, spec):
    lock, base = three_nodes(loaded, spec)
    edited = read.parse_read(node_output(spec, nccl_sha="c" * 64), spec)
    report = compare.diff(lock, {"gpu-01": base, "gpu-02": base, "gpu-03": edited})
    assert {(d.node, d.kind, d.key) for d in report.items} == {
        ("gpu-03", "lock", "file /etc/nccl.conf"), ("gpu-03", "peers", "file /etc/nccl.conf")}


def test_node_specific_file_only_against_the_lock(loaded, spec):
    # every node has its own mdadm.conf (array UUID): never peer drift; a change is lock drift
    a = read.parse_read(node_output(spec, mdadm_sha="1" * 64), spec)
    b = read.parse_read(node_output(spec, mdadm_sha="2" * 64), spec)
    lock = make_lock(loaded, {"gpu-01": a, "gpu-02": b})
    assert compare.diff(lock, {"gpu-01": a, "gpu-02": b}, spec=spec).clean
    c = read.parse_read(node_output(spec, mdadm_sha="3" * 64), spec)
    report = compare.diff(lock, {"gpu-01": a, "gpu-02": c}, spec=spec)
    assert [(d.node, d.kind, d.key) for d in report.items] == [("gpu-02", "lock", "file /etc/mdadm/mdadm.conf")]


def test_deleted_config_file(loaded, spec):
    lock, base = three_nodes(loaded, spec)
    gone = read.parse_read(node_output(spec).replace(f"{SHA_A}  /etc/nccl.conf", "-  /etc/nccl.conf"), spec)
    report = compare.diff(lock, {"gpu-01": base, "gpu-02": gone, "gpu-03": base})
    d = next(d for d in report.items if d.kind == "lock")
    assert (d.key, d.expected, d.found) == ("file /etc/nccl.conf", SHA_A, None)
    assert "found absent" in d.message()


def test_missing_and_unlocked_nodes(loaded, spec):
    lock, base = three_nodes(loaded, spec)
    report = compare.diff(lock, {"gpu-01": base, "gpu-02": base, "gpu-04": base},
                     errors={"gpu-03": "unreachable: Connection refused"},
                     nodes=["gpu-01", "gpu-02", "gpu-03", "gpu-04"])
    kinds = {(d.node, d.kind) for d in report.items}
    assert kinds == {("gpu-03", "missing"), ("gpu-04", "unlocked")}
    missing = next(d for d in report.items if d.kind == "missing")
    assert "Connection refused" in missing.message()


def test_two_nodes_disagree_without_majority(loaded, spec):
    a = read.parse_read(node_output(spec), spec)
    b = read.parse_read(node_output(spec, hca_fw="2.0.0"), spec)
    peers = compare.diff_peers({"gpu-01": a, "gpu-02": b})
    assert {d.node for d in peers} == {"gpu-01", "gpu-02"}
    assert all(d.key == "firmware hca/rxe0" and d.note.startswith("no majority") for d in peers)


def test_vbios_differs_from_peers(loaded, spec):
    a = read.parse_read(node_output(spec), spec)
    b = read.parse_read(node_output(spec, vbios="96.00.74.00.11"), spec)
    peers = compare.diff_peers({"gpu-01": a, "gpu-02": a, "gpu-03": b})
    assert {(d.node, d.key) for d in peers} == {("gpu-03", "firmware vbios/0"), ("gpu-03", "firmware vbios/1")}


# ------------------------------------------------------------------------- pins


def test_pin_from_lock_replaces_component_versions(spec):
    entry = read.parse_read(node_output(spec, bump={"libnccl2": "2.27.3-1+cuda13.0", "cuda-toolkit-13-0": "13.0.1-1"}),
                          spec)
    pinned = pins.pin_from_lock(spec, entry)
    assert pinned.components["nccl"].packages[0].pin == "libnccl2=2.27.3-1+cuda13.0"
    assert pinned.pins("cuda") == ["cuda-toolkit-13-0=13.0.1-1"]
    # everything else unchanged, and the original spec untouched
    assert pinned.pins("driver") == spec.pins("driver")
    assert spec.pins("cuda") != pinned.pins("cuda")
    changes = pins.pins_changed(spec, pinned)
    assert len(changes) == 2 and any("cuda-toolkit-13-0" in c and "13.0.1-1" in c for c in changes)


def test_pin_from_lock_keeps_matrix_version_for_uninstalled(spec):
    entry = read.parse_read(node_output(spec, missing=("libnccl2",)), spec)
    assert pins.pin_from_lock(spec, entry).pins("nccl") == spec.pins("nccl")


def test_pin_from_lock_rejects_wildcards(spec):
    entry = read.parse_read(node_output(spec, bump={"libnccl2": "2.*"}), spec)
    with pytest.raises(InputError, match="not an exact version"):
        pins.pin_from_lock(spec, entry)


def test_consensus_entry_takes_the_peers_majority(loaded, spec):
    a = read.parse_read(node_output(spec), spec)
    b = read.parse_read(node_output(spec, bump={"libnccl2": "2.0.0-1"}), spec)
    lock = make_lock(loaded, {"gpu-01": a, "gpu-02": b})
    lock = lock.model_copy(update={"nodes": {"gpu-01": a, "gpu-02": a, "gpu-03": b}})
    c = pins.consensus_entry(lock, exclude="gpu-01")
    # gpu-02 (a) and gpu-03 (b) tie: the first peer in lock order wins
    assert c.package_versions()["libnccl2"] == a.package_versions()["libnccl2"]
    c3 = pins.consensus_entry(lock.model_copy(update={"nodes": {"gpu-01": b, "gpu-02": b, "gpu-03": a}}),
                            exclude="gpu-03")
    assert c3.package_versions()["libnccl2"] == "2.0.0-1"
    with pytest.raises(InputError):
        pins.consensus_entry(lock.model_copy(update={"nodes": {"gpu-01": a}}), exclude="gpu-01")


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def inv_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUCTL_RUNS_DIR", str(tmp_path / "runs"))
    dst = tmp_path / "lab.yaml"
    shutil.copy(LAB_INVENTORY, dst)
    return dst


def fake_reads(monkeypatch, outputs: dict[str, str], errors: dict[str, str] | None = None):
    def read_nodes(loaded, specs, record=None, timeout_s=0):
        out = read.ReadResult()
        for s in specs:
            if s.node in (errors or {}):
                out.errors[s.node] = errors[s.node]
            else:
                out.nodes[s.node] = read.parse_read(outputs[s.node], s, "t")
        return out
    monkeypatch.setattr("gpuctl.lock.read.read_nodes", read_nodes)  # what the lock and drift workflows call


def test_cli_lock_then_drift(inv_copy, spec, monkeypatch):
    from gpuctl.cli.main import main

    good = node_output(spec)
    fake_reads(monkeypatch, {"gpu-01": good, "gpu-02": good})
    runner = CliRunner()
    r = runner.invoke(main, ["lock", str(inv_copy)])
    assert r.exit_code == 0, r.output
    lock_file = inv_copy.with_name("lab.lock.yaml")
    assert lock_file.is_file() and "lab.lock.yaml" in r.output
    r = runner.invoke(main, ["drift", str(inv_copy)])
    assert r.exit_code == 0 and "no drift on 2 node(s)" in r.output
    fake_reads(monkeypatch, {"gpu-01": good, "gpu-02": node_output(spec, bump={"libnccl2": "9.9-1"})})
    r = runner.invoke(main, ["drift", str(inv_copy), "--json"])
    assert r.exit_code == 1, r.output
    import json

    data = json.loads(r.output)
    assert data["status"] == "drift"
    # two nodes: no majority, so gpu-01 is named against its peer but has no lock drift
    assert [(d["kind"], d["key"]) for d in data["nodes"]["gpu-01"]] == [("peers", "package libnccl2")]
    assert any(d["key"] == "package libnccl2" and d["found"] == "9.9-1" for d in data["nodes"]["gpu-02"])
    r = runner.invoke(main, ["drift", str(inv_copy)])
    assert r.exit_code == 1 and "libnccl2" in r.output


def test_cli_lock_refuses_partial_read(inv_copy, spec, monkeypatch):
    from gpuctl.cli.main import main

    fake_reads(monkeypatch, {"gpu-01": node_output(spec)}, errors={"gpu-02": "unreachable: refused"})
    r = CliRunner().invoke(main, ["lock", str(inv_copy)])
    assert r.exit_code == 3 and "gpu-02: unreachable: refused" in r.output
    assert not inv_copy.with_name("lab.lock.yaml").exists()


def test_cli_drift_without_lock(inv_copy):
    from gpuctl.cli.main import main

    r = CliRunner().invoke(main, ["drift", str(inv_copy)])
    assert r.exit_code == 2 and "run `gpuctl lock` first" in r.output


def test_lock_package_is_split_by_part_and_workflow():
    """Issue 18: gpuctl/lock.py (804 lines) is one module per part and per workflow, none over 600 lines."""
    pkg = Path(lk.__file__).parent
    assert {p.stem for p in pkg.glob("*.py")} >= {"model", "managed", "read", "compare", "pins", "locking",
                                                   "drifting", "rebuilding"}
    assert max(len(p.read_text().splitlines()) for p in pkg.glob("*.py")) <= 600
    assert (locking.lock.__module__, drifting.drift.__module__, rebuilding.rebuild.__module__) == (
        "gpuctl.lock.locking", "gpuctl.lock.drifting", "gpuctl.lock.rebuilding")


@pytest.mark.parametrize(("step", "module"), [("_verify", "gpuctl.checks.runner"), ("_bench", "gpuctl.bench.run")])
def test_rebuild_never_skips_a_step_it_cannot_load(loaded, spec, monkeypatch, step, module):
    """`gpuctl rebuild` asked to verify (or bench) a node whose verifier cannot even be imported
    (a broken install) noted "not run" and reported the node ok: nothing validated passed. The
    import error now stops the rebuild (issue 18: the "is not available" fallbacks)."""
    import sys

    monkeypatch.setitem(sys.modules, module, None)  # `import` of it raises ImportError
    notes: list[str] = []
    args = (loaded, spec, None) if step == "_verify" else (loaded, spec, [], "quick", None, notes)
    with pytest.raises(ImportError):
        getattr(rebuilding, step)(*args)
    assert notes == []
