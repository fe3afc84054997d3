"""The session-wide lab for tier-3 tests: booted once, shared by every lab test.

The `lab` fixture returns the running `LabState` (node names, SSH ports, key path,
known_hosts, inventory path, apt proxy and repo URLs). Environment knobs:

- ``GPUCTL_LAB_NODES`` (default 2), ``GPUCTL_LAB_NVME`` (default 4),
  ``GPUCTL_LAB_SKU`` (default hgx-h100-80gb);
- ``GPUCTL_LAB_BOOT_TIMEOUT`` seconds per node until SSH (default 240; raise it on a
  machine shared with other heavy jobs: TCG guests slow down in proportion);
- ``GPUCTL_LAB_RUN_TIMEOUT`` seconds a gpuctl command of a lab test may take (default
  3600; a 3-node provision beside other heavy jobs needs more);
- ``GPUCTL_LAB_REUSE=1``: use a lab that is already up (from `gpuctl lab up`) and
  leave it running afterwards.

Unless reusing, the session's lab keeps its state in its own directory
(``XDG_STATE_HOME`` is pointed at a session temp dir for the whole session, so
`gpuctl lab …` subprocesses see the same lab), and so never collides with a lab
someone started by hand on the same machine. The image and apt cache are shared.

At the end of the session the fixture brings the lab down and asserts that no lab
process is left and no lab port still listens.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpuctl.lab import missing_binaries
from gpuctl.lab.nodes import down, up
from gpuctl.lab.state import LabState, load_state, port_listening


def _lab_ports(state: LabState) -> list[int]:
    return [n.ssh_port for n in state.nodes] + [state.proxy_port, state.repo_port]


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabState]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"lab host tools missing: {', '.join(sorted(missing))}")
    if os.environ.get("GPUCTL_LAB_REUSE") == "1":
        existing = load_state()
        if existing is not None and any(r.alive() for r in existing.processes().values()):
            yield existing
            return
    with pytest.MonkeyPatch.context() as env:
        env.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("lab-state")))
        yield from _session_lab()


def _session_lab() -> Iterator[LabState]:
    state = up(
        nodes=int(os.environ.get("GPUCTL_LAB_NODES", "2")),
        sku=os.environ.get("GPUCTL_LAB_SKU", "hgx-h100-80gb"),
        nvme=int(os.environ.get("GPUCTL_LAB_NVME", "4")),
        boot_timeout=float(os.environ.get("GPUCTL_LAB_BOOT_TIMEOUT", "240")),
    )
    yield state
    current = load_state() or state
    down(current)
    left = {name: rec.pid for name, rec in current.processes().items() if rec.alive()}
    listening = [p for p in _lab_ports(current) if p and port_listening(p)]
    assert not left, f"lab processes still running after lab down: {left}"
    assert not listening, f"lab ports still listening after lab down: {listening}"

