"""Issue 17: a newline (in the middle or trailing) in any string can never become a line of
its own in a command or a file written on a node.

Two layers, each checked for every string:

1. validation: every string leaf of a full inventory (every field, every role knob at its
   default, at any depth) given a newline is refused with `file:line: field:`;
2. by construction, validation bypassed: every role runs on @fake with every
   inventory-derived string of its NodeSpec and every string knob carrying the newline;
   either the role refuses the host ("refusing ...") or no command holds the injected text
   as words of its own (shlex-split: it stays inside one token) and no uploaded file holds it.

The named cases of the issue are reproduced at the role level too (each failed before).
"""

from __future__ import annotations

import copy
import re
import shlex
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuctl.components import all_defaults as role_defaults
from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory_text
from gpuctl.paths import inventories_dir
from gpuctl.rolerun import load_delivery_role
from gpuctl.runner.roles import load_role
from gpuctl.spec import ROLE_ORDER, FabricPort, LustreSpec, RaidSpec, VlanSpec
from gpuctl.yamlsrc import format_path

pytestmark = pytest.mark.deploy

INJECTIONS = {"middle": "\nPWNB", "trailing": "\n"}
NVCC = "/usr/local/cuda-13.0/bin/nvcc"


# ------------------------------------------------------------------ 1. validation

def _full_inventory() -> dict[str, Any]:
    """h100-8x4 plus every knob at its default under role_vars (knobs whose default the
    schema takes as an override: no null, no map of maps) and a threshold with a source."""
    data = yaml.safe_load((inventories_dir() / "h100-8x4.yaml").read_text())
    knobs = {}
    for k, v in role_defaults().items():
        if v is None or (isinstance(v, dict) and any(isinstance(x, dict) for x in v.values())):
            continue
        if isinstance(v, list) and not all(isinstance(x, str) for x in v):
            continue  # role_vars lists are lists of strings (package_mirror_user_ports cannot be overridden)
        knobs[k] = v
    data["role_vars"] = knobs
    data["thresholds"] = {"all_reduce_busbw_gb_s": {"min": 1, "source": "site acceptance"}}
    data["repos"] = {"mirror": "http://mirror.example:8080/nvidia", "keyring_sha256": "0" * 64}
    return data


def _string_leaves(data: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in _string_leaves(v, (*path, k))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in _string_leaves(v, (*path, i))]
    return [path] if isinstance(data, str) else []


def _set(data: Any, path: tuple, value: str) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def _get(data: Any, path: tuple) -> Any:
    for part in path:
        data = data[part]
    return data


FULL = _full_inventory()
LEAVES = _string_leaves(FULL)


def test_the_full_inventory_validates_and_has_many_strings() -> None:
    load_inventory_text(yaml.safe_dump(FULL, sort_keys=False), "inv.yaml", base_dir=inventories_dir())
    assert len(LEAVES) > 100, len(LEAVES)


@pytest.mark.parametrize("where", list(INJECTIONS))
def test_every_string_with_a_newline_is_refused_with_its_line_and_field(where: str) -> None:
    """All strings poisoned at once: the refusal names every one of them (file:line: field)."""
    data = copy.deepcopy(FULL)
    for path in LEAVES:
        _set(data, path, _get(data, path) + INJECTIONS[where])
    with pytest.raises(InputError) as exc:
        load_inventory_text(yaml.safe_dump(data, sort_keys=False), "inv.yaml", base_dir=inventories_dir())
    missed = [format_path(path) for path in LEAVES
              if not any(re.match(rf"inv\.yaml:\d+: {re.escape(format_path(path))}: ", p) for p in exc.value.problems)]
    assert not missed, (missed, exc.value.problems[:5])


@pytest.mark.parametrize("where", list(INJECTIONS))
@pytest.mark.parametrize("index", range(0, len(LEAVES), max(1, len(LEAVES) // 12)))
def test_one_string_with_a_newline_is_refused_alone(where: str, index: int) -> None:
    """A sample of the strings poisoned one at a time (the others valid)."""
    path = LEAVES[index]
    data = copy.deepcopy(FULL)
    _set(data, path, _get(data, path) + INJECTIONS[where])
    with pytest.raises(InputError) as exc:
        load_inventory_text(yaml.safe_dump(data, sort_keys=False), "inv.yaml", base_dir=inventories_dir())
    assert any(re.match(rf"inv\.yaml:\d+: {re.escape(format_path(path))}: ", p) for p in exc.value.problems), \
        exc.value.problems


# ------------------------------------------------------------------ 2. by construction

def _knob_poison(value: Any, inj: str, tag: str) -> Any:
    if isinstance(value, str):
        return f"pwn{tag}{inj}"
    if isinstance(value, list):
        return [*value, f"pwn{tag}{inj}"]
    if isinstance(value, dict):
        return {k: _knob_poison(v, inj, f"{tag}{k}") for k, v in value.items()
                if isinstance(v, str | list)}
    return value


def _poison(spec: Any, inj: str, keep_renderer: bool = False) -> Any:
    def v(tag: str) -> str:
        return f"pwn{tag}{inj}"

    f = spec.fabric
    ports = tuple(FabricPort(hca=v(f"h{i}"), interface=v(f"i{i}"), address=x.address)
                  for i, x in enumerate(f.ports or (FabricPort(hca="mlx5_0", interface="ib0", address=None),)))
    vlans = tuple(VlanSpec(id=x.id, name=v("vn"), parent=v("vp"), interface=v("vi"), address=x.address, mtu=x.mtu)
                  for x in spec.vlans)
    raid = spec.raid and RaidSpec(**{**spec.raid.model_dump(), "mount": "/" + v("raid")})
    lustre = LustreSpec(mgs_nids=("10.0.0.5@" + v("nid"),), fsname=v("fs"), mount="/" + v("lu"),
                        lnet=f"tcp0({v('ln')})", mount_options="flock," + v("mo"))
    repo = spec.repo.model_copy(update={"url": "https://mirror.example/" + v("url") + "/",
                                        "keyring_url": "https://mirror.example/" + v("key"),
                                        "keyring_path": "/usr/share/keyrings/" + v("kp"),
                                        "apt_proxy": "http://proxy.example:3128/" + v("px")})
    knobs = {k: _knob_poison(d, inj, k[:6]) for k, d in role_defaults().items()}
    if keep_renderer:  # the per-OS renderer map left alone so the network role has one to use
        knobs.pop("network_renderer")
    knobs.pop("nvidia_driver_reboot_timeout_s", None)
    return spec.model_copy(update={
        "fabric": f.model_copy(update={"ports": ports}), "vlans": vlans, "raid": raid, "lustre": lustre,
        "ssh_user": v("user"), "repo": repo, "management_interface": spec.management_interface,
        "role_vars": knobs, "roles": {r: "" for r in spec.roles},
        # unit names are resolved into the spec (install and verify read them there)
        "services": tuple(s.model_copy(update={"name": v(f"u{i}")}) for i, s in enumerate(spec.services)),
    })


def _words_escape(command: str) -> bool:
    """True when an injected value does not stay whole inside one shell token."""
    if "pwn" not in command:
        return False
    try:
        tokens = shlex.split(command)
    except ValueError:
        return True
    for i, t in enumerate(tokens):  # pyinfra's `sh -c '<cmd>'`: the inner command too
        if t == "-c" and i + 1 < len(tokens) and tokens[i + 1] != command and _words_escape(tokens[i + 1]):
            return True
    # a value stays whole when its newline (raw, or escaped in a message) follows it in the
    # same token; a token that ends at the value, or starts with the injected second line, split
    return any(re.search(r"pwn[A-Za-z0-9_]*(?![A-Za-z0-9_\n\\])", t) or t.startswith("PWNB") for t in tokens)


def _file_leaks(files: dict[str, Any]) -> list[str]:
    """Files holding an injected value with its newline (a line break written from a value)."""
    return [path for path, content in files.items()
            if isinstance(content, str) and re.search(r"pwn[A-Za-z0-9_]*\n", content)]


def _responses(role: str, spec: Any) -> dict | None:
    import test_shell_safety as safety
    from gpu_scenarios import responses

    if role == "bench_tools":
        return responses("ubuntu2204-fresh", commands=[f"{NVCC}={NVCC}"])
    try:
        return safety._proceeding_responses(role, spec)
    except KeyError:
        return None


def _check_host(h: Any) -> None:
    bad = [c for c in h.commands if _words_escape(c)]
    assert not bad, bad
    leaks = _file_leaks(h.files)
    assert not leaks, {p: h.files[p] for p in leaks}


#: Roles whose commands or files carry inventory strings or knobs on h100-8x4 (the others
#: take only matrix pins, or are not applicable there): for these the walk must see the
#: injected value reach a command or a refusal, or it would check nothing.
REACHED_BY_INVENTORY_STRINGS = ("base", "nvidia_repo", "nvidia_driver", "gds", "peermem", "network", "nvme_raid",
                                "lustre_client", "bench_tools")


@pytest.mark.parametrize("where", list(INJECTIONS))
@pytest.mark.parametrize("role", ROLE_ORDER)
def test_no_role_turns_an_injected_newline_into_a_line_or_word(fake, tmp_path, role: str, where: str) -> None:
    from gpu_scenarios import inventory
    from test_role_nvidia_driver import FAST

    base = inventory(tmp_path, "ubuntu2204") if role.startswith("nvidia_") or role == "bench_tools" \
        else "h100-8x4.yaml"
    specs = [_poison(s, INJECTIONS[where], keep_renderer=role == "network")
             for s in fake.specs(base, limit=("gpu-01",))]
    reached = 0
    for responses in (None, _responses(role, specs[0])):
        h = fake.run(load_role(role).install, specs, responses=responses, options=FAST)["gpu-01"]
        _check_host(h)
        reached += any("pwn" in c for c in h.commands) or "refusing" in h.error
    if role in REACHED_BY_INVENTORY_STRINGS:
        assert reached, "no injected value reached a command and nothing was refused: the test checks nothing"


@pytest.mark.parametrize("where", list(INJECTIONS))
def test_handover_never_writes_an_injected_line(fake, tmp_path, where: str) -> None:
    from test_role_handover import keypair, setup

    keys = {n: keypair(tmp_path, n) for n in ("alice", "bob", "provider", "probe")}
    loaded, plan, _ = setup(tmp_path, keys, remove=False)
    from gpuctl.spec import resolve

    specs = [_poison(s, INJECTIONS[where]) for s in resolve(loaded)]
    h = fake.run(load_delivery_role("handover").install, specs, kwargs={"plan": plan},
                 responses={"visudo": ""})["gpu-01"]
    _check_host(h)
    assert h.status != "ok" and "refusing" in h.error, h.error


# ------------------------------------------------------------------ the named cases, at the role level

def _with(specs: list[Any], **knobs: Any) -> list[Any]:
    return [s.model_copy(update={"role_vars": {**s.role_vars, **knobs}}) for s in specs]


def test_nvcc_flags_newline_never_runs_a_command(fake, tmp_path) -> None:
    from gpu_scenarios import inventory, run_role

    specs = _with(fake.specs(inventory(tmp_path, "ubuntu2204"), limit=["gpu-01"]),
                  bench_tools_bwprobe_nvcc_flags="-O2\ntouch /tmp/x\n:")
    h = run_role(fake, "bench_tools", specs, "ubuntu2204-fresh", commands=[f"{NVCC}={NVCC}"])
    compile_cmd = [c for c in h.commands if NVCC in c and ".new" in c]
    assert compile_cmd, h.commands
    words = shlex.split(compile_cmd[0])
    assert "touch" not in words and ":" not in words, words  # before: `nvcc -O2\ntouch /tmp/x\n: -o ...` ran touch


def test_initramfs_command_outside_the_known_commands_never_runs(fake) -> None:
    import test_role_nvme_raid as raid

    specs = _with(raid.specs(fake), nvme_raid_initramfs_command={"apt": "rm -rf /", "dnf": "rm -rf /"})
    h = fake.run(load_role("nvme_raid").install, specs, responses=raid.responses())["gpu-01"]
    assert not any("rm -rf /" in c and "update-initramfs" not in c and "not a known" not in c
                   for c in h.commands), h.commands
    assert h.status == "failed" and "Refuse an unknown initramfs command" in h.error, h.error


def test_mount_options_newline_never_adds_an_fstab_line(fake) -> None:
    import test_role_nvme_raid as raid

    specs = _with(raid.specs(fake), nvme_raid_mount_options="defaults,nofail 0 0\n/dev/sdz /etc xfs defaults")
    h = fake.run(load_role("nvme_raid").install, specs, responses=raid.responses())["gpu-01"]
    assert not any("/dev/sdz" in c for c in h.commands), [c for c in h.commands if "/dev/sdz" in c]
    assert h.status == "failed" and "refusing the fstab field" in h.error, h.error


def test_sudo_rule_newline_never_reaches_sudoers(fake, tmp_path) -> None:
    from test_role_handover import keypair, setup

    from gpuctl.spec import resolve

    keys = {n: keypair(tmp_path, n) for n in ("alice", "bob", "provider", "probe")}
    loaded, plan, _ = setup(tmp_path, keys, remove=False)
    specs = _with(resolve(loaded), handover_sudo_rule="ALL=(ALL:ALL) NOPASSWD: ALL\nmallory ALL=(ALL) NOPASSWD: ALL")
    h = fake.run(load_delivery_role("handover").install, specs, kwargs={"plan": plan},
                 responses={"visudo": ""})["gpu-01"]
    assert not any("mallory" in str(c) for c in h.files.values()), h.files
    assert h.status == "failed" and "refusing" in h.error, h.error


# ------------------------------------------------------------------ fuzz: hostile knob values past validation

def _role_of(knob: str) -> str:
    return max((r for r in ROLE_ORDER if knob.startswith(r + "_")), key=len, default="")


_STRING_KNOBS = sorted(k for k, v in role_defaults().items() if isinstance(v, str) and _role_of(k))
_CONTROL = [chr(c) for c in (*range(0x20), 0x7F, 0x85)] + ["\u2028", "\u2029"]


def _whole(value: str, command: str) -> bool:
    """Wherever the value (or a part of it, like a path's folder) appears in the command, its
    first hostile character stays in the same shell token as the marker before it: a word
    split or a line break at the injection point would separate them."""
    if "pwnQ" not in command:
        return True
    try:
        tokens = shlex.split(command)
    except ValueError:
        return False
    first = value[4]
    heads = ("pwnQ" + first, "pwnQ" + repr(first)[1:-1])  # raw, or escaped in a message
    return all(any(h in t for h in heads) for t in tokens if "pwnQ" in t)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(_STRING_KNOBS),
       st.one_of(st.lists(st.sampled_from(_CONTROL), min_size=1, max_size=2).map("".join),
                 st.sampled_from(["\ntouch /tmp/pwned\n", "'; id; '", "$(id)", " -f", "/../../etc/passwd"])))
def test_fuzz_hostile_knob_past_validation_stays_one_token(fake, knob: str, payload: str) -> None:
    """Validation bypassed (host data, a future source): a hostile value in any string knob
    reaches no command except inside one token, and no file with its control character."""
    role = _role_of(knob)
    value = f"pwnQ{payload}"
    specs = [s.model_copy(update={"roles": {r: "" for r in s.roles}, "role_vars": {knob: value}})
             for s in fake.specs("h100-8x4.yaml", limit=("gpu-01",))]
    for responses in (None, _responses(role, specs[0])):
        h = fake.run(load_role(role).install, specs, responses=responses)["gpu-01"]
        bad = [c for c in h.commands if not _whole(value, c)]
        assert not bad, bad
        if any(ch in payload for ch in _CONTROL):
            leaks = [p for p, c in h.files.items() if isinstance(c, str) and value in c]
            assert not leaks, leaks


def test_extra_knob_values_go_through_the_same_typed_rule(fake) -> None:
    """A knob given outside the inventory (--extra / host data) is judged like role_vars: the
    initramfs command `rm -rf /` fails the host before any command, naming the knob."""
    import test_role_nvme_raid as raid

    from gpuctl.deploy_context import RunOptions

    opts = RunOptions(extra={"nvme_raid_initramfs_command": "{apt: rm -rf /}"})
    h = fake.run(load_role("nvme_raid").install, raid.specs(fake), responses=raid.responses(), options=opts)["gpu-01"]
    assert h.status == "failed" and "nvme_raid_initramfs_command.apt" in h.error, h.error
    assert not h.execute_commands, h.execute_commands


@pytest.mark.parametrize("where", list(INJECTIONS))
def test_package_mirror_never_writes_an_injected_line(fake, where: str) -> None:
    from test_role_package_mirror import cache_host_spec

    spec = _poison(cache_host_spec(), INJECTIONS[where])
    h = fake.run(load_delivery_role("package_mirror").install, [spec])["gpu-01"]
    _check_host(h)
    assert (h.status != "ok" and "refusing" in h.error) or any("pwn" in c for c in h.commands), h.error
