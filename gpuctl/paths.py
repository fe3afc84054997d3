"""Where gpuctl finds its shipped data: roles, templates, matrices, the SKU catalog,
deploys and example inventories.

From a checkout the checkout's own folders are used (so edits take effect at once);
from an installed wheel the copies shipped inside the package under `gpuctl/_share/`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
SHARE_DIRS = ("roles", "templates", "matrices", "catalog", "deploy", "inventories")


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
