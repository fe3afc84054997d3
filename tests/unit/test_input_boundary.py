"""Issue 17, items 1 and 2: the typed boundary every inventory string crosses.

Each named case of the issue is reproduced here: a control character anywhere (a newline,
a trailing newline that `re.match(...$)` let through, tab, NUL, U+2028 ...), knobs that took
anything (commands, paths, mkfs force flags), mount points compared as strings, and a SKU
name that was a path. Each must be refused with `file:line: field:` (exit 2 at the CLI).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory_text
from gpuctl.paths import inventories_dir

H100 = (inventories_dir() / "h100-8x4.yaml").read_text()
ROCE = (inventories_dir() / "h200-roce-8x8.yaml").read_text()


def q(value: str) -> str:
    """A YAML double-quoted scalar holding exactly `value` (JSON escapes are YAML escapes)."""
    return json.dumps(value)


def problems_of(text: str) -> list[str]:
    with pytest.raises(InputError) as exc:
        load_inventory_text(text, "inv.yaml", base_dir=inventories_dir())
    return exc.value.problems


def assert_refused(text: str, field: str) -> list[str]:
    problems = problems_of(text)
    assert any(re.match(rf"inv\.yaml:\d+: {field}: ", p) for p in problems), problems
    return problems


def sub(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def with_role_vars(text: str, body: str) -> str:
    return text + f"role_vars:\n{body}\n"


# ------------------------------------------------------------------ item 1: newlines

def test_nvcc_flags_with_newlines_refused() -> None:
    flags = "-O2\ntouch /tmp/x\n:"
    text = with_role_vars(H100, f"  bench_tools_bwprobe_nvcc_flags: {q(flags)}")
    assert_refused(text, r"role_vars\.bench_tools_bwprobe_nvcc_flags")


def test_mount_options_second_fstab_line_refused() -> None:
    value = "defaults,nofail 0 0\n/dev/sdz /etc xfs defaults"
    assert_refused(with_role_vars(H100, f"  nvme_raid_mount_options: {q(value)}"),
                   r"role_vars\.nvme_raid_mount_options")


TRAILING_NEWLINE = [
    (H100, "mount: /raid}", f"mount: {q('/raid' + chr(10))}}}", r"storage\.raid\.mount"),
    (H100, "mount: /lustre,", f"mount: {q('/lustre' + chr(10))},", r"storage\.lustre\.mount"),
    (H100, "mount: /lustre,", f"mount: /lustre, mount_options: {q('flock' + chr(10))},",
     r"storage\.lustre\.mount_options"),
    (H100, 'mgs_nids: ["10.100.0.5@tcp"]', f"mgs_nids: [{q('10.100.0.5@tcp' + chr(10))}]",
     r"storage\.lustre\.mgs_nids\[0\]"),
    (H100, 'lnet: "tcp0(eno1.100)"', f"lnet: {q('tcp0(eno1.100)' + chr(10))}", r"storage\.lustre\.lnet"),
    (H100, "hcas_per_node: 8", "hcas_per_node: 8\n  hcas: [" + ", ".join(
        [q("mlx5_0\n")] + [f"mlx5_{i}" for i in range(1, 8)]) + "]", r"fabric\.hcas\[0\]"),
    (ROCE, "interfaces: [ens1f0np0,", f"interfaces: [{q('ens1f0np0' + chr(10))},", r"fabric\.interfaces\[0\]"),
    (H100, "ssh: {user: root,", f"ssh: {{user: {q('root' + chr(10))},", r"ssh\.user"),
    (H100, "key: ~/.ssh/id_ed25519}", f"key: {q('~/.ssh/id_ed25519' + chr(10))}}}", r"ssh\.key"),
    (H100, "address: 10.0.0.11,", f"address: {q('10.9.9.11' + chr(10))},", r"nodes\[0\]\.address"),
]


@pytest.mark.parametrize(("base", "old", "new", "field"), TRAILING_NEWLINE, ids=[t[3] for t in TRAILING_NEWLINE])
def test_trailing_newline_refused(base: str, old: str, new: str, field: str) -> None:
    assert_refused(sub(base, old, new), field)


def test_cache_address_trailing_newline_refused() -> None:
    text = sub(H100, "repos: {mirror: null}",
               f"repos: {{mirror: null, cache_host: gpu-01, cache_address: {q('10.0.0.11' + chr(10))}}}")
    assert_refused(text, r"repos\.cache_address")


def test_sudo_rule_with_a_newline_refused() -> None:
    rule = "ALL=(ALL:ALL) NOPASSWD: ALL\nmallory ALL=(ALL) NOPASSWD: ALL"
    assert_refused(with_role_vars(H100, f"  handover_sudo_rule: {q(rule)}"), r"role_vars\.handover_sudo_rule")


CONTROL = ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("ch", CONTROL, ids=lambda c: f"U+{ord(c):04X}")
def test_any_control_character_anywhere_refused(ch: str) -> None:
    """Fields no rule looked at before (a rack name's neighbour: a threshold source, a map knob's
    entry, a list knob's item, the cluster name) refuse it too, each naming its line and field."""
    cases = [
        (sub(H100, "cluster: {name: h100-8x4,", f"cluster: {{name: {q('h100-8x4' + ch)},"), r"cluster\.name"),
        (with_role_vars(H100, f"  nvme_raid_mdadm_conf: {{apt: {q('/etc/mdadm/mdadm.conf' + ch)}}}"),
         r"role_vars\.nvme_raid_mdadm_conf\.apt"),
        (with_role_vars(H100, f"  base_packages_apt: [curl, {q('kmod' + ch)}]"), r"role_vars\.base_packages_apt\[1\]"),
        (sub(H100, "racks:", f"thresholds:\n  all_reduce_busbw_gb_s: {{min: 1, source: {q('x' + ch + 'y')}}}\n"
             "racks:"), r"thresholds\.all_reduce_busbw_gb_s\.source"),
    ]
    for text, field in cases:
        problems = assert_refused(text, field)
        assert any(f"U+{ord(ch):04X}" in p for p in problems), problems


def test_cli_exit_2_with_file_line_field(tmp_path: Path) -> None:
    from gpuctl.cli.main import main

    inv = tmp_path / "inv.yaml"
    inv.write_text(sub(H100, "mount: /raid}", f"mount: {q('/raid' + chr(10))}}}"))
    result = CliRunner().invoke(main, ["inventory", "validate", str(inv)])
    assert result.exit_code == 2, result.output
    assert re.search(r"inv\.yaml:\d+: storage\.raid\.mount: ", result.output), result.output
    assert "Traceback" not in result.output


# ------------------------------------------------------------------ item 2: knobs that took anything

@pytest.mark.parametrize(("body", "field"), [
    ("  nvme_raid_initramfs_command: {apt: rm -rf /}", r"role_vars\.nvme_raid_initramfs_command\.apt"),
    ("  nvme_raid_initramfs_command: {dnf: 'dracut -f; id'}", r"role_vars\.nvme_raid_initramfs_command\.dnf"),
    ("  base_sysctl_file: /etc/passwd", r"role_vars\.base_sysctl_file"),
    ("  nvme_raid_mdadm_conf: {apt: /etc/fstab}", r"role_vars\.nvme_raid_mdadm_conf\.apt"),
    ("  nvme_raid_mdadm_conf: {dnf: /etc/shadow}", r"role_vars\.nvme_raid_mdadm_conf\.dnf"),
    ("  base_sysctl_file: /etc/sysctl.d/../passwd", r"role_vars\.base_sysctl_file"),
    ("  network_nccl_conf: /etc/sudoers", r"role_vars\.network_nccl_conf"),
    ("  handover_sudoers_dir: /etc", r"role_vars\.handover_sudoers_dir"),
    ("  nvidia_driver_confirm_command: rm -rf /", r"role_vars\.nvidia_driver_confirm_command"),
    ("  handover_login_probe_command: 'true; echo gpuctl-login-ok'", r"role_vars\.handover_login_probe_command"),
    ("  handover_sudo_rule: 'ALL=(ALL) ALL'", r"role_vars\.handover_sudo_rule"),
    ("  bench_tools_bwprobe_nvcc_flags: '-O2 -o /etc/passwd'", r"role_vars\.bench_tools_bwprobe_nvcc_flags"),
    ("  bench_tools_bwprobe_nvcc_flags: '-O2 -Xcompiler=-wrapper,/bin/sh'",
     r"role_vars\.bench_tools_bwprobe_nvcc_flags"),
    ("  nvme_raid_mount_options: 'defaults,nofail,user'", r"role_vars\.nvme_raid_mount_options"),
    ("  nvme_raid_mount_options: 'defaults,nofail,x-gvfs-evil=/x'", r"role_vars\.nvme_raid_mount_options"),
    ("  package_mirror_cache_dir: /var/cache/apt", r"role_vars\.package_mirror_cache_dir"),
    ("  bench_tools_nccl_tests_dir: /opt/gpuctl/{version}/{evil}", r"role_vars\.bench_tools_nccl_tests_dir"),
    ("  network_renderer: {debian12: 'ifupdown; id'}", r"role_vars\.network_renderer\.debian12"),
    ("  bench_tools_nccl_tests_source: 'https://x.example/{evil}.tar.gz'", r"role_vars\.bench_tools_nccl_tests_source"),
    ("  package_mirror_cache_dir: /var/cache", r"role_vars\.package_mirror_cache_dir"),
    ("  package_mirror_user_ports: ['80', '80; id']", r"role_vars\.package_mirror_user_ports\[1\]"),
    ("  base_packages_apt: [curl, 'kmod;id']", r"role_vars\.base_packages_apt\[1\]"),
])
def test_typed_knob_refused(body: str, field: str) -> None:
    assert_refused(with_role_vars(H100, body), field)


@pytest.mark.parametrize("flags", ["-qf", "-Kf", "-qF", "-f", "-F", "--force", "-q -f", "-fq"])
def test_mkfs_force_refused_however_spelled(flags: str) -> None:
    for fs in ("xfs", "ext4"):
        problems = assert_refused(with_role_vars(H100, f"  nvme_raid_mkfs_options: {{{fs}: {q(flags)}}}"),
                                  rf"role_vars\.nvme_raid_mkfs_options\.{fs}")
        assert any("overwrite" in p or "not allowed" in p for p in problems), problems


@pytest.mark.parametrize("mount", ["/etc/", "//etc", "/./etc", "/lib", "/lib64", "/proc", "/dev", "/boot/efi",
                                   "/usr/local", "/sys/fs", "/run", "/var/lib/dpkg", "/", "/raid/../etc", "/bin"])
def test_raid_mount_on_a_system_folder_refused(mount: str) -> None:
    assert_refused(sub(H100, "mount: /raid}", f"mount: {q(mount)}}}"), r"storage\.raid\.mount")


@pytest.mark.parametrize("mount", ["/", "/etc", "//lustre/../etc", "/proc/x"])
def test_lustre_mount_on_a_system_folder_refused(mount: str) -> None:
    assert_refused(sub(H100, "mount: /lustre,", f"mount: {q(mount)},"), r"storage\.lustre\.mount")


@pytest.mark.parametrize(("raid", "lustre"), [("/raid", "/raid/"), ("/raid", "/raid/x"), ("/data/x", "/data"),
                                              ("/raid", "//raid")])
def test_overlapping_mounts_refused(raid: str, lustre: str) -> None:
    text = sub(H100, "mount: /raid}", f"mount: {q(raid)}}}")
    text = sub(text, "mount: /lustre,", f"mount: {q(lustre)},")
    assert_refused(text, r"storage\.(lustre|raid)\.mount")


@pytest.mark.parametrize("name", ["../../elsewhere/x", "/etc/passwd", "hgx-h100-80gb/../hgx-h100-80gb", "x.yaml",
                                  "../skus/hgx-h100-80gb"])
def test_sku_must_be_a_catalog_name(name: str) -> None:
    """`../skus/hgx-h100-80gb` resolved to a real SKU file through a traversal and loaded."""
    problems = assert_refused(sub(H100, "sku: hgx-h100-80gb", f"sku: {q(name)}"), r"cluster\.sku")
    assert any("is not a SKU name" in p for p in problems), problems


@pytest.mark.parametrize("name", ["../matrices/r570-cuda12.8", "/tmp/m.yaml", "r570-cuda12.8.yaml",
                                  "../../matrices/r570-cuda12.8.yaml"])
def test_matrix_must_be_a_catalog_name(name: str) -> None:
    problems = assert_refused(sub(H100, "matrix: r570-cuda12.8", f"matrix: {q(name)}"), r"cluster\.matrix")
    assert any("is not a matrix name" in p for p in problems), problems


def test_every_string_knob_has_a_type_and_its_default_passes_it() -> None:
    """A new knob cannot slip past the boundary untyped: every string (and list item, map
    entry) in every roles/*/defaults.yaml has a declared type, and the default satisfies it."""
    from gpuctl.components import all_defaults as role_defaults
    from gpuctl.knobs import KNOBS, knob_problems

    def strings(v: object) -> bool:
        if isinstance(v, dict):
            return any(strings(x) for x in v.values())
        if isinstance(v, list):
            return any(strings(x) for x in v)
        return isinstance(v, str)

    defaults = role_defaults()
    untyped = [k for k, v in defaults.items() if strings(v) and k not in KNOBS]
    assert not untyped, untyped
    bad = {k: knob_problems(k, v) for k, v in defaults.items() if knob_problems(k, v)}
    assert not bad, bad


# ------------------------------------------------------------------ valid values still pass

@pytest.mark.parametrize("body", [
    "  bench_tools_bwprobe_nvcc_flags: '-O3 -std=c++17 -lineinfo -arch=sm_90'",
    "  bench_tools_bwprobe_nvcc_flags: [-O2, -std=c++17]",
    "  nvme_raid_mkfs_options: {xfs: '-q -K', ext4: '-q -E lazy_itable_init=0'}",
    "  nvme_raid_mount_options: 'defaults,nofail,noatime,discard'",
    "  nvme_raid_initramfs_command: {apt: update-initramfs -u -k all, dnf: dracut -f --regenerate-all}",
    "  nvme_raid_mdadm_conf: {dnf: /etc/mdadm/mdadm.conf}",
    "  base_sysctl_file: /etc/sysctl.d/99-gpuctl.conf",
    "  bench_tools_bin_dir: /usr/local/sbin",
    "  bench_tools_nccl_tests_dir: /opt/gpuctl/nccl-tests-{version}-site",
    "  handover_shell: /usr/bin/zsh",
    "  lustre_client_mount_options_extra: '_netdev,x-systemd.requires=network-online.target'",
])
def test_typed_knob_accepts_sane_values(body: str) -> None:
    load_inventory_text(with_role_vars(H100, body), "inv.yaml", base_dir=inventories_dir())


def test_examples_with_other_mounts_still_validate() -> None:
    text = sub(H100, "mount: /raid}", "mount: /scratch/nvme}")
    load_inventory_text(sub(text, "mount: /lustre,", "mount: /mnt/lustre,"), "inv.yaml", base_dir=inventories_dir())


@pytest.mark.parametrize("ch", ["\n", "\t", "\u2028"], ids=lambda c: f"U+{ord(c):04X}")
def test_a_site_matrix_with_a_control_character_is_refused_with_its_line(tmp_path: Path, ch: str) -> None:
    """Matrices (and SKUs) go through the same boundary: a site matrix beside the inventory
    whose package version ends in a newline reached `apt-get install name=version\\n`."""
    from gpuctl.inventory import load_inventory

    matrix = (inventories_dir().parent / "matrices" / "r570-cuda12.8.yaml").read_text()
    (tmp_path / "matrices").mkdir()
    bad = sub(matrix, "fabricmanager: {version: 570.133.20,", f"fabricmanager: {{version: {q('570.133.20' + ch)},")
    (tmp_path / "matrices" / "site.yaml").write_text(bad.replace("name: r570-cuda12.8", "name: site"))
    inv = tmp_path / "inv.yaml"
    inv.write_text(sub(H100, "matrix: r570-cuda12.8", "matrix: site"))
    with pytest.raises(InputError) as exc:
        load_inventory(inv)
    text = "\n".join([str(exc.value), *exc.value.problems])
    assert re.search(r"site\.yaml:\d+: fabricmanager\.version: .*control character", text), text
