"""Where gpuctl finds its shipped data: roles, templates, matrices, the SKU catalog,
deploys and example inventories; and where it keeps its own state (run locks).

From a checkout the checkout's own folders are used (so edits take effect at once);
from an installed wheel the copies shipped inside the package under `gpuctl/_share/`.

State that must not depend on the current folder (the per-cluster run locks) lives in
`state_dir()`: $GPUCTL_STATE_DIR, else $XDG_STATE_HOME/gpuctl, else ~/.local/state/gpuctl.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from gpuctl.errors import InputError

_PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def share_root() -> Path:
    """The folder that holds roles/, templates/, matrices/, catalog/, …"""
    checkout = _PACKAGE_DIR.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "roles").is_dir():
        return checkout
    return _PACKAGE_DIR / "_share"


def roles_dir() -> Path:
    return share_root() / "roles"


def templates_dir() -> Path:
    return share_root() / "templates"


def matrices_dir() -> Path:
    return share_root() / "matrices"


def catalog_dir() -> Path:
    return share_root() / "catalog"


def deploy_dir() -> Path:
    return share_root() / "deploy"


def inventories_dir() -> Path:
    return share_root() / "inventories"


def state_dir() -> Path:
    """gpuctl's machine-local state folder (see the module doc); never relative to the
    current folder. InputError for an empty or relative $GPUCTL_STATE_DIR."""
    own = os.environ.get("GPUCTL_STATE_DIR")
    if own is not None:
        if not own or not os.path.isabs(own):
            raise InputError(f"GPUCTL_STATE_DIR={own!r}: must be an absolute folder path (unset it for "
                             "$XDG_STATE_HOME/gpuctl or ~/.local/state/gpuctl)")
        return Path(own)
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"  # XDG: relative is ignored
    return base / "gpuctl"
