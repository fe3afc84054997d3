"""Recorded-fact scenarios and NodeSpecs for the GPU-stack role tests (deploy tier).

`tests/deploy/data/<scenario>/<fact>.txt` holds one fact's output per file; the file
stem is the fact's marker (`: gpuctl-fact <stem>;` starts the command of every gpuctl
fact), so `responses(scenario)` maps each recorded file onto exactly the command that
reads it. See data/README-gpu-roles.md for where each recording comes from.

`converged_files(host)` turns what a first run uploaded (and chmod-ed) into the
`FileStates` answer of a host that already has those files: the converged scenario.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

from gpuctl.paths import inventories_dir

DATA = Path(__file__).parent / "data"
OS_NAMES = {"ubuntu2204": "ubuntu-22.04", "ubuntu2404": "ubuntu-24.04", "debian12": "debian-12",
            "rhel9": "rocky-9"}
# a made-up but well-formed key checksum for tests (the real one comes from the inventory)
KEY_SHA = "d0664fbbdb8c32356d45de36c5984617217b2d0bef41b93ccecd326ba3b80c87"


def fact_matcher(stem: str) -> str:
    return f": gpuctl-fact {stem};"


def responses(scenario: str, **overrides: Any) -> dict[Any, Any]:
    """{fact marker: recorded lines} for every file of data/<scenario>/, plus overrides
    (keys: a fact stem like "packages", or any matcher)."""
    out: dict[Any, Any] = {}
    for key, value in overrides.items():
        out[fact_matcher(key) if re.fullmatch(r"[a-z0-9-]+", key) else key] = value
    folder = DATA / scenario
    for f in sorted(folder.glob("*.txt")):
        out.setdefault(fact_matcher(f.stem), f.read_text().splitlines())
    return out


def inventory(tmp_path: Path, os_family: str = "ubuntu2204", base: str = "h100-8x4.yaml",
              matrix: str = "r580-cuda13.0", **repos: Any) -> Path:
    """A copy of an example inventory with another OS / matrix / repos section."""
    data = yaml.safe_load((inventories_dir() / base).read_text())
    data["cluster"]["os"] = OS_NAMES[os_family]
    data["cluster"]["matrix"] = matrix
    wanted = {"keyring_sha256": KEY_SHA, **repos}
    data["repos"] = {k: v for k, v in wanted.items() if v is not None}
    path = tmp_path / f"{os_family}-{base}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def converged_files(host: Any) -> list[str]:
    """`FileStates` output lines of a host holding what `host` (a FakeHost) was given."""
    modes: dict[str, str] = {}
    for cmd in host.commands:
        m = re.search(r"chmod (\d{3,4}) (\S+)$", cmd)
        if m:
            modes[m.group(2).strip("'")] = m.group(1)
    lines = []
    for path, content in host.files.items():
        data = content.encode() if isinstance(content, str) else content
        lines.append(f"{hashlib.sha256(data).hexdigest()} {modes.get(path, '644')} {path}")
    return lines


def pins_in(commands: list[str], verb: str = "apt-get install") -> list[str]:
    """The package arguments of every install command."""
    out: list[str] = []
    for c in commands:
        if verb in c:
            out += [w.strip("'") for w in c.split() if "=" in w and not w.startswith("-")
                    and not w.startswith("DEBIAN_FRONTEND") and "Dpkg::" not in w]
    return out


def role_deploy(name: str) -> Any:
    from gpuctl.runner.roles import load_role

    return load_role(name).install


def run_role(fake: Any, role: str, specs: list[Any], scenario: str, node: str = "gpu-01", options: Any = None,
             **overrides: Any) -> Any:
    """Run one role on @fake hosts answering from data/<scenario>/; return `node`'s FakeHost."""
    return fake.run(role_deploy(role), specs, responses=responses(scenario, **overrides), options=options)[node]


def rerun_converged(fake: Any, role: str, specs: list[Any], first: Any, scenario: str = "ubuntu2204-converged",
                    extra_files: list[str] | None = None, **overrides: Any) -> Any:
    """Run `role` again on a host holding the packages/services of `scenario` and the files
    the `first` run wrote."""
    files = converged_files(first) + list(extra_files or [])
    return run_role(fake, role, specs, scenario, files=files, **overrides)
