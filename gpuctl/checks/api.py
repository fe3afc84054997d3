"""What a role's `checks.py` is written with: per-item checks from the NodeSpec,
the failure helper, and the checks every role shares (packages, services, modules).

Convention for `roles/<role>/checks.py`:

* a check is a pytest test function taking testinfra's `host` plus the fixtures `spec`
  (this host's NodeSpec) and `probe` (this host's cached outputs, `gpuctl.checks.probe`);
* a check about many things runs per item with `@for_each(fn)`, where
  `fn(spec) -> list[str]` names the items (packages, GPUs "gpu3", pairs "gpu0-gpu1",
  ports, VLANs, RAID slots) and the test takes an `item` argument; it is called once per
  item of each host's spec (one pytest item per host, see `gpuctl.checks.plugin`), each
  call its own result `<role>.<function without test_>[<item>]`; a host whose spec lists
  no item has no result for it;
* a role the host's spec skips (`spec.roles[role]` is a reason) has none of its checks
  collected on that host; the runner reports the role as skipped with the reason;
* a failure is `fail(message, expected=…, found=…, remediation=…)` (or `expect(...)`),
  never a bare `assert`; a check that cannot be made raises `CouldNotRun`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from gpuctl.components import component, part_owner
from gpuctl.healthpolicy import judge_firmware
from gpuctl.spec import NodeSpec

from .model import CheckFailure, CouldNotRun, Remediation
from .probe import Probe

__all__ = [
    "CheckFailure",
    "CouldNotRun",
    "Remediation",
    "check_module_loaded",
    "check_package_held",
    "check_package_pinned",
    "check_service_active",
    "component_checks",
    "expect",
    "fail",
    "for_each",
    "judge_firmware_lock",
    "judge_health",
    "judge_verdicts",
    "modules_of",
    "packages_of",
    "services_of",
]

ItemsFn = Callable[[NodeSpec], list[str]]


def _owner(name: str) -> str:
    """The role that installs (and so verifies) a matrix part, or a component's own name."""
    return part_owner().get(name, name)


ITEMS_ATTR = "_gpuctl_items"


def for_each(items: ItemsFn) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Run a check once per item of `items(spec)` on each host, passed as its `item` argument."""
    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, ITEMS_ATTR, items)
        return fn
    return mark


def fail(message: str, *, expected: Any, found: Any, remediation: Remediation, subject: str = "") -> NoReturn:
    raise CheckFailure(message, expected=expected, found=found, remediation=remediation, subject=subject)


def expect(ok: bool, message: str, *, expected: Any, found: Any, remediation: Remediation,
           subject: str = "") -> None:
    """Fail with these fields unless `ok`."""
    if not ok:
        fail(message, expected=expected, found=found, remediation=remediation, subject=subject)


def judge_health(findings: Sequence[Any]) -> None:
    """Verify's side of a passive health check (`gpuctl.healthpolicy`, the judgements `gpuctl
    health` makes): fail naming every failing subject; skip (never pass) when nothing was judged."""
    failed = [f for f in findings if f.status == "fail"]
    if failed:
        first = failed[0]
        found = "; ".join(f"{f.subject}: {f.found or f.detail}" for f in failed)
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        fail(f"{first.subject}: {first.detail}{more}", expected=first.expected or "healthy", found=found,
             remediation=first.remediation, subject=first.subject)
    if not any(f.status == "pass" for f in findings):
        import pytest

        why = "; ".join(dict.fromkeys(f.detail for f in findings)) or "nothing to judge on this node"
        pytest.skip(f"not judged: {why}")


def judge_verdicts(verdicts: Sequence[Any], *, expected: Callable[[Any], str], found: Callable[[Any], str],
                   subject: str = "") -> None:
    """Verify's side of a judgement shared with `gpuctl analyze` (a `gpuctl.verdicts` rule, so both
    reach one verdict on the same data): fail with the first failing verdict's message and
    remediation, naming how many more failed; `expected`/`found` word a verdict for the report.
    Without a passing verdict (none, or only figures without a threshold) the check could not run."""
    failed = [v for v in verdicts if v.status == "fail"]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more: {', '.join(v.check for v in failed[1:])})" if len(failed) > 1 else ""
        fail(first.message + more, expected=expected(first), found=found(first), remediation=first.remediation,
             subject=subject)
    if not any(v.status == "pass" for v in verdicts):
        why = "; ".join(dict.fromkeys(v.message for v in verdicts)) or "no verdict"
        raise CouldNotRun(f"nothing judged: {why}")  # nothing validated is never a pass


def judge_firmware_lock(spec: Any, found: dict[str, str], locked: dict[str, str] | None) -> None:
    """Verify's side of the firmware check (`gpuctl.healthpolicy.judge_firmware`, as `gpuctl
    health`): this node's firmware items against its entry in the lock file; skipped, never
    passed, without a lock entry (peers are compared by `gpuctl health`, which sees every node)."""
    import pytest

    if locked is None:
        pytest.skip("not judged: no lock file entry for this node (`gpuctl lock` records the firmware)")
    if not found:
        if not locked:  # nothing locked, nothing read (Soft-RoCE devices have no firmware)
            pytest.skip("not judged: no firmware version on this node and none in its lock entry")
        raise CouldNotRun("no firmware version read on this node")
    judge_health(judge_firmware({spec.node: found}, {spec.node: locked}))


def _role_components(role: str) -> list[str]:
    return [p.name for p in component(role).parts]


def packages_of(role: str) -> ItemsFn:
    """Item names: the packages of the role's enabled components, as the spec pins them."""
    def items(spec: NodeSpec) -> list[str]:
        return [p.name for c in _role_components(role) if c in spec.components and spec.components[c].enabled
                for p in spec.components[c].packages]
    return items


def services_of(role: str) -> ItemsFn:
    def items(spec: NodeSpec) -> list[str]:
        return [s.name for s in spec.services if _owner(s.component) == role]
    return items


def modules_of(role: str) -> ItemsFn:
    def items(spec: NodeSpec) -> list[str]:
        return [m.name for m in spec.kernel_modules if _owner(m.component) == role]
    return items


def _package(spec: NodeSpec, name: str) -> tuple[str, str]:
    for comp in spec.components.values():
        for p in comp.packages:
            if p.name == name and comp.enabled:
                return comp.name, p.version
    raise CouldNotRun(f"{name} is not a package of this host's spec")


def check_package_pinned(spec: NodeSpec, probe: Probe, name: str) -> None:
    """Installed at exactly the pinned version (epoch included)."""
    component, version = _package(spec, name)
    snap = probe.packages()
    installed = snap.version(name)
    expected = f"{name} {version} installed ({spec.matrix} {component})"
    if installed is None:
        fail(f"{name} is not installed", expected=expected, found="not installed", remediation=Remediation.RECONFIGURE)
    expect(snap.has(name, version), f"{name} is at {installed}, the matrix pins {version}",
           expected=expected, found=f"{name} {installed}", remediation=Remediation.RECONFIGURE)


def check_package_held(spec: NodeSpec, probe: Probe, name: str) -> None:
    """Held against upgrades (apt-mark hold / dnf versionlock)."""
    _package(spec, name)
    holds = probe.holds()
    tool = "apt-mark showhold" if spec.package_manager == "apt" else "dnf versionlock list"
    expect(name in holds, f"{name} is not held: an unattended upgrade can move it off the pin",
           expected=f"{name} in `{tool}`", found=f"not held ({len(holds)} packages held)",
           remediation=Remediation.RECONFIGURE)


def check_service_active(spec: NodeSpec, probe: Probe, name: str) -> None:
    svc = next((s for s in spec.services if s.name == name), None)
    if svc is None:
        raise CouldNotRun(f"{name} is not a service of this host's spec")
    unit = probe.units().get(name)
    if unit is None or unit.load == "not-found":
        fail(f"{name}.service does not exist", expected="loaded, active (running), enabled",
             found="unit not found", remediation=Remediation.RECONFIGURE)
    if svc.running:
        expect(unit.active == "active", f"{name} is {unit.active} ({unit.sub})",
               expected="active (running)", found=f"{unit.active} ({unit.sub})", remediation=Remediation.REBOOT
               if name == "nvidia-fabricmanager" else Remediation.RECONFIGURE)
    if svc.enabled:
        expect(unit.unit_file in ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated"),
               f"{name} is not enabled at boot ({unit.unit_file or 'unknown'})", expected="enabled",
               found=unit.unit_file or "unknown", remediation=Remediation.RECONFIGURE)


def component_checks(role: str) -> dict[str, Callable[..., Any]]:
    """The checks a component's declaration implies (roles/<role>/__init__.py), for its
    checks.py to take in with `globals().update(component_checks(ROLE))`: its matrix parts'
    packages pinned and held, its services active, its kernel modules loaded — each only
    where it declares one. New functions per call (each role's own `for_each` items)."""
    declared = component(role)
    out: dict[str, Callable[..., Any]] = {}
    if declared.parts:
        @for_each(packages_of(role))
        def test_package_pinned(host: Any, spec: NodeSpec, probe: Probe, item: str) -> None:
            check_package_pinned(spec, probe, item)

        @for_each(packages_of(role))
        def test_package_held(host: Any, spec: NodeSpec, probe: Probe, item: str) -> None:
            check_package_held(spec, probe, item)

        out.update(test_package_pinned=test_package_pinned, test_package_held=test_package_held)
    if declared.services:
        @for_each(services_of(role))
        def test_service_active(host: Any, spec: NodeSpec, probe: Probe, item: str) -> None:
            check_service_active(spec, probe, item)

        out["test_service_active"] = test_service_active
    if declared.modules:
        @for_each(modules_of(role))
        def test_module_loaded(host: Any, spec: NodeSpec, probe: Probe, item: str) -> None:
            check_module_loaded(spec, probe, item)

        out["test_module_loaded"] = test_module_loaded
    return out


def check_module_loaded(spec: NodeSpec, probe: Probe, name: str) -> None:
    mod = next((m for m in spec.kernel_modules if m.name == name), None)
    if mod is None:
        raise CouldNotRun(f"{name} is not a kernel module of this host's spec")
    loaded = probe.modules()
    # /proc/modules names use '_' where modprobe accepts '-'
    found = loaded.get(name) or loaded.get(name.replace("-", "_"))
    expect(found is not None, f"kernel module {name} is not loaded", expected=f"{name} in /proc/modules",
           found="not loaded", remediation=Remediation.REBOOT if mod.component == "driver" else
           Remediation.RECONFIGURE)
    assert found is not None
    expect(found.state == "Live", f"kernel module {name} is {found.state}", expected="Live", found=found.state,
           remediation=Remediation.REBOOT)
