"""A real OpenSSH key pair for tests (handover's unit and deploy tiers)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def keypair(folder: Path, name: str) -> str:
    """Make `folder/name` (ed25519, no passphrase, comment `name@test`); return its public line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@test", "-f", str(folder / name)],
                   check=True, capture_output=True)
    return (folder / f"{name}.pub").read_text().strip()
