"""Shell safety (issue 12): inventory values never reach a root shell unquoted.

Deploy tier: every role runs on @fake hosts whose NodeSpec carries a metacharacter
payload in every inventory-derived string (validation bypassed by building the spec
directly); each generated command is shlex-split and the payload must only ever appear
intact inside one token. Unit tier: the loader refuses each payload per field with
file:line: field.
"""

from __future__ import annotations

import re
import shlex

import pytest

from gpuctl.errors import InputError
from gpuctl.inventory import load_inventory_text
from gpuctl.paths import inventories_dir
from gpuctl.runner.roles import load_role
from gpuctl.spec import ROLE_ORDER, FabricPort, LustreSpec, RaidSpec, VlanSpec

MARK = "PWN"
PAYLOADS = [
    "PWN;id", "PWN$(id)", "PWN`id`", "PWN|id", "PWN&id", "PWN\nid", "PWN'x", 'PWN"x', "PWN x",
]
H100 = (inventories_dir() / "h100-8x4.yaml").read_text()
ROCE = (inventories_dir() / "h200-roce-8x8.yaml").read_text()


def _poison(spec, p: str):
    f = spec.fabric
    ports = tuple(FabricPort(hca=f"{p}h{i}", interface=f"{p}i{i}", address=x.address)
                  for i, x in enumerate(f.ports or (FabricPort(hca="mlx5_0", interface="ib0", address=None),)))
    vlans = tuple(VlanSpec(id=v.id, name=f"{p}v", parent=f"{p}par", interface=f"{p}vif", address=v.address,
                           mtu=v.mtu) for v in spec.vlans)
    raid = spec.raid and RaidSpec(**{**spec.raid.model_dump(), "mount": f"/{p}raid"})
    lustre = LustreSpec(mgs_nids=(f"10.0.0.5@{p}",), fsname=f"{p}fs", mount=f"/{p}lu", lnet=f"tcp0({p})",
                        mount_options=f"flock,{p}")
    return spec.model_copy(update={
        "fabric": f.model_copy(update={"ports": ports}), "vlans": vlans, "raid": raid, "lustre": lustre,
        "ssh_user": f"{p}user", "node": spec.node,
        "role_vars": {**{k: f"{p}rv" for k in _string_role_vars()}, **_poisoned_collections(p)},
        # unit names are resolved into the spec (install and verify read them there)
        "services": tuple(s.model_copy(update={"name": f"{p}svc"}) for s in spec.services),
    })


def _role_defaults() -> dict:
    import yaml

    from gpuctl.paths import roles_dir
    out: dict = {}
    for path in sorted(roles_dir().glob("*/defaults.yaml")):
        out.update(yaml.safe_load(path.read_text()) or {})
    return out


def _string_role_vars() -> list[str]:
    return [k for k, v in _role_defaults().items() if isinstance(v, str)]


def _poisoned_collections(p: str) -> dict:
    """List knobs get a poisoned item; map knobs a poisoned string in every string entry."""
    out: dict = {}
    for k, v in _role_defaults().items():
        if isinstance(v, list):
            out[k] = [*v, f"{p}item"]
        elif isinstance(v, dict):
            out[k] = {e: f"{p}{k}" for e, x in v.items() if isinstance(x, str)}
    return out


def _unsafe(command: str, payload: str) -> bool:
    """True when the payload is not one intact piece of a single shell token."""
    if MARK not in command:
        return False
    try:
        tokens = shlex.split(command, posix=True)
    except ValueError:
        return True
    # pyinfra's `sh -c '<cmd>'` wrapping: check the inner command too
    for i, t in enumerate(tokens):
        if (t == "-c" and i + 1 < len(tokens) and MARK in tokens[i + 1] and tokens[i + 1] != command
                and _unsafe(tokens[i + 1], payload)):
            return True
    return any(MARK in t and payload not in t for t in tokens)


@pytest.mark.deploy
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: repr(p))
@pytest.mark.parametrize("role", ROLE_ORDER)
def test_no_payload_reaches_a_shell_unquoted(fake, role: str, payload: str) -> None:
    specs = [_poison(s, payload) for s in fake.specs("h100-8x4.yaml", limit=("gpu-01",))]
    specs = [s.model_copy(update={"roles": {r: "" for r in s.roles}}) for s in specs]
    run = fake.run(load_role(role).install, specs)
    h = run["gpu-01"]
    bad = [c for c in h.commands if _unsafe(c, payload)]
    assert not bad, bad


def _proceeding_responses(role: str, spec) -> dict:
    """Host facts under which the role gets past its own preconditions (the SSH interface
    found, blank NVMe drives, the Lustre module built, the driver module built for the boot
    kernel), so its later commands are checked too: without them these roles refuse early
    and emit little."""
    import test_role_lustre_client as lustre
    import test_role_network as network
    import test_role_nvidia_driver as driver
    import test_role_nvme_raid as raid
    from gpu_scenarios import responses

    return {"network": network.fresh, "nvme_raid": raid.responses,
            "lustre_client": lambda: lustre.fresh(spec),
            "nvidia_repo": lambda: responses("ubuntu2204-fresh"),
            "nvidia_driver": lambda: driver.Node().responses("ubuntu2204-fresh")}[role]()


DEEP_ROLES = ["network", "nvme_raid", "lustre_client", "nvidia_repo", "nvidia_driver"]


def _deep_specs(fake, tmp_path, role: str, payload: str) -> list:
    """The poisoned spec of one node whose role proceeds: an inventory with a verified key
    (nvidia_repo refuses to go on without one), the repository URLs poisoned as well."""
    from gpu_scenarios import inventory

    base = inventory(tmp_path, "ubuntu2204") if role.startswith("nvidia_") else "h100-8x4.yaml"
    specs = [_poison(s, payload) for s in fake.specs(base, limit=("gpu-01",))]
    out = []
    for s in specs:
        repo = s.repo.model_copy(update={"url": f"https://mirror.example/{payload}/",
                                         "keyring_url": f"https://mirror.example/{payload}.pub",
                                         "keyring_path": f"/usr/share/keyrings/{payload}.gpg",
                                         "apt_proxy": f"http://proxy.example:3128/{payload}"})
        # string knobs poisoned; the per-OS renderer map left alone so the role has one to use;
        # the driver's confirm command is a command by design (validated as one) and its
        # reboot timing knobs are numbers
        knobs = {k: f"{payload}rv" for k in _string_role_vars()
                 if k not in ("nvidia_driver_confirm_command",)}
        out.append(s.model_copy(update={"roles": {r: "" for r in s.roles}, "repo": repo, "role_vars": knobs}))
    return out


@pytest.mark.deploy
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: repr(p))
@pytest.mark.parametrize("role", DEEP_ROLES)
def test_no_payload_reaches_a_shell_unquoted_where_the_role_proceeds(fake, tmp_path, role: str,
                                                                     payload: str) -> None:
    from test_role_nvidia_driver import FAST

    specs = _deep_specs(fake, tmp_path, role, payload)
    h = fake.run(load_role(role).install, specs, responses=_proceeding_responses(role, specs[0]),
                 options=FAST)["gpu-01"]
    if h.status != "ok":
        # a newline cannot be written into a file (templates refuse it) nor a blank into an
        # fstab field: the role refuses the host, naming the value (issue 17)
        assert any(c in payload for c in "\n ") and "refusing" in h.error, h.error
    else:
        assert any(MARK in c for c in h.commands), "the payload never reached a command: the test checks nothing"
    bad = [c for c in h.commands if _unsafe(c, payload)]
    assert not bad, bad


@pytest.mark.parametrize(("old", "new", "field"), [
    ("hcas_per_node: 8", "hcas_per_node: 8\n  hcas: [\"mlx5_0;id\", b, c, d, e, f, g, h]", r"fabric\.hcas"),
    ("hcas_per_node: 8", "hcas_per_node: 8\n  interfaces: [\"ib0$(id)\", b, c, d, e, f, g, h]", r"fabric\.interfaces"),
    ("mount: /raid", 'mount: "/raid;rm -rf /"', r"storage\.raid\.mount"),
    ("mount: /lustre", 'mount: "/lu`id`"', r"storage\.lustre\.mount"),
    ("mount: /lustre", 'mount: /lustre, mount_options: "flock;id"', r"storage\.lustre\.mount_options"),
    ("mount: /lustre", 'mount: "/lu stre"', r"storage\.lustre\.mount"),
])
def test_loader_refuses_payload_with_file_line_field(old: str, new: str, field: str) -> None:
    assert old in H100, old
    text = H100.replace(old, new, 1)
    with pytest.raises(InputError) as exc:
        load_inventory_text(text, "inv.yaml", base_dir=inventories_dir())
    assert any(re.match(rf"inv\.yaml:\d+: {field}: ", p) for p in exc.value.problems), exc.value.problems


@pytest.mark.parametrize(("key", "value"), [("user", "root;id"), ("user", "ro ot"), ("key", "~/.ssh/k$(id)"),
                                            ("key", "~/.ssh/k`id`"), ("known_hosts", "/x|y")])
def test_loader_refuses_ssh_payload(key: str, value: str) -> None:
    text = re.sub(r"^ssh: .*$", f"ssh: {{{key}: {value!r}}}".replace("'", '"'), H100, count=1, flags=re.M)
    assert text != H100
    with pytest.raises(InputError) as exc:
        load_inventory_text(text, "inv.yaml", base_dir=inventories_dir())
    assert any(re.match(rf"inv\.yaml:\d+: ssh\.{key}: ", p) for p in exc.value.problems), exc.value.problems


def test_loader_refuses_role_var_payload() -> None:
    key = _string_role_vars()[0]
    text = H100 + f'\nrole_vars: {{{key}: "x;id $(id)"}}\n'
    with pytest.raises(InputError) as exc:
        load_inventory_text(text, "inv.yaml", base_dir=inventories_dir())
    assert any(re.match(rf"inv\.yaml:\d+: role_vars\.{key}: ", p) for p in exc.value.problems), exc.value.problems
