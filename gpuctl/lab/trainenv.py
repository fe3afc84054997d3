"""The lab's training environment: PyTorch's CPU index stood in for, the lab mirror's wheelhouse
filled from it by the real `gpuctl mirror wheels` path, and the lab inventory switched to the
CPU build (`gpuctl lab up --train-env`).

Lab nodes have no GPU and the lab machine cannot reach download.pytorch.org, so:

- **the stand-in of https://download.pytorch.org/whl/cpu** (a vendor repository, like the
  stand-in NVIDIA apt repository: lab only) is a PEP 503 tree under the stand-in repository
  (``<repo>/standin/download.pytorch.org/whl/cpu/simple``), holding the matrix's CPU lock: the
  torch wheel from the local wheel folder (``GPUCTL_LAB_TORCH_WHEELS``, default /opt/wheels; each
  file checked against the lock's sha256) and its dependencies from pypi.org (checked the same
  way), written by `gpuctl.wheelhouse.fill_wheelhouse`;
- **the lab mirror's wheelhouse** (``<repo>/gpuctl/wheels/simple``, where a cluster with
  ``repos.mirror`` reads its wheels: `gpuctl.spec._train_env_index`) is then filled by
  `gpuctl.wheelhouse.fill_for_inventory` — what `gpuctl mirror wheels INVENTORY DEST --index
  URL` runs — over HTTP from the stand-in as served by the lab's repository server, so its
  access log counts the upstream bytes (requests under ``/standin/``) apart from what the nodes
  read from the mirror (``/gpuctl/wheels/``). Files already there are not fetched again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from gpuctl.errors import ExecutionError
from gpuctl.inventory import load_inventory
from gpuctl.wheelhouse import _lock_and_python, file_sha256, fill_for_inventory, fill_wheelhouse
from gpuctl.yamlsrc import load_yaml_text

#: where the stand-in lives under the stand-in repository (the URL path the repo server serves)
STANDIN_PATH = "standin/download.pytorch.org/whl/cpu"
#: where a cluster mirror's wheelhouse lives (gpuctl.spec._train_env_index reads it there)
MIRROR_WHEELS_PATH = "gpuctl/wheels"
#: the role_vars `gpuctl lab up --train-env` writes into the lab inventory
ROLE_VARS = {"train_env_enabled": True, "train_env_build": "cpu"}
#: the inventory's `bench.training` on QEMU nodes (always TCG here: every instruction emulated):
#: the tiny learning run, one gloo rank per node, and room for `import torch` under emulation
#: in the probe, each launcher and the worker it starts
EMULATED_TRAINING: dict[str, object] = {
    "size": "tiny", "cpu_ranks_per_node": 1, "timeout_s": 1800, "rdzv_timeout_s": 900, "step_timeout_s": 900,
    "source": "gpuctl lab up --train-env (QEMU, TCG): the small run (2 ranks, 40 steps) did not finish in "
              "606 s on one node (2026-12-05); the tiny run does ~240x fewer FLOPs per step",
}


def torch_wheels_dir() -> Path:
    """The folder holding the CPU torch wheel(s) the stand-in serves."""
    return Path(os.environ.get("GPUCTL_LAB_TORCH_WHEELS", "/opt/wheels"))




def local_torch_fetch(lock: Any, folder: Path) -> Any:
    """A `fill_wheelhouse` fetch answering torch's project page from the wheel files in `folder`
    (named torch-<locked version>-*.whl) and those files' bytes; anything else: OSError."""
    torch = next((p for p in lock if p.name == "torch"), None)
    if torch is None:
        raise ExecutionError("the CPU lock holds no torch")
    files = {}
    for path in sorted(folder.glob(f"torch-{torch.version}-*.whl")):
        files[path.name] = (path, file_sha256(path))

    def fetch(url: str, headers: dict[str, str]) -> bytes:
        if url.endswith("/torch/"):
            return json.dumps({"files": [{"filename": n, "url": f"local:{n}", "hashes": {"sha256": h}}
                                         for n, (_, h) in files.items()]}).encode()
        if url.startswith("local:") and url[6:] in files:
            return files[url[6:]][0].read_bytes()
        raise OSError(f"not a local torch wheel: {url}")
    return fetch


def build_standin(repo: Path, lock: Any, python: str, wheels: Path | None = None,
                  pypi: str = "https://pypi.org/simple") -> dict[str, Any]:
    """Write the stand-in of PyTorch's CPU index under `repo` (see the module docstring);
    ExecutionError naming what is missing (the torch wheel, a dependency)."""
    wheels = wheels or torch_wheels_dir()
    dest = repo / STANDIN_PATH
    torch = [p for p in lock if p.name == "torch"]
    deps = [p for p in lock if p.name != "torch"]
    got_torch = fill_wheelhouse(torch, python, dest, "local:", fetch=local_torch_fetch(lock, wheels))
    if not got_torch.ok:
        raise ExecutionError(f"the lab's stand-in of download.pytorch.org/whl/cpu needs the locked CPU torch wheel "
                             f"in {wheels}: " + "; ".join(got_torch.missing))
    got_deps = fill_wheelhouse(deps, python, dest, pypi)
    if not got_deps.ok:
        raise ExecutionError("the lab's stand-in of download.pytorch.org/whl/cpu lacks: " + "; ".join(got_deps.missing))
    return {"dir": str(dest / "simple"), "torch": got_torch.as_dict(), "deps": got_deps.as_dict()}


def prepare(inventory: Path, repo: Path, repo_url_here: str) -> dict[str, Any]:
    """For a lab inventory asking for the CPU build: the stand-in (`build_standin`), then the
    mirror's wheelhouse filled from it over the lab's repository server (`repo_url_here`: its
    URL from this machine) by `fill_for_inventory`. Returns both reports."""
    loaded = load_inventory(inventory)
    lock, python, _ = _lock_and_python(loaded)
    standin = build_standin(repo, lock, python)
    upstream = repo_url_here.rstrip("/") + "/" + STANDIN_PATH + "/simple"
    filled = fill_for_inventory(loaded, repo / MIRROR_WHEELS_PATH, index_url=upstream)
    if not filled.ok:
        raise ExecutionError("the lab mirror's wheelhouse could not be filled: " + "; ".join(filled.missing))
    return {"standin": standin, "mirror": {"dir": str(repo / MIRROR_WHEELS_PATH / "simple"), "upstream": upstream,
                                           **filled.as_dict()}}


def enable_in_inventory(inventory: Path, emulated: bool = False) -> None:
    """Switch a lab inventory `gpuctl lab up` wrote to the CPU build of the training environment
    (role_vars `ROLE_VARS`) and, for emulated (QEMU) nodes, size the bench's training run for
    them (`bench.training`: `EMULATED_TRAINING`); its leading comment lines are kept."""
    loaded, _, text = load_yaml_text(inventory, what="lab inventory")
    lead = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lead.append(line)
    header = "".join(line + "\n" for line in lead)
    data = dict(loaded or {})
    data.setdefault("role_vars", {}).update(ROLE_VARS)
    note = ("# gpuctl lab up --train-env: the CPU build of the training environment, its wheels from the lab "
            "mirror's wheelhouse\n")
    if emulated:
        data.setdefault("bench", {}).setdefault("training", {}).update(EMULATED_TRAINING)
        note += "# and, on emulated (QEMU) nodes, the bench's training run sized for them (bench.training)\n"
    inventory.write_text(header + note + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110))
