"""The InfiniBand/RoCE fabric: ibstat port state and rate, perftest bandwidth and latency."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuctl.catalog import Measured, Sku, load_health, outside_workload
from gpuctl.parsers.ibstat import IbPort, IbstatResult
from gpuctl.parsers.perftest import BwResult, LatResult
from gpuctl.remediation import Remediation
from gpuctl.verdicts.core import NODE, Status, Subject, Verdict, _fmt, _threshold, judge, judge_fact

# ---------------------------------------------------------------- ibstat


def judge_ibstat(result: IbstatResult, sku: Sku | None = None, subject: Subject = NODE, *,
                 fabric: str | None = None, ports: Sequence[str] | None = None) -> list[Verdict]:
    """Without a SKU: every port's state (not Active → warn, as unused ports may be down).
    With a SKU: the fabric ports (link layer InfiniBand for `fabric='infiniband'`,
    Ethernet for 'roce'; default from the SKU; or exactly the CAs named in `ports`)
    must be Active/LinkUp at the SKU's rate, and there must be `fabric.hcas` of them."""
    out: list[Verdict] = []
    if sku is None:
        for p in result.ports:
            s = Subject(subject.node, port=p.name)
            rem, why = _port_down_cause(p)
            out.append(judge_fact("ib_port_state", p.active, value=f"{p.state}/{p.physical_state}",
                                  expected="Active/LinkUp", subject=s, source="ibstat",
                                  remediation=rem, warn_only=True,
                                  message=f"{p.link_layer} port {p.state}/{p.physical_state}: {why}"))
        up = [p for p in result.ports if p.active]
        out.append(Verdict("ib_ports_up", Status.PASS if up else Status.WARN, subject, len(up), None, "ports",
                           "ibstat", Remediation.NONE if up else Remediation.RESEAT_OR_REPLACE,
                           f"{subject.label()}: {len(up)} of {len(result.ports)} ports Active/LinkUp"
                           + _by_layer(up)))
        return out
    if fabric is None:
        fabric = "infiniband" if sku.fabric.infiniband_rate_gbps else "roce" if sku.fabric.roce_rate_gbps else None
        layers = {p.link_layer for p in result.ports}
        # a RoCE build of an InfiniBand SKU (or the reverse): judge the layer the node has
        if fabric == "infiniband" and "InfiniBand" not in layers and "Ethernet" in layers:
            fabric = "roce"
        elif fabric == "roce" and "Ethernet" not in layers and "InfiniBand" in layers \
                and sku.fabric.infiniband_rate_gbps:
            fabric = "infiniband"
    rate = sku.fabric_rate_gbps(fabric) if fabric else None
    if rate is None:
        return [Verdict("ib_port", Status.NOT_APPLICABLE, subject, None, None, "Gb/s", "SKU catalog",
                        Remediation.NONE, f"{subject.label()}: {sku.name} has no RDMA fabric")]
    layer = "InfiniBand" if fabric == "infiniband" else "Ethernet"
    chosen = [p for p in result.ports if (p.ca in ports or p.name in ports)] if ports else \
        [p for p in result.ports if p.link_layer in (layer, "unknown")]  # unknown: a grep lost the line
    fig = sku.fabric.infiniband_rate_gbps if fabric == "infiniband" else (sku.fabric.roce_rate_gbps
                                                                         or sku.fabric.infiniband_rate_gbps)
    source = fig.source if fig else "SKU catalog"
    ca_types = {ca.name: ca.ca_type for ca in result.cas}
    good = 0
    for p in chosen:
        s = Subject(subject.node, port=p.name)
        if not p.active:
            out.append(judge_port_state(p, s, source))
        elif p.rate_gbps is None:
            good += 1
            out.append(Verdict("ib_port", Status.NO_THRESHOLD, s, None, rate, "Gb/s", source, Remediation.NONE,
                               f"{s.label()}: Active, rate not printed (ibv_devinfo without -v): state judged, "
                               f"the {rate:g} Gb/s rate not"))
        elif p.rate_gbps < rate:
            out.append(judge_port_rate(p.rate_gbps, rate, s, source, ca_types.get(p.ca)))
        elif p.link_layer not in (layer, "unknown"):
            out.append(judge_fact("ib_port", False, value=p.link_layer, expected=layer, subject=s, source=source,
                                  remediation=Remediation.RECONFIGURE,
                                  message=f"link layer {p.link_layer}, expected {layer} (mlxconfig LINK_TYPE)"))
        else:
            good += 1
            out.append(judge_fact("ib_port", True, value=p.rate_gbps, expected=rate, unit="Gb/s", subject=s,
                                  source=source, remediation=Remediation.NONE, message=""))
    if sku.fabric.hcas is not None:
        want = int(sku.fabric.hcas.value)
        out.append(judge_fact("ib_ports_up", good >= want, value=good, expected=want, unit="ports", subject=subject,
                              source=sku.fabric.hcas.source, remediation=Remediation.RESEAT_OR_REPLACE,
                              message=f"{good} {layer} fabric ports Active at {rate:g} Gb/s, expected {want}"))
        if good >= want:
            v = out[-1]
            out[-1] = Verdict(v.check, v.status, v.subject, v.value, v.threshold, v.unit, v.source, v.remediation,
                              f"{v.message}; {layer} link layer")
    return out


def judge_port_rate(rate_gbps: float, expected: float, subject: Subject, source: str, ca_type: str | None = None,
                    check: str = "ib_port") -> Verdict:
    """An RDMA port's rate against the fabric's (SKU or inventory): at least the expected rate
    passes; below it is a degraded link, or the wrong adapter model where the adapter cannot
    go faster (`_slow_port_cause`). The one rule for `gpuctl analyze ibstat`, verify
    (network.fabric_port_rate) and preflight (hca_rate)."""
    if rate_gbps >= expected:
        return judge_fact(check, True, value=rate_gbps, expected=expected, unit="Gb/s", subject=subject,
                          source=source, remediation=Remediation.NONE, message="")
    why, why_source = _slow_port_cause(ca_type, expected)
    return judge_fact(check, False, value=rate_gbps, expected=expected, unit="Gb/s", subject=subject,
                      source="; ".join(x for x in (source, why_source) if x), remediation=Remediation.RESEAT_OR_REPLACE,
                      message=f"port rate {rate_gbps:g} Gb/s, expected {expected:g} Gb/s ({why})")


def _slow_port_cause(ca_type: str | None, rate: float) -> tuple[str, str]:
    """Why an Active port runs below `rate`, and the source of that reason: the adapter
    model itself when its fastest rate (health.yaml `hca_max_rate_gbps`) is below
    `rate`, else a degraded link."""
    adapters = load_health().hca_max_rate_gbps
    cap = adapters.rates.get(ca_type) if adapters and ca_type else None
    if adapters and cap is not None and cap < rate:
        return f"adapter {ca_type} tops out at {cap:g} Gb/s: wrong adapter model, not a cable fault", adapters.source
    return "degraded link: cable or transceiver", ""


def judge_port_state(port: IbPort, subject: Subject, source: str, check: str = "ib_port") -> Verdict:
    """An RDMA port must be Active/LinkUp; what one that is not needs comes from its physical
    state (`_port_down_cause`). The one rule for `gpuctl analyze ibstat` and verify
    (network.fabric_port_state, on `rdma link` read into ibstat's words)."""
    value = f"{port.state}/{port.physical_state}"
    if port.active:
        return judge_fact(check, True, value=value, expected="Active/LinkUp", subject=subject, source=source,
                          remediation=Remediation.NONE, message="")
    rem, why = _port_down_cause(port)
    return judge_fact(check, False, value=value, expected="Active/LinkUp", subject=subject, source=source,
                      remediation=rem, message=f"port {value}: {why}")


def _port_down_cause(port: IbPort) -> tuple[Remediation, str]:
    """What a port that is not Active/LinkUp needs, read from its physical state (the
    IBTA PortPhysicalState ibstat prints): Polling is a link that found no partner
    (cable, transceiver, switch port); Disabled is a port switched off (interface down,
    ibportstate or the SM disabled it); LinkUp with a logical state short of Active is a
    trained link waiting for configuration (InfiniBand: no subnet manager has activated
    it, Base lid 65535/SM lid 0; Ethernet: the interface or SR-IOV VF is down)."""
    phys = port.physical_state
    if phys == "Disabled":
        return Remediation.RECONFIGURE, ("port disabled, not a cable fault until enabled (ip link set up; "
                                         "ibportstate enable; mlxconfig)")
    if phys == "LinkUp":
        if port.link_layer not in ("InfiniBand", "Ethernet"):
            return Remediation.RECONFIGURE, ("physical link up but the port not activated: InfiniBand, no subnet "
                                             "manager reached it (opensm/UFM); Ethernet, the interface is down")
        if port.link_layer == "InfiniBand":
            return Remediation.RECONFIGURE, (f"physical link up but not activated by a subnet manager (SM lid "
                                             f"{port.sm_lid}); check opensm/UFM reaches this port")
        return Remediation.RECONFIGURE, "physical link up but the interface or SR-IOV VF is down (ip link)"
    if phys == "Polling":
        return Remediation.RESEAT_OR_REPLACE, "no link partner: cable, transceiver or switch port"
    return Remediation.RESEAT_OR_REPLACE, f"link not up ({phys}): cable, transceiver or switch port"


def _by_layer(ports: Sequence[IbPort]) -> str:
    """' (Ethernet 8, InfiniBand 1)' for a port list."""
    counts: dict[str, int] = {}
    for p in ports:
        counts[p.link_layer] = counts.get(p.link_layer, 0) + 1
    return f" ({', '.join(f'{k} {n}' for k, n in sorted(counts.items()))})" if counts else ""


# ---------------------------------------------------------------- perftest

IB_BW_CHECK = "ib_write_bw_gbit_s"


def judge_ib_write_bw(result: BwResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """Every rail of the output judged on its own (`_judge_ib_write_bw_rail`), each verdict
    naming its rail (device, GID) when the output shows more than one."""
    runs = (result, *result.rails)
    if len(runs) == 1 and not result.mixed_with:
        return _judge_ib_write_bw_rail(result, sku, subject)
    out = []
    for run in runs:
        s = replace(subject, port=run.rail) if run.rail else subject
        for v in _judge_ib_write_bw_rail(run, sku, s):
            if run.mixed_with:
                rails = ", ".join((run.rail or "?", *run.mixed_with))
                v = replace(v, message=f"{v.message} [rows of rails {rails} are interleaved in the output: this is the "
                                       "lowest of them; rerun each rail into its own file to judge each]")
            out.append(v)
    return out


def _judge_ib_write_bw_rail(result: BwResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    """`ib_write_bw_gbit_s` is a floor for one port in one direction. A unidirectional run
    is judged as printed. A bidirectional run (``-b``) prints the SUM of both directions:
    with ``--report_both`` each direction is judged on its own; without, the mean per
    direction (half the sum) is judged. The mean can prove a failure (the weaker direction
    is at most the mean) but not a pass (the output does not say how the sum splits), so
    a mean at or above the floor only warns and asks for a run that shows each direction."""
    t = _threshold(sku, IB_BW_CHECK)
    rem = Remediation.RECONFIGURE
    measured = Measured(message_bytes=result.msg_size_bytes)
    if outside_workload(t.applies_to if t else None, measured) or not result.bidirectional:
        return [judge(IB_BW_CHECK, result.bw_avg_gbit_s, t, "Gb/s", subject, remediation=rem, measured=measured)]
    total = _fmt(result.bw_avg_gbit_s, "Gb/s")
    both = result.direction_avgs_gbit_s
    if both is not None:
        out = []
        for side, value in zip(("local (this side sending)", "remote (the peer sending)"), both, strict=True):
            v = judge(IB_BW_CHECK, value, t, "Gb/s", subject, remediation=rem)
            out.append(replace(v, message=f"{v.message} [the {side} direction of a bidirectional run (-b "
                                          f"--report_both); {total} both directions together]"))
        return out
    mean = result.bw_avg_per_direction_gbit_s
    v = judge(IB_BW_CHECK, mean, t, "Gb/s", subject, remediation=rem)
    head = (f"{subject.label()}: {IB_BW_CHECK} = {_fmt(mean, 'Gb/s')} per direction on average (a bidirectional "
            f"run, -b: {total} is the sum of both directions)")
    if v.status is Status.FAIL:
        return [replace(v, message=f"{head}, below the minimum {_fmt(v.threshold, 'Gb/s')}: at least one direction "
                                   "is below it")]
    if v.status in (Status.PASS, Status.WARN):
        return [replace(v, status=Status.WARN, remediation=Remediation.RERUN,
                        message=f"{head}; the mean meets the minimum {_fmt(v.threshold, 'Gb/s')}, but perftest prints "
                                "only the sum, so one direction may still be below it: rerun without -b, or with "
                                "--report_both, to judge each direction")]
    return [replace(v, message=f"{v.message} ({head.split(': ', 1)[1]})")]


def judge_ib_write_lat(result: LatResult, sku: Sku | None = None, subject: Subject = NODE) -> list[Verdict]:
    return [judge("ib_write_lat_us", result.headline.t_typical_us, _threshold(sku, "ib_write_lat_us"), "us",
                  subject, remediation=Remediation.RECONFIGURE)]
