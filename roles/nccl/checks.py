"""Checks of the nccl role: NCCL packages pinned and held, and /etc/nccl.conf holding the
settings the spec derives from the fabric, naming RDMA devices and interfaces that exist."""

from __future__ import annotations

from gpuctl.checks.api import (
    CouldNotRun,
    Remediation,
    component_checks,
    expect,
    fail,
    for_each,
)
from gpuctl.checks.probe import nccl_conf_path
from gpuctl.parsers.files import parse_key_values
from gpuctl.parsers.nccl_env import list_names

ROLE = "nccl"

globals().update(component_checks(ROLE))  # packages pinned/held, services, modules (declared)


def _conf(probe):
    path = nccl_conf_path(probe.spec)
    text = probe.file(path)
    if text is None:
        fail(f"{path} is missing", expected=f"{path} present", found="missing",
             remediation=Remediation.RECONFIGURE)
    return probe.parsed(f"key=value {path}", lambda: parse_key_values(text))  # once per host, not per key


@for_each(lambda spec: list(spec.nccl_conf))
def test_nccl_conf(host, spec, probe, item):
    conf = _conf(probe)
    want = spec.nccl_conf[item]
    expect(conf.get(item) == want, f"{nccl_conf_path(spec)}: {item}={conf.get(item, '(unset)')}",
           expected=f"{item}={want}", found=f"{item}={conf[item]}" if item in conf else "unset",
           remediation=Remediation.RECONFIGURE)


@for_each(lambda spec: list_names(spec.nccl_conf.get("NCCL_IB_HCA", "")))
def test_nccl_ib_hca_exists(host, spec, probe, item):
    """Every RDMA device NCCL_IB_HCA names exists on the host."""
    conf = _conf(probe)
    if item not in list_names(conf.get("NCCL_IB_HCA", "")):
        raise CouldNotRun(f"{nccl_conf_path(spec)} does not name {item}; see {ROLE}.nccl_conf[NCCL_IB_HCA]")
    devices = {link.device for link in probe.rdma_links().values()}
    expect(item in devices, f"NCCL_IB_HCA names {item}, which does not exist", expected=f"RDMA device {item}",
           found=", ".join(sorted(devices)) or "no RDMA devices", remediation=Remediation.RECONFIGURE)


@for_each(lambda spec: list_names(spec.nccl_conf.get("NCCL_SOCKET_IFNAME", "")))
def test_nccl_socket_ifname_exists(host, spec, probe, item):
    interfaces = probe.interfaces()
    expect(item in interfaces, f"NCCL_SOCKET_IFNAME names {item}, which does not exist",
           expected=f"interface {item}", found=", ".join(sorted(interfaces)), remediation=Remediation.RECONFIGURE)
