"""The inventory's rules beyond its schema: the shared model's here, each component's beside it.

`semantic_problems(inv, smap, sku)` runs the shared model's rules (`VALIDATORS`, this module)
and then every component's own (`Component.validate`, declared in roles/<component>/__init__.py
and gathered through the registry `gpuctl.components.validators()`). Each rule takes the typed
inventory, its SKU (None when the SKU name did not load) and a `gpuctl.validation.Findings`
that records an error or a warning at a field path (`file:line: field: message`). The rules
here end their docstring with `(core)`: they belong to no component.

What stays here is what belongs to no one component: the nodes (names, SSH endpoints,
addresses in management.cidr) and racks (names, power budget against the SKU), the threshold
overrides (judged by several components' checks and by the bench), role_vars (every
component's knobs, judged by one rule on the types and defaults the components declare), each
node's CPU memory against the SKU, and the preflight override. A rule about one component's
section (fabric and VLANs: network; storage.raid: nvme_raid; storage.lustre: lustre_client;
the package cache: package_mirror; handover accounts: handover) lives in that component's
roles/<component>/validate.py.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from gpuctl.boundary import is_host
from gpuctl.catalog import THRESHOLD_NAMES, Sku
from gpuctl.components import all_defaults, validators
from gpuctl.knobs import flag_knobs, knob_problems
from gpuctl.validation import Findings, Problem, Validator
from gpuctl.yamlsrc import SourceMap

if TYPE_CHECKING:  # gpuctl.inventory runs these rules when it loads a file
    from gpuctl.inventory import Inventory


def nodes_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Node names and SSH endpoints unique; addresses are hosts, inside management.cidr; one @local. (core)"""
    names = Counter(n.name for n in inv.nodes)
    endpoints = Counter((n.address, n.ssh_port or inv.ssh.port) for n in inv.nodes)
    seen_names: set[str] = set()
    seen_ep: set[tuple[str, int]] = set()
    for i, n in enumerate(inv.nodes):
        if names[n.name] > 1 and n.name in seen_names:
            found.err(("nodes", i, "name"), f"duplicate node name '{n.name}'")
        seen_names.add(n.name)
        ep = (n.address, n.ssh_port or inv.ssh.port)
        if endpoints[ep] > 1 and ep in seen_ep:
            found.err(("nodes", i, "address"),
                      f"duplicate address {n.address} port {ep[1]} (already used by another node)")
        seen_ep.add(ep)
        if n.address == "@local":
            if sum(1 for m in inv.nodes if m.address == "@local") > 1:
                found.err(("nodes", i, "address"), "only one node can be @local (this machine)")
        elif not is_host(n.address):
            found.err(("nodes", i, "address"), f"'{n.address}' is not a host name or IP address")
        elif inv.management.cidr is not None:
            try:
                ip = ipaddress.IPv4Address(n.address)
            except ValueError:
                ip = None
            if ip is not None and ip not in inv.management.cidr:
                found.err(("nodes", i, "address"),
                    f"{n.address} is outside the management network {inv.management.cidr}")


def racks_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Rack names unique; every node in a defined rack; each rack's power budget holds its nodes. (core)"""
    rack_names = Counter(r.name for r in inv.racks)
    for j, r in enumerate(inv.racks):
        if rack_names[r.name] > 1:
            found.err(("racks", j, "name"), f"duplicate rack name '{r.name}'")
    racks = {r.name: (j, r) for j, r in enumerate(inv.racks)}
    per_rack: dict[str, list[str]] = defaultdict(list)
    for i, n in enumerate(inv.nodes):
        if n.rack is None:
            if inv.racks:
                found.err(("nodes", i), "no rack given; every node needs one of the racks defined under racks")
            continue
        if n.rack not in racks:
            known = ", ".join(racks) or "none defined"
            found.err(("nodes", i, "rack"), f"'{n.rack}' is not a rack defined under racks (known: {known})")
            continue
        per_rack[n.rack].append(n.name)
    if sku is not None:
        kw = sku.node_power_kw.value
        for rack_name, members in per_rack.items():
            j, rack = racks[rack_name]
            total = kw * len(members)
            if total > rack.power_kw + 1e-9:
                fits = int(rack.power_kw // kw)
                found.err(("racks", j, "power_kw"),
                    f"rack '{rack_name}' ({rack.cooling}-cooled, {rack.power_kw:g} kW) holds {len(members)} "
                    f"{sku.name} nodes at {kw:g} kW each = {total:g} kW, over its budget; it fits {fits} "
                    f"({', '.join(members)}) — move nodes to another rack or raise power_kw "
                    f"(node power: {sku.node_power_kw.source})")


def thresholds_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Threshold overrides name known thresholds. (core)"""
    for key in inv.thresholds:
        if key not in THRESHOLD_NAMES:
            near = difflib.get_close_matches(key, THRESHOLD_NAMES, n=1)
            hint = f"; did you mean '{near[0]}'?" if near else f"; known: {', '.join(THRESHOLD_NAMES)}"
            found.err(("thresholds", key), f"unknown threshold '{key}'{hint}")


def role_vars_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """role_vars: known knobs, each with its default's shape and what its strings may hold. (core)"""
    if inv.role_vars:
        defaults = all_defaults()
        known = list(defaults)
        flag_keys = flag_knobs()
        for key in inv.role_vars:
            value = inv.role_vars[key]
            if key not in defaults:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"; did you mean '{near[0]}'?" if near else " (see roles/<role>/defaults.yaml)"
                found.err(("role_vars", key), f"unknown role setting '{key}'{hint}")
            else:
                problem = knob_value_problem(defaults[key], value, flags=key in flag_keys)
                if problem:
                    found.err(("role_vars", key), problem)
                    continue
                for sub, message in knob_problems(key, value):
                    found.err(("role_vars", key, *sub), message)


def cpu_memory_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """Each node's CPU memory against the SKU's minimum (a warning). (core)"""
    if sku is not None:
        floor = (inv.hardware.min_cpu_memory_gib or sku.min_cpu_memory_gib).value
        for i, n in enumerate(inv.nodes):
            if n.cpu_memory_gib is not None and n.cpu_memory_gib < floor:
                found.warn(("nodes", i, "cpu_memory_gib"),
                     f"{n.cpu_memory_gib:g} GiB is below the {sku.name} minimum of {floor:g} GiB")


def preflight_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """A preflight override says why. (core)"""
    if inv.preflight.min_free_root_gib is not None and not inv.preflight.source:
        found.err(("preflight",), "an override needs a source saying why")


#: the shared model's rules, in the order their problems are listed (then sorted by line)
VALIDATORS: tuple[Validator, ...] = (
    nodes_problems,
    racks_problems,
    thresholds_problems,
    role_vars_problems,
    cpu_memory_problems,
    preflight_problems,
)


def semantic_problems(inv: Inventory, smap: SourceMap, sku: Sku | None) -> list[Problem]:
    """Every problem (errors and warnings) the shared model's rules and then each component's
    own (registry order) find in a schema-valid inventory."""
    found = Findings(smap)
    for validate in (*VALIDATORS, *validators()):
        validate(inv, sku, found)
    return found.problems


# ---------------------------------------------------------------- role knobs (role_vars)

def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a map"
    return type(value).__name__


def knob_value_problem(default: Any, value: Any, flags: bool = False) -> str | None:
    """Why `value` cannot stand in for a role knob whose default is `default`; None when it can.

    The override must have the default's shape: true/false for a flag, a whole number for a
    count, a string for a string (a YAML number there is refused: `1.10` would reach the host
    as `1.1`), a list for a list, and for a per-OS / per-filesystem map a map of some of its
    keys (each value judged the same way; the rest keep their defaults). A flags knob
    (`flags`, gpuctl.knobs.flag_knobs()) also takes a list of options where its default is a
    string. What the strings may hold is judged by `gpuctl.knobs.knob_problems`.
    """
    if default is None:
        return None
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif isinstance(default, str):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return f"{value!r} is a number; this setting is a string: quote it ('{value}')"
        ok = isinstance(value, str) or (flags and isinstance(value, list))
    elif isinstance(default, list):
        ok = isinstance(value, list)
    elif isinstance(default, dict):
        if not isinstance(value, dict):
            return (f"this setting is a map by {' / '.join(map(str, default))}; give the entries to change, "
                    f"e.g. {{{next(iter(default), 'key')}: ...}}, not {_kind(value)}")
        for k, v in value.items():
            if k not in default:
                return f"unknown entry '{k}'; the map has {', '.join(map(str, default))}"
            inner = knob_value_problem(default[k], v, flags)
            if inner:
                return f"{k}: {inner}"
        return None
    else:
        return None
    return None if ok else f"{value!r} is {_kind(value)}; this setting takes {_kind(default)} (default {default!r})"
