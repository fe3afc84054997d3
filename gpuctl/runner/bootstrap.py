"""Process setup the pyinfra runner needs before pyinfra is imported.

pyinfra runs hosts as gevent greenlets; only `pyinfra_cli` monkey-patches gevent, so an
API program must call `gevent.monkey.patch_all()` itself, before ssl/socket users are
imported, or SSH hosts run one at a time. `ensure_patched()` is idempotent and is called
by the CLI commands that drive pyinfra (plan, provision) before they import the engine.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)


def ensure_patched() -> bool:
    """Monkey-patch the standard library for gevent once; True when patched by this call."""
    from gevent import monkey

    if monkey.is_module_patched("socket"):
        return False
    if "ssl" in sys.modules:
        # Harmless for pyinfra (paramiko does not use ssl) but worth knowing: some CLI
        # module imported ssl before the runner could patch.
        log.debug("ssl was imported before gevent patching")
    monkey.patch_all()
    # Ctrl-C, SIGTERM and SIGHUP arrive as a KeyboardInterrupt, often while the hub waits:
    # the hub passes it to the main greenlet (gpuctl.cli.common.handle_errors finishes the
    # run as interrupted) and need not print it as a traceback first.
    from gevent.hub import Hub

    if not issubclass(KeyboardInterrupt, Hub.NOT_ERROR):
        Hub.NOT_ERROR = (*Hub.NOT_ERROR, KeyboardInterrupt)
    os.environ.setdefault("PYINFRA_PROGRESS", "off")
    return True


def raise_nofile_limit(hosts: int) -> tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit to the hard limit when hosts × 3 (+ slack) exceeds it.

    Returns the (soft, hard) limits in force afterwards.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Linux
        return (0, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = hosts * 3 + 64
    if need > soft and (hard == resource.RLIM_INFINITY or hard > soft):
        new_soft = hard if hard != resource.RLIM_INFINITY else max(need, soft)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
        log.info("raised open files limit from %d to %d for %d hosts", soft, new_soft, hosts)
        soft = new_soft
    return soft, hard
