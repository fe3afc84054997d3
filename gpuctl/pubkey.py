"""OpenSSH public key lines: checked and normalised (the inventory's handover keys, the
provider's key), matched by their base64 field. Model-level: it imports nothing of gpuctl
but errors, so the inventory's validation and the handover workflow both use it."""

from __future__ import annotations

import base64
import binascii

from gpuctl.errors import InputError

KEY_TYPES = (
    "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
)


def parse_public_key(text: str, where: str = "key") -> str:
    """A one-line OpenSSH public key, normalised to 'type base64 [comment]'.

    InputError for a private key, options, an unknown type or a blob that does not
    decode to the type it claims."""
    line = text.strip()
    if "PRIVATE KEY" in line:
        raise InputError(f"{where}: this is a private key; give the public key (.pub) only")
    if "\n" in line or not line:
        raise InputError(f"{where}: expected one public key line like 'ssh-ed25519 AAAA… user@host'")
    parts = line.split(None, 2)
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        raise InputError(f"{where}: {parts[0] if parts else line!r} is not a supported key type "
                         f"({', '.join(KEY_TYPES)}); authorized_keys options are not accepted")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InputError(f"{where}: the key data is not base64") from exc
    n = int.from_bytes(blob[:4], "big") if len(blob) >= 4 else -1
    if blob[4:4 + n].decode(errors="replace") != parts[0]:
        raise InputError(f"{where}: the key data is not a {parts[0]} key")
    return " ".join(parts)


def key_blob(public_key: str) -> str:
    """The base64 field of a public key line (how authorized_keys lines are matched)."""
    return public_key.split()[1]
