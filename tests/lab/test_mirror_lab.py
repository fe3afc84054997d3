"""Lab tier for the cluster package cache (issue 7 item 5): with `repos.cache_host: gpu-01`
(apt-cacher-ng, `gpuctl mirror up`), provisioning 2 nodes fetches about the bytes for 1 from
the lab's servers (its apt proxy and stand-in NVIDIA repository, whose access logs count
every byte sent to the guests: `gpuctl.lab.netcache.bytes_served`).

Run 1: the package-level roles purged from both nodes, then provisioned on gpu-01 alone with
the plain lab inventory (no cache): B1 bytes. Run 2: purged again on gpu-01, an inventory copy
with the cache on gpu-01 (reached by gpu-02 on gpu-01's VLAN address), `gpuctl mirror up` with
a cold cache, both nodes provisioned: B2 bytes. B2 must stay within SLACK × B1 and gpu-02's
packages must have come through gpu-01's cache (its apt-cacher-ng log). At the end the roles
are applied again with the plain inventory (the lab's own apt proxy and repository settings).

    .venv/bin/python -m pytest -m lab -s tests/lab/test_mirror_lab.py

Needs the nodes provisioned (network role: the VLAN); provisions them first when not.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.lab.netcache import bytes_served
from gpuctl.lab.ssh import ssh_run
from gpuctl.paths import roles_dir

pytestmark = [pytest.mark.lab, pytest.mark.slow]

#: The roles whose packages are measured (the NVIDIA stack and the benchmark tools).
ROLES = ("nvidia_repo", "cuda", "cudnn", "nccl", "dcgm", "bench_tools")
#: NodeSpec components those roles install.
COMPONENTS = ("cuda", "cudnn", "nccl", "dcgm")
#: B2 (two nodes through the cache) may exceed B1 (one node, no cache) by this factor: both
#: nodes refresh their apt indexes through the cache in run 2 (new source URLs), run 1 does not.
SLACK = 1.25
TIMEOUT_S = 3600
#: apt-cacher-ng's transfer log (its LogDir default).
ACNG_LOG = "/var/log/apt-cacher-ng/apt-cacher.log"


def role_defaults(role: str) -> dict[str, Any]:
    return yaml.safe_load((roles_dir() / role / "defaults.yaml").read_text()) or {}


def gpuctl(runs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPUCTL_RUNS_DIR=str(runs), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "gpuctl", *args], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT_S)


def ok_json(proc: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)


def provision(runs: Path, inventory: str | Path, *extra: str) -> dict[str, Any]:
    return ok_json(gpuctl(runs, "provision", str(inventory), "--only", ",".join(ROLES), *extra, "--yes",
                          "--no-verify", "--json"), f"provision {inventory} {' '.join(extra)}")


def sh(lab: Any, node: str, script: str, timeout: float = 900) -> str:
    return ssh_run(node, ["bash", "-c", script], state=lab, check=True, timeout=timeout).stdout


def specs(runs: Path, inventory: str | Path) -> dict[str, dict[str, Any]]:
    proc = gpuctl(runs, "spec", str(inventory), "--json")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {s["node"]: s for s in json.loads(proc.stdout)}


def measured_packages(spec: dict[str, Any]) -> list[str]:
    """What the measured roles install, from the NodeSpec (components) and the inventory's
    role_vars (bench tools; the role's defaults where the inventory sets none)."""
    names = {p["name"] for c in COMPONENTS if spec["components"][c]["enabled"]
             for p in spec["components"][c]["packages"]}
    knobs = {**role_defaults("bench_tools"), **spec["role_vars"]}
    names.update(str(p) for p in knobs["bench_tools_packages_apt"])
    for key in ("bench_tools_nccl_tests_package", "bench_tools_bwprobe_package"):
        if knobs.get(key):
            names.add(str(knobs[key]))
    return sorted(names)


def purge_plan(lab: Any, node: str, names: list[str]) -> set[str] | None:
    """The packages `apt-get purge names` would remove (simulated); None when apt refuses
    (removing them would take a held package the measurement does not install)."""
    proc = ssh_run(node, ["bash", "-c", "apt-get -s purge " + " ".join(shlex.quote(n) for n in names)],
                   state=lab, timeout=900)
    if proc.returncode != 0:
        return None
    return {ln.split()[1].split(":")[0] for ln in proc.stdout.splitlines() if ln.startswith("Purg ")}


def purge(lab: Any, node: str, packages: list[str]) -> list[str]:
    """Remove the measured packages, their no longer needed dependencies and every cached .deb.
    A package another installed package needs (e.g. perftest, which the held OFED stand-in
    depends on) is kept, never taken away with its dependents; returns the kept ones.

    The measured packages are held (the roles hold what they pin): apt will not remove a held
    package to satisfy the purge of another (dcgm-core under the held dcgm-cuda13), so their
    holds are lifted first and put back on the ones kept; the provision that follows installs
    and holds the rest again."""
    quoted = " ".join(shlex.quote(p) for p in packages)
    installed = sh(lab, node, f"dpkg-query -W -f='${{Package}} ${{db:Status-Abbrev}}\\n' {quoted} 2>/dev/null "
                              "| awk '$2 ~ /^.i/ {print $1}'").split()
    held = set(sh(lab, node, "apt-mark showhold").split()) & set(installed)
    if held:
        sh(lab, node, "apt-mark unhold " + " ".join(shlex.quote(p) for p in sorted(held)))
    plans = {p: purge_plan(lab, node, [p]) for p in installed}
    kept = [p for p, plan in plans.items() if plan is None or plan - set(packages)]
    gone = [p for p in installed if p not in kept]
    if held & set(kept):
        sh(lab, node, "apt-mark hold " + " ".join(shlex.quote(p) for p in sorted(held & set(kept))))
    if gone:
        plan = purge_plan(lab, node, gone)
        assert plan is not None, f"{node}: apt refuses to purge {gone}; not touching it"
        extra = plan - set(packages)
        assert not extra, f"{node}: purging {gone} would also remove {sorted(extra)}; not touching it"
        sh(lab, node, "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q " + " ".join(shlex.quote(p) for p in gone))
    sh(lab, node, "DEBIAN_FRONTEND=noninteractive apt-get autoremove --purge -y -q && apt-get clean")
    left = sh(lab, node, "find /var/cache/apt/archives -name '*.deb' | wc -l").strip()
    assert left == "0", f"{node}: {left} .deb files left in /var/cache/apt/archives"
    return kept


def uplink(lab: Any, since: float, until: float) -> dict[str, Any]:
    return bytes_served([lab.access_log("proxy"), lab.access_log("repo")], since=since, until=until)


def acng_sent(log: str) -> dict[str, Any]:
    """apt-cacher-ng's apt-cacher.log (VerboseLog: time|I/O|bytes|client|file): bytes sent
    per client (O) and fetched from upstream (I), and the files each client got."""
    out: dict[str, Any] = {"sent": {}, "fetched": 0, "files": {}}
    for line in log.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or not parts[2].isdigit():
            continue
        kind, size, client, path = parts[1], int(parts[2]), parts[3], "|".join(parts[4:])
        if kind == "I":
            out["fetched"] += size
        elif kind == "O":
            out["sent"][client] = out["sent"].get(client, 0) + size
            out["files"].setdefault(client, []).append(path)
    return out


def vlan_address(spec: dict[str, Any]) -> tuple[str, str]:
    """(interface, address) of the node's first VLAN, as the network role configures it."""
    vlan = spec["vlans"][0]
    return vlan["interface"], vlan["address"].split("/")[0]


@pytest.fixture(scope="module")
def provisioned(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The lab, its nodes on their VLAN (the network role applied; a full provision if not)."""
    for kind in ("proxy", "repo"):
        if not lab.access_log(kind).exists():
            pytest.skip(f"the lab's {kind} server keeps no access log ({lab.access_log(kind)}): it was started "
                        "by an older gpuctl; restart the lab (gpuctl lab down && gpuctl lab up)")
    runs = tmp_path_factory.mktemp("mirror-runs")
    nodes = specs(runs, lab.inventory_path)

    def on_vlan() -> bool:
        for name, spec in nodes.items():
            iface, address = vlan_address(spec)
            out = ssh_run(name, f"ip -j addr show dev {shlex.quote(iface)}", state=lab, timeout=60)
            if out.returncode != 0 or address not in out.stdout:
                return False
        return True

    if not on_vlan():
        ok_json(gpuctl(runs, "provision", str(lab.inventory_path), "--yes", "--no-verify", "--json"), "provision")
        assert on_vlan(), "the network role ran but a node has no VLAN address"
    return lab, runs, nodes


def test_two_nodes_through_the_cache_fetch_about_the_bytes_for_one(provisioned: Any, record_property: Any) -> None:
    lab, runs, nodes = provisioned
    head, other = sorted(nodes)[:2]
    packages = measured_packages(nodes[head])
    assert packages == measured_packages(nodes[other])
    print(f"\nmeasured packages: {', '.join(packages)}")
    for node in (head, other):
        kept = purge(lab, node, packages)
        if kept:
            print(f"{node}: kept {', '.join(kept)} (other installed packages depend on them)")

    # run 1: one node, no cache
    t0 = time.time()
    provision(runs, lab.inventory_path, "--limit", head)
    b1 = uplink(lab, t0, time.time())
    assert b1["total"] > 0, f"the lab's servers logged nothing during run 1: {b1}"

    # run 2: both nodes through the cache on `head`, reached by `other` on head's VLAN address
    purge(lab, head, packages)
    _, address = vlan_address(nodes[head])
    data = yaml.safe_load(Path(lab.inventory_path).read_text())
    data["repos"] = {**(data.get("repos") or {}), "cache_host": head, "cache_address": address}
    cached = Path(lab.state_dir) / "inventory-package-cache.yaml"
    cached.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        up = ok_json(gpuctl(runs, "mirror", "up", str(cached), "--json"), "mirror up")
        assert up["status"] == "ok", up
        knobs = role_defaults("package_mirror")
        port, cache_dir, service = knobs["package_mirror_port"], knobs["package_mirror_cache_dir"], \
            knobs["package_mirror_service"]
        # a cold cache and an empty log: everything below is this run's
        sh(lab, head, f"systemctl stop {service} && find {shlex.quote(cache_dir)} -mindepth 1 -delete && "
                      f"{{ [ ! -e {ACNG_LOG} ] || : > {ACNG_LOG}; }} && systemctl start {service} && "
                      f"for i in $(seq 60); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && exit 0; sleep 1; "
                      "done; exit 1")
        sh(lab, other, f"(exec 3<>/dev/tcp/{address}/{port})", timeout=60)  # the cache, over the VLAN

        t0 = time.time()
        provision(runs, cached, "--limit", head, "--limit", other)
        b2 = uplink(lab, t0, time.time())

        sh(lab, head, f"systemctl kill --signal=USR1 {service} && sleep 2")  # reopen = flush its log
        acng = acng_sent(sh(lab, head, f"cat {ACNG_LOG}"))
        proxy_file = role_defaults("nvidia_repo")["nvidia_repo_apt_proxy_file"]
        head_proxy = sh(lab, head, f"cat {proxy_file}")
        other_proxy = sh(lab, other, f"cat {proxy_file}")
    except BaseException:
        # best effort: the failure above is the one to see
        gpuctl(runs, "provision", str(lab.inventory_path), "--only", ",".join(ROLES), "--yes", "--no-verify")
        raise
    # leave the nodes on the lab's own apt settings (nvidia_repo rewrites proxy and source)
    provision(runs, lab.inventory_path)

    _, other_address = vlan_address(nodes[other])
    ratio = b2["total"] / b1["total"]
    print(f"B1 (1 node, no cache): {b1['total']} bytes in {b1['requests']} requests {b1['logs']}")
    print(f"B2 (2 nodes, cache on {head}): {b2['total']} bytes in {b2['requests']} requests {b2['logs']} "
          f"cache {b2['cache']}")
    print(f"B2/B1 = {ratio:.3f} (limit {SLACK})")
    print(f"lab servers per client: {b2['clients']} (QEMU user networking: every guest is 127.0.0.1)")
    print(f"apt-cacher-ng on {head}: fetched {acng['fetched']} bytes, sent per client {acng['sent']}")
    record_property("b1_bytes", b1["total"])
    record_property("b2_bytes", b2["total"])
    record_property("b2_over_b1", round(ratio, 3))
    record_property("acng_sent_per_client", json.dumps(acng["sent"]))

    assert f"http://127.0.0.1:{port}" in head_proxy, head_proxy  # the cache node through its own cache
    assert f"http://{address}:{port}" in other_proxy, other_proxy
    got = next((files for client, files in acng["files"].items() if client.endswith(other_address)), None)
    assert got, f"apt-cacher-ng on {head} sent nothing to {other} ({other_address}): {acng['sent']}"
    nvidia = [p["name"] for c in COMPONENTS for p in nodes[other]["components"][c]["packages"]]
    assert any(name in path for name in nvidia for path in got), \
        f"{other} got no NVIDIA package through the cache: {got[:20]}"
    assert b2["total"] <= SLACK * b1["total"], f"B2 {b2['total']} > {SLACK} × B1 {b1['total']}"
