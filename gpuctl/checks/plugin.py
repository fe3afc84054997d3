"""The pytest plugin behind `gpuctl verify` (loaded with `-p gpuctl.checks.plugin`).

It reads the NodeSpecs serialized by the runner (`--gpuctl-specs FILE.json`, node name →
NodeSpec JSON), gives each check its host's `spec` and cached `probe`, calls `@for_each`
checks once per item of the host's spec (one pytest item per host), drops the roles a host's
spec skips, and copies every check's identity and failure fields (expected, found,
remediation) into the test report's `user_properties`, which xdist carries back to the
controller.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gpuctl.errors import ParseError
from gpuctl.spec import NodeSpec

from . import paramiko_backend
from .api import ITEMS_ATTR
from .model import CheckFailure, CouldNotRun, Remediation
from .probe import Probe

log = logging.getLogger(__name__)
paramiko_backend.register()  # hosts given as gpuctl://NODE (see gpuctl.checks.runner)

USER_PROPERTY = "gpuctl"

_PROBES: dict[str, Probe] = {}
#: The session's config, for the fixtures below: a fixture taking `request` makes pytest 9
#: build a fresh fixture definition for `request` on every item it serves, cached or not
#: (inspecting a lambda's signature each time) — a seventh of the check loop (issue 18).
#: One verify session runs per process at a time, as for `_PROBES`.
_CONFIG: pytest.Config | None = None
_PROBES_LOCK = threading.Lock()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuctl")
    group.addoption("--gpuctl-specs", dest="gpuctl_specs", help="JSON file: node name -> NodeSpec")
    group.addoption("--gpuctl-raw-dir", dest="gpuctl_raw_dir", help="write raw command outputs here")
    group.addoption("--gpuctl-raw-prefix", dest="gpuctl_raw_prefix", default="",
                    help="prefix of the raw files' names (raw-dir/<host>/<prefix><key>.txt)")
    group.addoption("--gpuctl-prefetch", dest="gpuctl_prefetch", type=int, default=0,
                    help="run each host's commands up front, this many hosts at a time (0: on demand)")
    group.addoption("--gpuctl-timeout", dest="gpuctl_timeout", type=int, default=120,
                    help="seconds one remote command may take")
    group.addoption("--gpuctl-lock-firmware", dest="gpuctl_lock_firmware",
                    help="JSON file: node name -> firmware the lock file records (null: no lock file)")


def pytest_configure(config: pytest.Config) -> None:
    global _CONFIG
    _CONFIG = config
    config._gpuctl_specs = _load_specs(config.getoption("gpuctl_specs"))  # type: ignore[attr-defined]
    path = config.getoption("gpuctl_lock_firmware", None)
    config._gpuctl_lock_firmware = json.loads(Path(path).read_text()) if path else None  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    global _CONFIG
    if _CONFIG is config:
        _CONFIG = None


def _load_specs(path: str | None) -> dict[str, NodeSpec]:
    if not path:
        return {}
    data = json.loads(Path(path).read_text())
    return {name: NodeSpec.model_validate(d) for name, d in data.items()}


def specs_of(config: pytest.Config) -> dict[str, NodeSpec]:
    return getattr(config, "_gpuctl_specs", {})


def host_name(host: Any) -> str:
    """The testinfra host's name ('gpu-01' for ssh://gpu-01; 'local' for local://)."""
    backend = getattr(host, "backend", None)
    return str(getattr(backend, "hostname", None) or getattr(host, "name", "local"))


def spec_for(config: pytest.Config, name: str) -> NodeSpec | None:
    specs = specs_of(config)
    if name in specs:
        return specs[name]
    if name in ("local", "localhost") and len(specs) == 1:  # one node verified through the local connector
        return next(iter(specs.values()))
    return None


def role_of(path: Path) -> str:
    """roles/<role>/checks.py → role."""
    return path.parent.name


# ---------------------------------------------------------------- fixtures

def _session_config() -> pytest.Config:
    if _CONFIG is None:
        raise CouldNotRun("the gpuctl check plugin was not configured (run through gpuctl verify)")
    return _CONFIG


@pytest.fixture(scope="module")
def spec(host: Any) -> NodeSpec:
    name = host_name(host)
    config = _session_config()
    s = spec_for(config, name)
    if s is None:
        raise CouldNotRun(f"no NodeSpec for host {name!r} (known: {', '.join(specs_of(config)) or 'none'})")
    return s


@pytest.fixture(scope="module")
def locked_firmware(spec: NodeSpec) -> dict[str, str] | None:
    """The firmware the lock file records for this node ({"vbios/0": …}); None without a lock
    file or an entry for the node."""
    lock = getattr(_session_config(), "_gpuctl_lock_firmware", None)
    entry = lock.get(spec.node) if isinstance(lock, dict) else None
    return dict(entry) if isinstance(entry, dict) else None


@pytest.fixture(scope="module")
def probe(host: Any, spec: NodeSpec) -> Probe:
    return get_probe(_session_config(), host, spec)


def get_probe(config: pytest.Config, host: Any, spec: NodeSpec) -> Probe:
    name = host_name(host)
    with _PROBES_LOCK:
        if name not in _PROBES:
            raw = config.getoption("gpuctl_raw_dir", None)
            _PROBES[name] = Probe(host, spec, Path(raw) if raw else None,
                                  timeout_s=config.getoption("gpuctl_timeout", 120) or 120,
                                  raw_prefix=config.getoption("gpuctl_raw_prefix", "") or "")
        return _PROBES[name]


def probes() -> dict[str, Probe]:
    return dict(_PROBES)


def reset_probes() -> None:
    """Forget cached outputs (a new verify run in the same process)."""
    with _PROBES_LOCK:
        _PROBES.clear()


# ---------------------------------------------------------------- per-item checks

def _items_fn(function: Any) -> Any:
    return getattr(function, ITEMS_ATTR, None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "item" in metafunc.fixturenames and _items_fn(metafunc.function) is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a check taking `item` needs @for_each(...)")


@pytest.fixture(scope="module")
def item() -> None:
    """Stands for a `@for_each` check's item while pytest sets the check up: the check is
    one pytest item per host, called once per item of that host's spec by
    `pytest_pyfunc_call` below, each call its own result `<role>.<check>[<item>]`."""
    return None


def _cheap_repr_failure(item: pytest.Item) -> None:
    """Judged outcomes (CheckFailure, CouldNotRun, skip) need no traceback: the results
    carry their fields. pytest's traceback formatting cost ~3 ms per failed check (path
    stats per frame): 2 s at 64 nodes with 10 failures each (issue 8). Anything else
    (a crash) keeps pytest's full report."""
    full = item.repr_failure

    def repr_failure(excinfo: pytest.ExceptionInfo[BaseException], *args: Any, **kwargs: Any) -> Any:
        if isinstance(excinfo.value, (CheckFailure, CouldNotRun)):
            return f"{type(excinfo.value).__name__}: {excinfo.value}"
        return full(excinfo, *args, **kwargs)

    item.repr_failure = repr_failure  # type: ignore[method-assign]


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for it in items:
        _cheap_repr_failure(it)
        callspec = getattr(it, "callspec", None)
        host = callspec.params.get("_testinfra_host") if callspec else None
        s = spec_for(config, host_name(host)) if host is not None else None
        role = role_of(Path(str(it.path)))
        if s is None:
            keep.append(it)  # the `spec` fixture reports it as could-not-run
            continue
        if s.roles.get(role, ""):
            drop.append(it)
            continue
        ident: dict[str, Any] = {"host": s.node, "role": role, "check": check_id(it)}
        items_fn = _items_fn(it.function)
        if items_fn is not None:
            # One pytest item per host for a per-item check, not one per item: pytest's
            # protocol costs ~0.45 ms an item, 3000+ items at 64 container nodes and eight
            # per-GPU items each on a GPU node (issue 18: verify within 1.5× plain pyinfra).
            try:
                ident["items"] = list(dict.fromkeys(items_fn(s)))
            except Exception as exc:  # a broken @for_each names its check file, as a collection error did
                raise pytest.UsageError(f"{it.nodeid}: @for_each items for {s.node}: {type(exc).__name__}: {exc}") \
                    from exc
            if not ident["items"]:
                drop.append(it)  # nothing of the kind on this host: no result, not a vacuous pass
                continue
        it.user_properties.append((USER_PROPERTY, ident))
        if config.pluginmanager.hasplugin("xdist") and getattr(config.option, "dist", "no") == "loadgroup":
            it.add_marker(pytest.mark.xdist_group(s.node))
        keep.append(it)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def check_id(item: pytest.Item) -> str:
    """'<role>.<check>', e.g. 'nvidia_driver.gpu_pcie_width'; a per-item check's results are
    '<role>.<check>[<item>]' (`item_ids`)."""
    name = getattr(item, "originalname", item.name).removeprefix("test_")
    return f"{role_of(Path(str(item.path)))}.{name}"


def item_ids(ident: dict[str, Any]) -> list[str]:
    """The check ids one collected check stands for: itself, or one per item."""
    names = ident.get("items")
    return [ident["check"]] if names is None else [f"{ident['check']}[{n}]" for n in names]


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    threads = session.config.getoption("gpuctl_prefetch", 0) or 0
    if threads <= 0 or hasattr(session.config, "workerinput"):
        return
    roles: dict[str, tuple[Any, NodeSpec, set[str]]] = {}
    # A checks module may define `prefetch(spec, probe)` for the commands only it knows
    # (e.g. bench_tools' tool lookup), so those run in the parallel prefetch too instead of
    # one host after the other in the test loop (issue 8: 64 nodes).
    role_prefetch: dict[str, Any] = {}
    for it in session.items:
        callspec = getattr(it, "callspec", None)
        host = callspec.params.get("_testinfra_host") if callspec else None
        s = spec_for(session.config, host_name(host)) if host is not None else None
        if s is None:
            continue
        role = role_of(Path(str(it.path)))
        roles.setdefault(s.node, (host, s, set()))[2].add(role)
        hook = getattr(getattr(it, "module", None), "prefetch", None)
        if callable(hook):
            role_prefetch[role] = hook
    if not roles:
        return

    def fetch(entry: tuple[Any, NodeSpec, set[str]]) -> None:
        host, s, wanted = entry
        probe = get_probe(session.config, host, s)
        probe.prefetch(wanted)
        for role in sorted(wanted & set(role_prefetch)):
            if probe.unreachable:
                return
            try:
                role_prefetch[role](s, probe)
            except Exception:  # judged (and reported) by the checks that read it
                continue

    with ThreadPoolExecutor(max_workers=min(threads, len(roles))) as pool:
        list(pool.map(fetch, roles.values()))


# ---------------------------------------------------------------- per item

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Hand each check its own `request` before pytest fills its fixtures.

    Every check's closure holds `request` (testinfra's host parameter reads it), and pytest 9
    fills it by building a new fixture definition per item, which inspects a lambda's
    signature (~0.15 ms each; 62 definitions for 30 items without this, 32 with it:
    tests/unit/test_check_session_cost.py). The value is the item's own request either way;
    without that attribute pytest fills it as before."""
    request = getattr(item, "_request", None)
    funcargs = getattr(item, "funcargs", None)
    if request and isinstance(funcargs, dict):
        funcargs.setdefault("request", request)


# ---------------------------------------------------------------- reports

#: What a per-item call may raise and still be judged, as pytest judges a test (its skip and
#: fail outcomes and SystemExit are BaseExceptions; KeyboardInterrupt and pytest.exit stop the run).
_JUDGED: tuple[type[BaseException], ...] = (Exception, SystemExit, pytest.skip.Exception, pytest.fail.Exception)
_ARGNAMES: dict[Any, tuple[str, ...]] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Call a `@for_each` check once per item of its host, each judged on its own (one
    item's failure neither stops nor hides the next); the outcomes travel in the report's
    user_properties (through xdist too) and `gpuctl.checks.runner.Collector` makes one
    result of each. The pytest item fails when an item failed, for pytest's own log."""
    ident = dict(pyfuncitem.user_properties).get(USER_PROPERTY)
    names = ident.get("items") if ident else None
    if names is None:
        return None
    function = pyfuncitem.obj
    argnames = _ARGNAMES.get(function)
    if argnames is None:
        # the parameters pytest fills: not those with a default, nor *args/**kwargs
        argnames = _ARGNAMES[function] = tuple(
            n for n, p in inspect.signature(function).parameters.items()
            if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    args = {a: pyfuncitem.funcargs[a] for a in argnames if a != "item"}
    outcomes: list[dict[str, Any]] = []
    for name in names:
        start = time.perf_counter()
        try:
            function(**args, item=name)
            extra: dict[str, Any] = {"outcome": "pass"}
        except _JUDGED as exc:
            extra = outcome_of(exc, ident["host"])
        outcomes.append({"item": name, "duration_s": round(time.perf_counter() - start, 4), **extra})
    pyfuncitem.user_properties.append((USER_PROPERTY + "_items", outcomes))
    bad = [o for o in outcomes if o["outcome"] in ("fail", "error")]
    if bad:
        shown = "; ".join(f"[{o['item']}] {o.get('message', '')}" for o in bad[:3])
        raise CheckFailure(f"{len(bad)} of {len(outcomes)} items: {shown}", expected="", found="",
                           remediation=Remediation.RERUN)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    excinfo = call.excinfo
    if excinfo is None or report.passed:
        return
    props = dict(item.user_properties).get(USER_PROPERTY)
    if props is None:
        return
    report.user_properties.append((USER_PROPERTY + "_result", outcome_of(excinfo.value, props["host"])))


def outcome_of(exc: BaseException, host: str) -> dict[str, Any]:
    """A check's exception as the fields of its result: outcome (fail, error or skip),
    expected, found, remediation, message, and whether its host was unreachable."""
    extra: dict[str, Any] = {}
    if isinstance(exc, CheckFailure):
        extra = {"outcome": "fail", **exc.fields()}
    elif isinstance(exc, CouldNotRun):
        probe = _PROBES.get(host)
        extra = {"outcome": "error", **exc.fields(), "unreachable": bool(probe and probe.unreachable)}
    elif isinstance(exc, ParseError):
        extra = {"outcome": "error", "message": f"unreadable output: {exc}", "remediation": "rerun"}
    elif isinstance(exc, pytest.skip.Exception):
        extra = {"outcome": "skip", "message": str(exc.msg if hasattr(exc, "msg") else exc)}
    elif isinstance(exc, pytest.xfail.Exception):  # pytest reports an xfail as skipped
        extra = {"outcome": "skip", "message": f"xfail: {exc.msg if hasattr(exc, 'msg') else exc}"}
    elif isinstance(exc, AssertionError):
        extra = {"outcome": "fail", "message": str(exc).splitlines()[0] if str(exc) else "assertion failed",
                 "remediation": "rerun"}
    else:
        extra = {"outcome": "error", "message": f"check crashed: {type(exc).__name__}: {exc}",
                 "remediation": "rerun"}
    return extra
