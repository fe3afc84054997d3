"""handover's rules for the inventory: the customer's accounts and keys, checked when the
inventory loads, not at the end of a turnkey run hours later. Declared in
roles/handover/__init__.py (`Component.validate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.catalog import Sku
from gpuctl.errors import InputError
from gpuctl.pubkey import parse_public_key
from gpuctl.validation import Findings

if TYPE_CHECKING:
    from gpuctl.inventory import Inventory


def handover_problems(inv: Inventory, sku: Sku | None, found: Findings) -> None:
    """The customer's accounts and keys: no root, not the SSH user, each once, keys that parse,
    and someone left with sudo and a key when the provider key goes."""
    h = inv.handover
    seen: set[str] = set()
    for i, a in enumerate(h.accounts):
        if a.name == "root":
            found.err(("handover", "accounts", i, "name"),
                      "root is not a customer account (give the customer their own "
                "account with sudo: true)")
        if a.name == inv.ssh.user and a.name != "root":
            found.err(("handover", "accounts", i, "name"), f"'{a.name}' is the SSH user gpuctl works as (ssh.user): "
                "handing it over would replace its authorized_keys, and the provider's key with them, in the "
                "middle of the run; give the customer an account of their own")
        if a.name in seen:
            found.err(("handover", "accounts", i, "name"), f"account '{a.name}' is listed twice")
        seen.add(a.name)
        for j, key in enumerate(a.ssh_keys):
            try:
                parse_public_key(key, "key")
            except InputError as exc:
                found.err(("handover", "accounts", i, "ssh_keys", j), str(exc).removeprefix("key: "))
    if h.remove_provider_key and not any(a.sudo and a.ssh_keys for a in h.accounts):
        found.err(("handover", "remove_provider_key"), "needs at least one account with sudo: true and a key; removing "
            "the provider key would lock everyone out")
