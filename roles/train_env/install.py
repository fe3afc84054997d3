"""train_env: the training environment — a venv with the matrix's torch build for every user.

What a node gets (all from `spec.train_env`, the matrix's `train_env` for the node's OS):
- the OS package that gives `python3.X -m venv` (train_env_python_package);
- the lock as pip reads it (train_env_lock_file, a file op) and the probe the checks run;
- the environment in `<train_env_path>-<lock sha256[:12]>`: created with the OS's python3.X,
  filled with `pip install --no-deps --require-hashes --only-binary=:all: --no-cache-dir` (no
  second copy of the wheels on the node: the cluster's cache keeps them) from the lock (the
  whole closure, every wheel's sha256 listed), checked (`pip check`, `import torch`), and only
  then switched in: `train_env_path` is a symlink renamed over atomically. When pip cannot get a
  package or a hash does not match, the half-built folder is removed, pip's own lines naming
  the package are the operation's error, the node's role fails and the path still points to
  the previous complete environment (or to nothing);
- train_env_profile_file (profile.d) putting `<train_env_path>/bin` first on every login
  shell's PATH, written after the environment exists.

Converged: the `TrainEnvState` fact (the link's target and the distributions the venv's python
lists) equals the lock → no command. Environments of older locks are removed after a switch.
"""

from __future__ import annotations

import re
import urllib.parse

from pyinfra import host
from pyinfra.api import deploy, operation

from gpuctl.deploy_context import node_spec
from gpuctl.facts.packages import read_packages
from gpuctl.facts.system import FileStates
from gpuctl.facts.train_env import TrainEnv, TrainEnvState
from gpuctl.operations import (
    fail_host,
    install_packages,
    read_template_file,
    render,
    role_knobs,
    sh,
    write_file,
)
from gpuctl.spec import TrainEnvSpec

ROLE = "train_env"
PATH_KNOBS = ("train_env_path", "train_env_lock_file", "train_env_probe_file", "train_env_profile_file")
_PLAIN_PATH = re.compile(r"^/[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$")
_URL = re.compile(r"^(https?|file)://[A-Za-z0-9._~:/%+-]+$")
#: pip's lines that name what it could not install: a hash mismatch ("    torch==2.8.0 from
#: https://…:" under "THESE PACKAGES DO NOT MATCH THE HASHES"), a file the index lacks ("No
#: matching distribution found for torch==2.8.0"), a missing dependency (pip check: "torch 2.8.0
#: requires sympy, which is not installed.")
PIP_FAILURE_LINES = "^ +[A-Za-z0-9._-]+==[^ ]+ from |no matching distribution found for |requires "
#: a pinned requirement as pip prints it in those lines ("torch==2.8.0 from https://…")
REQUIREMENT = "[A-Za-z0-9._-]+==[A-Za-z0-9.+!_-]+"


def env_dir(path: str, te: TrainEnvSpec) -> str:
    """The folder the environment of this lock lives in (the path's symlink points here)."""
    return f"{path}-{te.lock_sha256[:12]}"


def trusted_host(index_url: str) -> str:
    """` --trusted-host HOST:PORT` for a plain-http index (the cluster's cache or mirror), else "":
    pip ignores an http index on any host but localhost without it ("not a trusted or secure
    host"); with --require-hashes every file is still checked against the lock's sha256."""
    parts = urllib.parse.urlsplit(index_url)
    return f" --trusted-host {sh(parts.netloc)}" if parts.scheme == "http" and parts.netloc else ""


def build_command(te: TrainEnvSpec, target: str, path: str, lock_file: str, index_url: str,
                  import_check: str = "torch") -> str:
    """One shell command: build the environment in `target`, check it, switch `path` to it,
    remove the other environments of `path` (folders `<path>-*` holding a pyvenv.cfg); on any
    failure remove `target` and exit 1, pip's lines and a last line naming the packages on
    stderr. Every value is quoted here."""
    q = sh  # one word
    t, p, py = q(target), q(path), q(f"{target}/bin/python")
    log = q(f"{target}.pip.log")
    pip = (f"{py} -m pip install --no-input --disable-pip-version-check --no-cache-dir --no-deps --require-hashes"
           f" --only-binary=:all: --index-url {q(index_url)}{trusted_host(index_url)} -r {q(lock_file)}")
    named = (f"$(grep -iE {q(PIP_FAILURE_LINES)} {log} | grep -oE {q(REQUIREMENT)} | sort -u | tr '\\n' ' ')")
    fail = (f"{{ tail -n 40 {log} >&2;"
            f" printf '%s%s%s\\n' 'train_env: pip could not install ' \"{named}\""
            f" {q(f'({path} unchanged)')} >&2;"
            f" rm -rf {t} {log}; exit 1; }}")
    return (f"rm -rf {t} {log} && mkdir -p {q(target.rsplit('/', 1)[0] or '/')}"
            f" && python{q(te.python)} -m venv {t}"
            f" && {{ {pip} > {log} 2>&1 && {py} -m pip check >> {log} 2>&1"
            f" && {py} -c {q(f'import {import_check}')} >> {log} 2>&1 || {fail}; }}"
            f" && rm -f {log} && ln -sfn {t} {q(path + '.gpuctl-new')} && mv -T {q(path + '.gpuctl-new')} {p}"
            f" && for old in {p}-*; do if [ \"$old\" != {t} ] && [ -f \"$old/pyvenv.cfg\" ]; then rm -rf \"$old\"; fi;"
            " done")


@operation()
def build_train_env(te: TrainEnvSpec, state: TrainEnv, path: str, lock_file: str, index_url: str):
    """Build and switch to the environment of this lock unless the path already points to one
    that holds exactly the lock's distributions."""
    target = env_dir(path, te)
    diff = te.differences(state.distributions)
    if state.not_a_link:
        yield sh("echo", f"train_env: {path} exists and is not a symlink; move it away") + " >&2 && exit 1"
        return
    if state.target == target and not diff:
        host.noop(f"{path} already holds the lock's {len(te.packages)} distributions (torch {te.torch_version})")
        return
    if state.target == target:  # drifted in place: rebuild beside it, the path keeps the old one meanwhile
        target += "-r"
    elif state.target == target + "-r" and not diff:
        host.noop(f"{path} already holds the lock's {len(te.packages)} distributions (torch {te.torch_version})")
        return
    yield build_command(te, target, path, lock_file, index_url)


@deploy("train_env")
def install() -> None:
    spec = node_spec()
    te = spec.train_env
    if te is None:
        fail_host(name="Refuse: no training environment in the matrix", reason=f"matrix {spec.matrix} pins no "
                  f"train_env for {spec.os_family}")
        return
    k = role_knobs(ROLE)
    paths = {key: str(k[key]) for key in PATH_KNOBS}
    bad = [f"{key}={v!r}" for key, v in paths.items() if not _PLAIN_PATH.match(v)]
    index_url = str(k["train_env_index_url"] or te.index_url)
    if not _URL.match(index_url):
        bad.append(f"train_env_index_url={index_url!r}")
    if bad:
        fail_host(name="Refuse: a train_env knob is not a plain absolute path / URL",
                  reason="not plain absolute paths or an http(s)/file URL: " + ", ".join(bad))
        return
    path = paths["train_env_path"]
    package_map = k["train_env_python_package"]
    assert isinstance(package_map, dict)
    python_pkg = str(package_map[spec.package_manager]).format(python=te.python)

    snap = read_packages(spec.package_manager)
    files = host.get_fact(FileStates, paths=(paths["train_env_lock_file"], paths["train_env_probe_file"],
                                             paths["train_env_profile_file"]))
    state = host.get_fact(TrainEnvState, path=path)

    install_packages(name=f"Install Python {te.python} venv support ({python_pkg})", packages=[python_pkg],
                     snapshot=snap, label=f"Python {te.python} venv support")
    write_file(name=f"Write the training environment lock ({len(te.packages)} distributions, sha256 "
                    f"{te.lock_sha256[:12]}…)", path=paths["train_env_lock_file"], content=te.lock_text, states=files)
    build_train_env(
        name=f"Install torch {te.torch_runtime_version} ({te.nccl or 'CPU build: no NCCL, gloo'}, --require-hashes)",
        te=te, state=state, path=path, lock_file=paths["train_env_lock_file"], index_url=index_url)
    write_file(name="Write the training environment probe", path=paths["train_env_probe_file"],
               content=read_template_file(ROLE, "probe.py"), states=files)
    write_file(name=f"Put {path}/bin on every login shell's PATH", path=paths["train_env_profile_file"],
               content=render(ROLE, "profile.sh.j2", path=path, torch=te.torch_runtime_version, matrix=spec.matrix),
               states=files)
