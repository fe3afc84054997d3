"""Where `gpuctl lab up` writes the lab inventory (issue 20, item 4): never over the
checked-in template under inventories/, which stays what the checkout ships; the
generated file goes to an ignored place (the lab state dir by default)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpuctl.errors import ExecutionError, ExitCode, InputError
from gpuctl.inventory import load_inventory
from gpuctl.lab import nodes
from gpuctl.lab.state import LabState, NodeState, ProcessRecord, state_root
from gpuctl.paths import inventories_dir

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the developer's real lab cache or state."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _state(tmp_path: Path, inventory: Path, n: int = 2) -> LabState:
    state = LabState(
        sku="hgx-h100-80gb", smp=2, memory_mb=1536, nvme_count=4, nvme_size_gb=2,
        image_dir=str(tmp_path / "image"), key_path=str(tmp_path / "id_ed25519"),
        known_hosts=str(tmp_path / "known_hosts"), state_dir=str(state_root()), proxy_port=3142,
        repo_port=8080, profile_dir=str(state_root() / "profiles"), inventory_path=str(inventory),
        public_key="ssh-ed25519 AAAAC3NzaLAB gpuctl-lab", keyring_file="0a1b2c3d.pub", keyring_sha256="b" * 64,
    )
    for i in range(1, n + 1):
        layout = nodes.NodeLayout(i)
        state.nodes.append(NodeState(
            name=layout.name, index=i, ssh_port=23000 + i, overlay="/s/root.qcow2", nvme=[],
            mac_mgmt=layout.mac_mgmt, mac_fabric=layout.mac_fabric, serial_log="/s/serial.log",
            fabric_ip=layout.fabric_ip, vlan_ips={100: layout.vlan_ip}, process=ProcessRecord(1, "marker"),
        ))
    return state


def _under(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def test_default_inventory_path_is_the_lab_state_dir_never_the_shipped_inventories() -> None:
    path = nodes.default_inventory_path()
    assert path == state_root() / "inventory.yaml"
    assert not _under(path, inventories_dir())
    assert not _under(path, CHECKOUT)


@pytest.mark.parametrize("name", ["lab.yaml", "other.yaml", "sub/lab.yaml"])
def test_the_inventory_writer_refuses_the_shipped_inventories_folder(tmp_path: Path, name: str) -> None:
    """Not the template itself, nor anything else under the checkout's tracked inventories/
    (a relative or `..` spelling included): InputError, and the folder is left as it was."""
    before = {p: p.read_bytes() for p in inventories_dir().rglob("*") if p.is_file()}
    for target in (inventories_dir() / name, inventories_dir() / "sub" / ".." / name):
        state = _state(tmp_path, target)
        with pytest.raises(InputError, match="inventories"):
            nodes.write_lab_inventory(state)
    assert {p: p.read_bytes() for p in inventories_dir().rglob("*") if p.is_file()} == before


def _never_past_the_checks(*_: object, **__: object) -> None:
    pytest.fail("lab up went past its argument checks (it would boot a lab)")


def test_up_refuses_a_target_under_inventories_before_starting_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes, "check_host_tools", _never_past_the_checks)
    with pytest.raises(InputError, match="inventories"):
        nodes.up(nodes=1, inventory_path=inventories_dir() / "lab.yaml")
    assert not state_root().exists()  # no state written, nothing started


def test_cli_lab_up_into_inventories_is_exit_2_naming_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.cli.main import main

    monkeypatch.setattr(nodes, "check_host_tools", _never_past_the_checks)
    target = inventories_dir() / "lab.yaml"
    result = CliRunner().invoke(main, ["lab", "up", "--nodes", "1", "--inventory", str(target)])
    assert result.exit_code == ExitCode.USAGE_OR_INPUT, result.output
    assert str(target.resolve()) in " ".join(result.output.split())


def test_template_to_generated_inventory(tmp_path: Path) -> None:
    """The generated inventory: the template's fixed sections, this lab's nodes, ports, key,
    known_hosts and keyring, loadable by the normal inventory loader; the template unchanged."""
    template = inventories_dir() / "lab.yaml"
    before = template.read_bytes()
    target = nodes.default_inventory_path()
    state = _state(tmp_path, target)
    written = nodes.write_lab_inventory(state, matrix="r570-cuda12.8")
    assert written == target and target.is_file()
    assert template.read_bytes() == before
    loaded = load_inventory(target)
    inv = loaded.inventory
    assert [n.ssh_port for n in inv.nodes] == [23001, 23002]
    assert inv.cluster.matrix == "r570-cuda12.8"
    data = yaml.safe_load(target.read_text())
    assert data["ssh"]["key"] == str(tmp_path / "id_ed25519")
    assert data["repos"]["keyring_file"] == "0a1b2c3d.pub" and data["repos"]["keyring_sha256"] == "b" * 64
    assert data["fabric"] == yaml.safe_load(before)["fabric"]  # fixed sections from the template


def test_an_inventory_without_a_keyring_is_never_written(tmp_path: Path) -> None:
    """A lab whose stand-in repository was not built must fail, not hand out an inventory
    whose nvidia_repo role cannot install the stack (issue 20, item 5)."""
    state = _state(tmp_path, nodes.default_inventory_path())
    state.keyring_file = state.keyring_sha256 = ""
    with pytest.raises(ExecutionError, match="stand-in"):
        nodes.write_lab_inventory(state)
    assert not nodes.default_inventory_path().exists()


def test_lab_down_removes_the_generated_inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also when the state dir is reached through a symlink (the writer stores the resolved path)."""
    (tmp_path / "real-state").mkdir()
    (tmp_path / "state-link").symlink_to(tmp_path / "real-state")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-link"))
    state = _state(tmp_path, nodes.default_inventory_path(), n=0)
    nodes.write_lab_inventory(state)
    nodes.down(state)
    assert not nodes.default_inventory_path().exists()


def test_the_checkout_ignores_the_places_the_lab_writes() -> None:
    """lab-demo writes its inventory to .lab/ and its report to reports/: both ignored."""
    if not (CHECKOUT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in (".lab/lab.yaml", ".lab/lab.lock.yaml", "reports/lab-acceptance.html", "runs/x/run.json"):
        proc = subprocess.run(["git", "check-ignore", "-q", path], cwd=CHECKOUT, check=False)
        assert proc.returncode == 0, f"{path} is not git-ignored"


def test_cli_lab_up_prints_where_it_wrote_the_inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuctl.cli.main import main

    target = tmp_path / "a very long folder name that would wrap at eighty columns" / "lab inventory.yaml"
    seen: dict[str, object] = {}

    def fake_up(*args: object, **kwargs: object) -> LabState:
        seen.update(kwargs)
        return _state(tmp_path, target)

    monkeypatch.setattr(nodes, "up", fake_up)
    result = CliRunner().invoke(main, ["lab", "up", "--nodes", "2", "--inventory", str(target)],
                                env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert seen["inventory_path"] == target
    assert f"inventory written to: {target}\n" in result.output
    assert f"next: gpuctl provision {target} --yes\n" in result.output
