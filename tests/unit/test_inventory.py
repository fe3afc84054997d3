"""Inventory validation: every example validates; every broken rule is reported with its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory, load_inventory_text
from gpuctl.paths import inventories_dir

EXAMPLES = sorted(inventories_dir().glob("*.yaml"))
H100 = (inventories_dir() / "h100-8x4.yaml").read_text()


def problems_of(text: str) -> list[str]:
    with pytest.raises(InputError) as exc:
        load_inventory_text(text, "inv.yaml", base_dir=inventories_dir())
    return exc.value.problems


def line_of(text: str, needle: str) -> int:
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(needle)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_validates(path: Path) -> None:
    loaded = load_inventory(path)
    assert loaded.inventory.nodes
    assert loaded.sku.name == loaded.inventory.cluster.sku


def test_acceptance_broken_copy_reports_every_problem_with_its_line() -> None:
    text = H100.replace("repos: {mirror: null}", "repos: {mirror: null}\nfabrik: {type: infiniband}")
    text = text.replace("{name: r01, power_kw: 20, cooling: liquid}", "{name: r01, power_kw: 10, cooling: air}")
    text = text.replace("name: gpu-02, address: 10.0.0.12", "name: gpu-01, address: 10.0.0.12")
    text = text.replace("name: gpu-03, address: 10.0.0.13, rack: r02", "name: gpu-03, address: 10.9.0.13, rack: r01")
    text = text.replace("name: gpu-04, address: 10.0.0.14, rack: r02", "name: gpu-04, address: 10.0.0.14, rack: r09")
    problems = problems_of(text)
    joined = "\n".join(problems)
    assert f"inv.yaml:{line_of(text, 'fabrik')}: fabrik: unknown key 'fabrik'; did you mean 'fabric'?" in joined
    assert f"inv.yaml:{line_of(text, 'name: gpu-01, address: 10.0.0.12')}: nodes[1].name: duplicate node name" in joined
    assert f"inv.yaml:{line_of(text, '10.9.0.13')}: nodes[2].address: 10.9.0.13 is outside the management" in joined
    assert f"inv.yaml:{line_of(text, 'r09')}: nodes[3].rack: 'r09' is not a rack defined under racks" in joined
    power = [p for p in problems if "racks[0].power_kw" in p]
    assert power and "3 hgx-h100-80gb nodes at 7 kW each = 21 kW" in power[0]
    assert f"inv.yaml:{line_of(text, 'name: r01, power_kw: 10')}:" in power[0]
    assert len([p for p in problems if not p.startswith("warning")]) == 5


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("{id: 100, parent: eno1", "{id: 5000, parent: eno1", r"vlans\[0\]\.id: .*less than or equal to 4094"),
        ("vlans:\n  - {id: 100, parent: eno1, name: storage, cidr: 10.100.0.0/24}",
         "vlans:\n  - {id: 100, parent: eno1, name: storage, cidr: 10.100.0.0/24}\n"
         "  - {id: 100, parent: eno1, name: other, cidr: 10.101.0.0/24}",
         r"vlans\[1\]\.id: VLAN id 100 is defined more than once"),
        ("rate_gbps: 400", "rate_gbps: 300", r"fabric\.rate_gbps: 300 is not a known infiniband rate"),
        ('mgs_nids: ["10.100.0.5@tcp"]', 'mgs_nids: ["10.100.0.5-tcp"]',
         r"mgs_nids\[0\]: '10.100.0.5-tcp' is not a Lustre NID"),
        ('lnet: "tcp0(eno1.100)"', 'lnet: "tcp0 eno1"', r"lustre\.lnet: 'tcp0 eno1' is not an LNet"),
        ("raid: {level: 0, devices: auto", "raid: {level: 1, devices: [/dev/nvme0n1]",
         r"RAID1 needs at least 2 devices"),
        ("raid: {level: 0, devices: auto", "raid: {level: 0, devices: [/dev/sda]", r"'/dev/sda' is not an NVMe"),
        ("raid: {level: 0, devices: auto", "raid: {level: 0, devices: auto, wipe: [/dev/nvme0n1]",
         r"wipe needs an explicit device list"),
        ("fabric_ips: [192.168.1.11,", "fabric_ips: [172.16.1.11,", r"172.16.1.11 is outside the fabric network"),
        ("sku: hgx-h100-80gb", "sku: hgx-h100-81gb", r"cluster\.sku: unknown SKU 'hgx-h100-81gb'"),
        ("matrix: r570-cuda12.8", "matrix: r999", r"cluster\.matrix: unknown matrix 'r999'"),
        ("os: ubuntu-22.04", "os: ubuntu-20.04", r"cluster\.os: Input should be"),
        ("cpu_memory_gib: 2048,\n     fabric_ips: [192.168.1.11",
         "cpu_memory_gib: 2048, bmc: x,\n     fabric_ips: [192.168.1.11",
         r"nodes\[0\]\.bmc: unknown key 'bmc'"),
    ],
)
def test_each_rule_fires_with_field_path(old: str, new: str, expected: str) -> None:
    assert old in H100, old
    problems = problems_of(H100.replace(old, new, 1))
    assert any(re.search(expected, p) for p in problems), problems
    assert all(re.match(r"(warning: )?inv\.yaml:\d+: ", p) for p in problems), problems


def test_cpu_memory_below_sku_minimum_is_a_warning_not_an_error() -> None:
    loaded = load_inventory_text(H100.replace("cpu_memory_gib: 2048", "cpu_memory_gib: 512", 1), "inv.yaml",
                                 base_dir=inventories_dir())
    assert any("512 GiB is below the hgx-h100-80gb minimum of 1024 GiB" in w for w in loaded.warnings)


def test_liquid_rack_holds_more_than_an_air_rack() -> None:
    text = H100.replace("rack: r02", "rack: r01")  # four nodes in one 20 kW rack: 28 kW
    assert any("4 hgx-h100-80gb nodes" in p for p in problems_of(text))
    ok = text.replace("{name: r01, power_kw: 20, cooling: liquid}", "{name: r01, power_kw: 30, cooling: liquid}")
    assert load_inventory_text(ok, "inv.yaml", base_dir=inventories_dir()).inventory.racks[0].power_kw == 30


def test_duplicate_yaml_key_is_an_error_not_last_wins() -> None:
    problems = problems_of(H100.replace("ssh: {user: root", "ssh: {user: root, user: admin", 1))
    assert any("ssh.user: duplicate key" in p for p in problems)


def test_limit_selects_by_glob_and_rejects_no_match() -> None:
    loaded = load_inventory(inventories_dir() / "h100-8x4.yaml")
    assert [n.name for n in loaded.inventory.select(["gpu-0[12]"])] == ["gpu-01", "gpu-02"]
    with pytest.raises(InputError, match="matches no node"):
        loaded.inventory.select(["cpu-*"])


def test_unreadable_and_non_mapping_files_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_inventory(tmp_path / "missing.yaml")
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(InputError, match="must be a YAML mapping"):
        load_inventory(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("cluster: {name: x\n")
    with pytest.raises(InputError, match=r"broken.yaml:\d+: not valid YAML"):
        load_inventory(broken)


def test_role_vars_must_name_a_known_role_setting() -> None:
    ok = H100 + "role_vars: {bench_tools_nccl_tests_package: nccl-tests}\n"
    assert load_inventory_text(ok, "inv.yaml", base_dir=inventories_dir()).inventory.role_vars
    problems = problems_of(H100 + "role_vars: {bench_tools_ncl_tests_package: x}\n")
    assert any("did you mean 'bench_tools_nccl_tests_package'" in p for p in problems)


@pytest.mark.parametrize("key", ["ofed_kind", "nccl_version", "nccl_conf", "cudnn_version"])
def test_role_vars_for_roles_without_knobs_are_refused(key: str) -> None:
    """ofed, nccl and cudnn take everything from the matrix (their defaults.yaml is empty):
    a role_vars key for them would be accepted and ignored, so it is refused with its line."""
    problems = problems_of(H100 + f"role_vars: {{{key}: x}}\n")
    assert any(f"role_vars.{key}: unknown role setting" in p and re.search(r"inv\.yaml:\d+", p)
               for p in problems), problems


@pytest.mark.parametrize(("entry", "expected"), [
    ("nvme_raid_fsck_pass: two", "'two' is a string; this setting takes a whole number (default 0)"),
    ("nvme_raid_fsck_pass: true", "True is true/false; this setting takes a whole number"),
    ("nvme_raid_metadata: 1.2", "1.2 is a number; this setting is a string: quote it ('1.2')"),
    ("nvme_raid_mount_options: [defaults]", "is a list; this setting takes a string"),
    ("bench_tools_packages_apt: fio", "'fio' is a string; this setting takes a list"),
    ("network_renderer: netplan", "this setting is a map by debian12 / ubuntu2204 / ubuntu2404 / rhel9"),
    ("network_renderer: {debian13: netplan}", "unknown entry 'debian13'; the map has debian12"),
    ("nvme_raid_mkfs_options: {xfs: 3}", "xfs: 3 is a number; this setting is a string"),
    ("nvme_raid_mkfs_options: {xfs: -f}", "'-f' would let mkfs overwrite an existing filesystem"),
    ("nvme_raid_mkfs_options: {ext4: -F}", "'-F' would let mkfs overwrite an existing filesystem"),
    # a path knob takes an absolute, plain path (a relative one landed in root's home)
    ("nvidia_repo_key_file_apt: keys/nvidia.pub", "'keys/nvidia.pub' is not an absolute path"),
    ("network_nccl_conf: /etc/../root/nccl.conf", "is not in normal form"),
    ("base_sysctl_file: /", "is outside what this path may name: /etc/sysctl.d/..."),
    ("nvme_raid_mdadm_conf: {apt: mdadm.conf}", "'mdadm.conf' is not an absolute path"),
])
def test_role_vars_values_take_the_shape_of_their_default(entry: str, expected: str) -> None:
    """A knob override of the wrong type or shape passed validation and broke (or silently
    changed) the role on the hosts; a string map knob given a plain string replaced the map."""
    text = H100 + f"role_vars:\n  {entry}\n"
    problems = problems_of(text)
    key = entry.split(":")[0]
    # a map knob's entry is named as its own field (role_vars.nvme_raid_mkfs_options.xfs)
    assert any(re.match(rf"inv\.yaml:{line_of(text, entry)}: role_vars\.{key}(\.[a-z0-9]+)?: ", p) and expected in p
               for p in problems), problems


def test_role_vars_map_override_names_only_the_entries_it_changes() -> None:
    text = H100 + "role_vars:\n  nvme_raid_mkfs_options: {xfs: -K}\n  nvme_raid_fsck_pass: 2\n"
    rv = load_inventory_text(text, "inv.yaml", base_dir=inventories_dir()).inventory.role_vars
    assert rv == {"nvme_raid_mkfs_options": {"xfs": "-K"}, "nvme_raid_fsck_pass": 2}


def test_role_vars_path_knob_takes_another_absolute_path() -> None:
    text = (H100 + "role_vars:\n  network_nccl_conf: /etc/gpuctl/nccl.conf\n"
            "  nvme_raid_mdadm_conf: {apt: /etc/mdadm.conf}\n")
    rv = load_inventory_text(text, "inv.yaml", base_dir=inventories_dir()).inventory.role_vars
    assert rv["network_nccl_conf"] == "/etc/gpuctl/nccl.conf"


def test_lab_placeholder_copy_matches_the_committed_lab_inventory() -> None:
    """Tests read tests/data/inventories/lab-placeholder.yaml (from when `gpuctl lab up`
    rewrote inventories/lab.yaml; it no longer does); the copy must stay what the checkout ships."""
    live = (inventories_dir() / "lab.yaml").read_text()
    copy = Path(__file__).resolve().parents[1] / "data" / "inventories" / "lab-placeholder.yaml"
    assert copy.read_text() == live


@pytest.mark.parametrize("field,value", [
    ("mirror", "http://mirror.example/nvidia$(id)"), ("mirror", "http://mirror.example/a`id`"),
    ("mirror", "http://mirror.example/a;reboot"), ("apt_proxy", "http://proxy.example:3142/'x'"),
    ("mirror", "http://mirror.example/a&&id"), ("keyring_file", "key;id.gpg"), ("keyring_file", "../etc/key.gpg"),
])
def test_repository_values_with_shell_metacharacters_are_refused(field: str, value: str) -> None:
    """Repository URLs and the keyring file name reach repo files and fetch commands as root."""
    problems = problems_of(H100.replace("repos: {mirror: null}", f'repos: {{{field}: "{value}"}}'))
    assert any(f"repos.{field}" in p and re.search(r"inv\.yaml:\d+", p) for p in problems), problems


def test_repository_url_with_port_path_and_percent_encoding_is_accepted() -> None:
    ok = H100.replace("repos: {mirror: null}",
                      'repos: {mirror: "http://u:p%40ss@10.0.0.5:8080/nvidia/cuda~x?a=1", keyring_file: "k_v2.gpg"}')
    assert load_inventory_text(ok, "inv.yaml", base_dir=inventories_dir()).inventory.repos.mirror


# ------------------------------------------------------------------ fabric.roce.dscp (issue 18)
ROCE = (inventories_dir() / "h200-roce-8x8.yaml").read_text()


def test_roce_dscp_that_disagrees_with_the_traffic_class_is_refused() -> None:
    """NCCL marks RoCE traffic with NCCL_IB_TC = traffic_class, whose top 6 bits are the DSCP
    (RFC 2474/3168): a dscp that is not traffic_class >> 2 describes traffic nobody sends."""
    text = ROCE.replace("dscp: 26", "dscp: 24")
    problems = problems_of(text)
    want = f"inv.yaml:{line_of(text, 'dscp: 24')}: fabric.roce.dscp: 24 is not the DSCP of traffic_class 106 (26)"
    assert any(p.startswith(want) for p in problems), problems


def test_roce_dscp_may_be_left_out_and_then_follows_the_traffic_class() -> None:
    load_inventory_text(ROCE.replace(", dscp: 26", "").replace("traffic_class: 106", "traffic_class: 98"), "inv.yaml",
                        base_dir=inventories_dir())
    load_inventory_text(ROCE, "inv.yaml", base_dir=inventories_dir())  # 26 = 106 >> 2


# ------------------------------------------------------------------ the per-subject validators (issue 18)
def test_every_subject_validator_runs_and_names_its_component() -> None:
    """A `*_problems` rule left out of VALIDATORS would never run; each names the component it
    belongs to (`core` or a roles/<name>), where it moves once components declare themselves."""
    import inspect

    from gpuctl import inventory_semantics as sem
    from gpuctl.paths import roles_dir

    rules = [f for f in vars(sem).values() if inspect.isfunction(f) and f.__module__ == sem.__name__
             and list(inspect.signature(f).parameters) == ["inv", "sku", "found"]]
    assert rules and set(rules) == set(sem.VALIDATORS) and len(sem.VALIDATORS) == len(set(sem.VALIDATORS))
    for f in rules:
        owner = (f.__doc__ or "").strip().rsplit("(", 1)[-1].rstrip(")")
        assert owner == "core" or (roles_dir() / owner).is_dir(), f"{f.__name__}: '{owner}' is no component"
