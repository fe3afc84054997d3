"""Unit: one layer turns remote text into data (issue 18).

Every remote output is parsed once, in `gpuctl.parsers`: the provisioning facts, verify's
probe and the lock read the same parsers into the same types; the facts (install side)
do not depend on the checks (verify side).
"""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from pathlib import Path

import gpuctl

PACKAGE = Path(gpuctl.__file__).parent


def test_facts_import_nothing_from_checks():
    code = ("import importlib, pkgutil, sys, gpuctl.facts as f\n"
            "for m in pkgutil.iter_modules(f.__path__): importlib.import_module('gpuctl.facts.' + m.name)\n"
            "print(sorted(k for k in sys.modules if k.startswith('gpuctl.checks')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"gpuctl.facts pulls in the verify side: {out.strip()}"


def _definitions() -> dict[str, list[str]]:
    """Top-level class and function names → the modules of gpuctl that define them (lab excluded)."""
    out: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel.startswith("gpuctl/lab/"):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                out.setdefault(node.name, []).append(rel)
    return out


def test_each_parsed_type_is_defined_once_in_parsers():
    defs = _definitions()
    for name in ("LoadedModule", "InstalledPackage", "Gid", "UnitState", "MdDetail", "parse_key_values",
                 "IbPort", "Interface", "parse_proc_modules", "parse_ip_addr", "sysctl_path",
                 "parse_tail_bundle", "parse_dpkg", "parse_rpm", "parse_ibv_devinfo", "parse_os_release"):
        where = defs.get(name, [])
        assert len(where) == 1 and where[0].startswith("gpuctl/parsers/"), f"{name} defined in {where}"


def test_checks_outputs_module_is_gone():
    assert not (PACKAGE / "checks" / "outputs.py").exists()


def test_install_and_verify_read_the_gid_table_with_one_command():
    """The network role's RdmaPorts fact and verify's probe run the same GID reading."""
    from gpuctl.facts.network import RdmaPorts
    from gpuctl.parsers.rdma import rdma_command
    from tests.unit.checks_support import inventory_spec, probe

    spec = inventory_spec("lab")
    ports = [(p.hca, p.interface) for p in spec.fabric.ports]
    p = probe(spec, {"/gids/": "dev rxe0 none eth1\n"})
    p.gids()
    assert RdmaPorts().command(ports) == rdma_command(ports)
    assert [c for c in p.host.ran if shlex.quote(rdma_command(ports)) in c], p.host.ran


def _string_constants(path: Path) -> list[str]:
    """String literals of a module that are not docstrings (f-string parts included)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_loaded_nvidia_module_version_is_read_one_way():
    """Provisioning (facts/nvidia.py), the reboot's confirmation (the nvidia_driver knob), verify
    (checks/probe.py) and the lock read one file, named once, through one function."""
    from gpuctl.checks.probe import STATIC_FILES
    from gpuctl.facts.nvidia import NvidiaModule, parse_nvidia_module
    from gpuctl.knobs import CONFIRM_COMMANDS
    from gpuctl.lock.read import parse_read, read_script
    from gpuctl.parsers.kernel import NVIDIA_MODULE_VERSION_FILE, loaded_nvidia_version
    from gpuctl.paths import roles_dir
    from gpuctl.yamlsrc import load_yaml
    from tests.unit.checks_support import inventory_spec

    spelled = [p.relative_to(PACKAGE.parent).as_posix() for p in sorted(PACKAGE.rglob("*.py"))
               if not p.is_relative_to(PACKAGE / "lab")
               and any(NVIDIA_MODULE_VERSION_FILE in c for c in _string_constants(p))]
    assert spelled == ["gpuctl/parsers/kernel.py"]
    defaults = load_yaml(roles_dir() / "nvidia_driver" / "defaults.yaml")[0]
    assert CONFIRM_COMMANDS[defaults["nvidia_driver_confirm_command"]] == ("cat", NVIDIA_MODULE_VERSION_FILE)
    spec = inventory_spec("lab")
    assert NVIDIA_MODULE_VERSION_FILE in STATIC_FILES
    assert NVIDIA_MODULE_VERSION_FILE in NvidiaModule().command() and NVIDIA_MODULE_VERSION_FILE in read_script(spec)
    # the same text gives the same version on every side
    text = "580.95.05\n"
    assert loaded_nvidia_version(text)[0] == parse_nvidia_module([f"loaded={text.strip()}"]).loaded_version \
        == parse_read(f"##gpuctl-lock module\n{text}##gpuctl-lock end\n", spec).nvidia_module == "580.95.05"


def test_nccl_device_lists_are_written_and_read_in_one_place():
    """NCCL_IB_HCA / NCCL_SOCKET_IFNAME: spec.py writes them with parsers.nccl_env.exact_list and
    the nccl role's checks read them with list_names; no other module spells the '=' syntax."""
    from gpuctl.parsers.nccl_env import exact_list, list_names
    from tests.unit.checks_support import inventory_spec

    spec = inventory_spec("h100-8x4")
    hcas = [p.hca for p in spec.fabric.ports]
    assert spec.nccl_conf["NCCL_IB_HCA"] == exact_list(hcas)
    assert list_names(spec.nccl_conf["NCCL_IB_HCA"]) == hcas
    assert list_names("=mlx5_0:1, ^mlx5_2,=") == ["mlx5_0", "mlx5_2"]
    spelled = [p for p in (PACKAGE / "spec.py", PACKAGE.parent / "roles" / "nccl" / "checks.py")
               if any('f"={' in line or 'lstrip("=^")' in line for line in p.read_text().splitlines())]
    assert spelled == []


def test_no_public_parser_or_type_is_defined_twice_in_the_parsers_layer():
    """The class of the list above: any public top-level class or function of gpuctl/parsers/
    is defined in one module of it (a `Mount` and `parse_proc_mounts` were once copied into
    both parsers/kernel.py and parsers/storage.py)."""
    twice = {name: where for name, where in _definitions().items()
             if not name.startswith("_") and sum(w.startswith("gpuctl/parsers/") for w in where) > 1}
    assert not twice, twice
