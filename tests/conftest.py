"""Process hygiene for every tier that runs inside the pytest process.

Two things are process-wide and permanent once done, and a test that does them changes
every test after it:

- gevent's monkey-patching. The CLI's plan/provision/lock/mirror/handover commands call
  `gpuctl.runner.bootstrap.ensure_patched()`; driven in-process through click's CliRunner
  they patched the test process, and a later test that forked from a worker thread (the
  stand-in repository build) hung for good — CI ran out of time on it. In-process tests get
  a no-op `ensure_patched`; the tests that need the real patch run `gpuctl` as a
  subprocess, as a user does.
- threads left running. A test's SSH server or client transport that outlives the test
  holds locks that a later fork in the same process can wait on forever. A unit, deploy
  or browser test that leaves a new thread alive is an error naming the thread (lab and
  hardware tests drive long-lived nodes and are not held to it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

_THREAD_GRACE_S = 3.0  # how long a finished test's threads may take to wind down


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpuctl's state folder (run locks) is machine-wide by design; each test gets its own so
    a test never meets a developer's running provision or another test's lock."""
    monkeypatch.setenv("GPUCTL_STATE_DIR", str(tmp_path_factory.mktemp("gpuctl-state")))


@pytest.fixture(autouse=True)
def _process_stays_unpatched(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from gevent import monkey

    from gpuctl.runner import bootstrap

    monkeypatch.setattr(bootstrap, "ensure_patched", lambda: False)
    yield
    if monkey.is_module_patched("socket"):
        pytest.fail("this test monkey-patched gevent into the pytest process; run gpuctl in a subprocess")


@pytest.fixture(autouse=True)
def _no_thread_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("lab") or request.node.get_closest_marker("hardware"):
        yield
        return
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + _THREAD_GRACE_S
    while True:
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if left:
        pytest.fail(f"threads left running after the test: {', '.join(sorted(t.name for t in left))}")
