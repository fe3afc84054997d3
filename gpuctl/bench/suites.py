"""Benchmark suites and the exact command line of every benchmark.

A `Suite` says which tools run and how big each run is; the `*_script` functions turn a
NodeSpec and a suite into the bash script run on a node. Every value that reaches the
shell is quoted by `gpuctl.shellcmd.sh` (an argv, or a single word), and
no script writes outside its own scratch folder: fio and gdsio work in a fresh folder
under the RAID mount that they create (failing if it exists) and remove on exit.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from gpuctl.inventory import TrainingBenchSettings
from gpuctl.provenance import DEVICE_MARK
from gpuctl.shellcmd import sh
from gpuctl.spec import NodeSpec, train_env_default, train_env_knob

# Where the bench_tools role and the vendor packages put the tools, besides $PATH.
TOOL_DIRS: tuple[str, ...] = (
    "/opt/gpuctl/bin", "/opt/nccl-tests/build", "/usr/local/cuda/bin", "/usr/local/cuda/gds/tools",
)
SCRATCH = "/tmp/gpuctl-bench"
PERFTEST_BASE_PORT = 18515
EXIT_NOT_A_MOUNT = 97
EXIT_NO_SPACE = 98
EXIT_SCRATCH_EXISTS = 99
#: The training environment's virtual environment (issue 16: roles/train_env, a venv at a
#: configurable path for every user of the node); `python3` on PATH where it is missing.
#: The c10d rendezvous port on the first node (torchrun's own default for c10d).
TRAIN_RDZV_PORT = 29400


@dataclass(frozen=True)
class Suite:
    """What one `gpuctl bench --suite NAME` runs."""

    name: str
    nccl_tests: tuple[str, ...]
    nccl_max_bytes: str
    multi_node: bool
    bwprobe: bool
    ib: bool
    fio: bool
    fio_size_mib: int
    fio_runtime_s: int
    gdsio: bool
    dcgm: bool
    training: bool
    training_steps: int
    timeout_s: int
    # the training run across all nodes (torchrun, one launcher per node)
    training_multi_node: bool = True
    training_model: str = "gpt"  # the program's --model: "gpt" or "llama"
    training_size: str = "small"  # the program's --size: "small" or "tiny" (train_smoke.py SIZES)
    training_cpu_ranks_per_node: int = 1  # ranks per node where torch has no GPU (gloo), across nodes
    training_cpu_ranks_single: int = 2  # ranks of each node's own run where torch has no GPU
    training_timeout_s: int | None = None  # each node's own run is stopped after this (None: timeout_s)
    training_probe_timeout_s: int = 120  # the probe of each node's PyTorch (it imports torch) before the run
    training_rdzv_timeout_s: int = 180  # c10d join timeout: every launcher must have joined by then
    training_step_timeout_s: int = 120  # the process group's timeout: a collective waiting longer fails
    training_launch_timeout_s: int = 900  # each launcher is killed after this (rendezvous + steps + margin)
    training_rdzv_port: int = TRAIN_RDZV_PORT
    # fault finding (gpuctl.bench.localise): "on_slow" after a slow multi-node all_reduce (or a
    # slow ib_write_bw pair), "always", or "off"; each of its runs is this big and bounded so
    localise: Literal["on_slow", "always", "off"] = "on_slow"
    localise_max_bytes: str = "1G"
    localise_timeout_s: int = 300


SUITES: dict[str, Suite] = {
    "quick": Suite(
        name="quick", nccl_tests=("all_reduce_perf",), nccl_max_bytes="1G", multi_node=True, bwprobe=True,
        ib=True, fio=True, fio_size_mib=256, fio_runtime_s=10, gdsio=True, dcgm=False, training=True,
        training_steps=40, timeout_s=600,
    ),
    "acceptance": Suite(
        name="acceptance", nccl_tests=("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf"),
        nccl_max_bytes="8G", multi_node=True, bwprobe=True, ib=True, fio=True, fio_size_mib=4096,
        fio_runtime_s=30, gdsio=True, dcgm=True, training=True, training_steps=60, timeout_s=1800,
    ),
    # the training run alone (one node each, then across all nodes): a CPU cluster or lab, or a
    # rerun of the training acceptance without the fabric and storage benchmarks
    "training": Suite(
        name="training", nccl_tests=(), nccl_max_bytes="1G", multi_node=False, bwprobe=False, ib=False, fio=False,
        fio_size_mib=0, fio_runtime_s=0, gdsio=False, dcgm=False, training=True, training_steps=40, timeout_s=600,
    ),
    # only the fault finding, whatever the figures: `gpuctl bench --suite localise`
    "localise": Suite(
        name="localise", nccl_tests=(), nccl_max_bytes="1G", multi_node=False, bwprobe=False, ib=False, fio=False,
        fio_size_mib=0, fio_runtime_s=0, gdsio=False, dcgm=False, training=False, training_steps=0, timeout_s=600,
        training_multi_node=False, localise="always",
    ),
}


def with_settings(suite: Suite, settings: TrainingBenchSettings) -> Suite:
    """`suite` with the inventory's `bench.training` figures in place of its own (each one
    unset keeps the suite's); `cpu_ranks_per_node` sets both runs' CPU rank counts and
    `timeout_s` each node's own run, each launcher of the run across nodes and the probe of
    each node's PyTorch before it (that imports torch too)."""
    given = {
        "training_size": settings.size, "training_model": settings.model, "training_steps": settings.steps,
        "training_cpu_ranks_per_node": settings.cpu_ranks_per_node,
        "training_cpu_ranks_single": settings.cpu_ranks_per_node,
        "training_timeout_s": settings.timeout_s, "training_launch_timeout_s": settings.timeout_s,
        "training_probe_timeout_s": settings.timeout_s,
        "training_rdzv_timeout_s": settings.rdzv_timeout_s, "training_step_timeout_s": settings.step_timeout_s,
    }
    return replace(suite, **{k: v for k, v in given.items() if v is not None})


def training_timeout_s(suite: Suite) -> int:
    """How long each node's own training run may take."""
    return suite.training_timeout_s if suite.training_timeout_s is not None else suite.timeout_s


def preamble() -> str:
    """The first lines of every script: strict mode and the tool folders on PATH."""
    dirs = ":".join(sh(d) for d in TOOL_DIRS)
    return f'set -u\nexport PATH="$PATH:{dirs}"\n'


def nccl_argv(test: str, max_bytes: str, gpus: int) -> list[str]:
    """`all_reduce_perf -b 8 -e <max> -f 2 -g <gpus>` (one process driving every GPU)."""
    return [test, "-b", "8", "-e", max_bytes, "-f", "2", "-g", str(gpus)]


def nccl_script(test: str, suite: Suite, spec: NodeSpec, extra_env: Mapping[str, str] | None = None,
                max_bytes: str | None = None) -> str:
    """nccl-tests on one node, every GPU, under the node's nccl.conf settings (and `extra_env`)."""
    env = {**spec.nccl_conf, **(extra_env or {})}
    argv = nccl_argv(test, max_bytes or suite.nccl_max_bytes, spec.hardware.gpu_count)
    return preamble() + (sh("env", *(f"{k}={v}" for k, v in sorted(env.items())), *argv) if env else sh(*argv)) + "\n"


#: the NIC loopback all_reduce of fault finding: no shared memory, no P2P, so every byte
#: between the node's GPUs crosses its HCAs (NCCL environment variables, docs.nvidia.com/deeplearning/nccl
#: user-guide env.html: NCCL_SHM_DISABLE, NCCL_P2P_DISABLE)
LOOPBACK_ENV: Mapping[str, str] = {"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1"}


def loopback_script(suite: Suite, spec: NodeSpec) -> str:
    """Fault finding, stage 1: all_reduce over the node's GPUs through its own HCAs."""
    return nccl_script("all_reduce_perf", suite, spec, LOOPBACK_ENV, suite.localise_max_bytes)


def rail_env(spec: NodeSpec, rail: int) -> dict[str, str]:
    """One rail of a per-rail run: the rank uses local GPU `rail` and HCA `rail` only
    (NCCL_IB_HCA with `=`: that exact device)."""
    return {"NCCL_IB_HCA": "=" + spec.fabric.ports[rail].hca, "CUDA_VISIBLE_DEVICES": str(rail)}


def fabric_port(spec: NodeSpec):  # type: ignore[no-untyped-def]
    """The first fabric port with an address, when the node has it configured: on container
    nodes (lab kind "container") the network role is not applicable, so the inventory's fabric
    addresses never exist there and the management network joins the nodes."""
    if spec.node_kind == "container":
        return None
    return next((p for p in spec.fabric.ports if p.address), None)


def mpi_host(spec: NodeSpec) -> str:
    """The address other nodes reach this one on for MPI's own SSH launch: the first
    fabric address when there is one (that network joins the nodes), else the node's."""
    port = fabric_port(spec)
    return port.address.split("/")[0] if port is not None else spec.address


def hostfile_text(specs: Sequence[NodeSpec], slots: int | None = None) -> str:
    """An Open MPI hostfile: one line per node, `slots` = its GPU count (or `slots`)."""
    return "".join(f"{mpi_host(s)} slots={slots or s.hardware.gpu_count}\n" for s in specs)


def mpi_env(specs: Sequence[NodeSpec]) -> dict[str, str]:
    """NCCL settings exported to every rank: the fabric's nccl.conf, Ring for two nodes."""
    env = dict(specs[0].nccl_conf)
    env["NCCL_DEBUG"] = "WARN"
    if len(specs) == 2:
        env["NCCL_ALGO"] = "Ring"  # facts.md: tree can exceed the NIC limit on two nodes
    return env


def mpi_networks(specs: Sequence[NodeSpec]) -> list[str]:
    """The networks of the nodes' hostfile addresses (first fabric port, with its prefix),
    for Open MPI's own TCP traffic; empty when a node has no fabric address (then Open MPI
    picks interfaces itself). Without it Open MPI also tries interfaces every node has
    under the same address (docker0, a QEMU user network) and can hang."""
    nets: list[str] = []
    for spec in specs:
        port = fabric_port(spec)
        if port is None or port.address is None or "/" not in port.address:
            return []
        net = str(ipaddress.ip_interface(port.address).network)
        if net not in nets:
            nets.append(net)
    return nets


def mpirun_argv(hostfile: str, specs: Sequence[NodeSpec], test: str, max_bytes: str, rsh_args: str,
                per_node: int | None = None, extra_env: Mapping[str, str] | None = None) -> list[str]:
    """mpirun over SSH: one rank per GPU (or `per_node` ranks per node), nccl-tests with one
    GPU per rank. `rsh_args` are the ssh options of the daemons' launch
    (`gpuctl.bench.mpissh.rsh_args`); every daemon is launched from this node (no tree
    spawn), the only one holding the run's key, which need not be one of `specs`."""
    per_node = per_node or specs[0].hardware.gpu_count
    total = per_node * len(specs)
    argv = ["mpirun", "--allow-run-as-root", "--hostfile", hostfile, "-np", str(total),
            "--map-by", f"ppr:{per_node}:node", "--bind-to", "none",
            "--mca", "plm_rsh_args", rsh_args, "--mca", "plm_rsh_no_tree_spawn", "1"]
    nets = ",".join(mpi_networks(specs))
    if nets:
        argv += ["--mca", "oob_tcp_if_include", nets, "--mca", "btl_tcp_if_include", nets]
    argv += ["-x", "PATH", "-x", "LD_LIBRARY_PATH"]
    for key, value in sorted({**mpi_env(specs), **(extra_env or {})}.items()):
        argv += ["-x", f"{key}={value}"]
    return argv + nccl_argv(test, max_bytes, 1)


def multi_node_script(specs: Sequence[NodeSpec], suite: Suite, run_id: str, rsh_args: str, tag: str = "",
                      per_node: int | None = None, extra_env: Mapping[str, str] | None = None,
                      max_bytes: str | None = None) -> str:
    """Run on the head node (the one holding the run's key): write the hostfile (named by
    `tag`, so runs at once keep apart), then mpirun across `specs`."""
    hostfile = f"{SCRATCH}/{run_id}/hostfile" + (f"-{tag}" if tag else "")
    return (preamble() + f"mkdir -p {sh(SCRATCH + '/' + run_id)}\n"
            f"cat > {sh(hostfile)} <<'GPUCTL_HOSTFILE'\n{hostfile_text(specs, per_node)}GPUCTL_HOSTFILE\n"
            + sh(*mpirun_argv(hostfile, specs, "all_reduce_perf", max_bytes or suite.nccl_max_bytes, rsh_args,
                              per_node, extra_env)) + "\n")


#: NCCL's bootstrap root of a fault-finding pair run: rank 0 (on the pair's first node) listens
#: on that node's fabric address, this port + the rail (the rails of one pair run at once).
#: NVIDIA/nccl src/bootstrap.cc (bootstrapGetUniqueId, bootstrapNetInit) and src/init.cc: with
#: NCCL_COMM_ID set (<ipv4>:<port> or [<ipv6>]:<port>) rank 0 starts the bootstrap root there.
BOOTSTRAP_BASE_PORT = 29600


def bootstrap_env(a: NodeSpec, rail: int | None) -> dict[str, str]:
    """NCCL_COMM_ID of a pair run whose rank 0 runs on `a` (`BOOTSTRAP_BASE_PORT`)."""
    host = mpi_host(a)
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return {"NCCL_COMM_ID": f"{host}:{BOOTSTRAP_BASE_PORT + (rail or 0)}"}


def pair_script(a: NodeSpec, b: NodeSpec, suite: Suite, run_id: str, rsh_args: str, rail: int | None = None,
                launcher: str | None = None) -> str:
    """Fault finding: a 2-node all_reduce of `a` and `b`, launched from the head (node
    `launcher`); on every GPU and rail, or (`rail`) one rank per node on local GPU `rail` and
    HCA `rail` only. Its bootstrap root (`bootstrap_env`) is on the node rank 0 runs on: the
    launcher when it is one of the pair (Open MPI maps rank 0 onto the launching node when
    its hostfile holds it, whatever the line: seen in the lab, Open MPI 4.1 on Debian 12),
    else `a`; that node is also the hostfile's first line."""
    if launcher == b.node:
        a, b = b, a
    tag = f"{a.node}-{b.node}" + (f"-rail{rail}" if rail is not None else "")
    if rail is None:
        return multi_node_script([a, b], suite, run_id, rsh_args, _tag(tag), extra_env=bootstrap_env(a, None),
                                 max_bytes=suite.localise_max_bytes)
    return multi_node_script([a, b], suite, run_id, rsh_args, _tag(tag), 1,
                             {**rail_env(a, rail), **bootstrap_env(a, rail)}, suite.localise_max_bytes)


def _tag(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def bwprobe_script() -> str:
    """gpuctl-bwprobe (built by the bench_tools role) prints its JSON document on stdout."""
    return preamble() + "gpuctl-bwprobe\n"


def perftest_params(spec: NodeSpec, tool: str) -> list[str]:
    """Size and iteration options: small under Soft-RoCE (emulated NICs move ~30 MB/s)."""
    if tool == "ib_write_lat":
        return ["-s", "2", "-n", "200" if spec.fabric.soft_roce else "5000"]
    if spec.fabric.soft_roce:
        return ["-s", "65536", "-n", "200", "--report_gbits"]
    return ["-s", "1048576", "-n", "5000", "--report_gbits"]


def perftest_argv(tool: str, spec: NodeSpec, hca_index: int, server_address: str | None = None) -> list[str]:
    """Server (no address) or client argv of ib_write_bw / ib_write_lat on one HCA."""
    port = spec.fabric.ports[hca_index]
    argv = [tool, "-d", port.hca, "-i", "1", "-p", str(PERFTEST_BASE_PORT + hca_index), "-F",
            *perftest_params(spec, tool)]
    if isinstance(spec.fabric.roce_gid_index, int):
        argv += ["-x", str(spec.fabric.roce_gid_index)]
    if server_address:
        argv.append(server_address)
    return argv


def perftest_script(tool: str, spec: NodeSpec, hca_index: int, server_address: str | None = None) -> str:
    return preamble() + sh(*perftest_argv(tool, spec, hca_index, server_address)) + "\n"


def fabric_address(spec: NodeSpec, hca_index: int) -> str:
    """The address a perftest client connects to for this HCA (its port's IP, or the node's)."""
    addr = spec.fabric.ports[hca_index].address
    return addr.split("/")[0] if addr else spec.address


def _scratch_guard(mount: str, folder: str, need_mib: int) -> str:
    """Shell lines that refuse to run unless `mount` is a mount point with room, create a
    new folder under it (failing if it exists) and remove only that folder on exit."""
    m, d = sh(mount), sh(folder)
    # paths reach the shell only as sh()-quoted words (printf %s, a variable for the trap)
    return (
        f"mountpoint -q {m} || {{ printf 'gpuctl: %s is not a mount point\\n' {m} >&2; exit {EXIT_NOT_A_MOUNT}; }}\n"
        f"avail_kib=$(df -P -k {m} | awk 'NR==2 {{print $4}}')\n"
        f"if [ \"$avail_kib\" -lt {need_mib * 1024} ]; then "
        f"printf 'gpuctl: %s has %s KiB free, the test needs {need_mib} MiB\\n' {m} \"$avail_kib\" >&2; "
        f"exit {EXIT_NO_SPACE}; fi\n"
        f"gpuctl_scratch={d}\n"
        f"mkdir -- \"$gpuctl_scratch\" || {{ printf 'gpuctl: %s exists; not touching it\\n' \"$gpuctl_scratch\" >&2; "
        f"exit {EXIT_SCRATCH_EXISTS}; }}\n"
        "trap 'rm -rf -- \"$gpuctl_scratch\"' EXIT\n"
    )


def bench_folder(mount: str, run_id: str) -> str:
    return f"{mount.rstrip('/')}/.gpuctl-bench-{run_id}"


FIO_JOBS: Mapping[str, tuple[str, str, int, int]] = {
    # name: (rw, block size, iodepth, numjobs)
    "fio_randread_4k": ("randread", "4k", 64, 4),
    "fio_seqwrite_1m": ("write", "1M", 16, 1),
}


def fio_argv(job: str, folder: str, size_mib: int, runtime_s: int) -> list[str]:
    rw, bs, depth, jobs = FIO_JOBS[job]
    return ["fio", f"--name={job}", f"--directory={folder}", f"--rw={rw}", f"--bs={bs}",
            f"--size={size_mib}M", f"--runtime={runtime_s}", "--time_based", "--ioengine=libaio",
            "--direct=1", f"--iodepth={depth}", f"--numjobs={jobs}", "--group_reporting",
            "--output-format=json"]


def device_models_line(mount: str) -> str:
    """A shell line naming, on stderr, every block device under `mount` with its model
    (`gpuctl.provenance.DEVICE_MARK` + lsblk's NAME="…" MODEL="…" pairs): what the figure was
    measured on (e.g. QEMU's "QEMU NVMe Ctrl" in the lab); lsblk's own errors go the same way."""
    source = f'"$(findmnt -nvo SOURCE --target {sh(mount)})"'
    return (f"lsblk -Pnso NAME,MODEL {source} 2>&1 | sed {sh('s/^/' + DEVICE_MARK + ' /')} >&2 "
            "|| true\n")


def fio_script(job: str, spec: NodeSpec, suite: Suite, run_id: str) -> str:
    """fio on files in a new folder under the RAID mount, never on a device."""
    assert spec.raid is not None
    folder = bench_folder(spec.raid.mount, f"{run_id}-{job}")
    jobs = FIO_JOBS[job][3]
    need = suite.fio_size_mib * jobs + suite.fio_size_mib // 4 + 64
    return (preamble() + _scratch_guard(spec.raid.mount, folder, need) + device_models_line(spec.raid.mount)
            + sh(*fio_argv(job, folder, suite.fio_size_mib, suite.fio_runtime_s)) + "\n")


def gdsio_script(spec: NodeSpec, suite: Suite, run_id: str) -> str:
    """gdsio GPUDirect (-x 0) sequential write then read of one file per thread."""
    assert spec.raid is not None
    folder = bench_folder(spec.raid.mount, f"{run_id}-gdsio")
    size = f"{suite.fio_size_mib}M"
    write = ["gdsio", "-D", folder, "-d", "0", "-w", "4", "-s", size, "-i", "1M", "-x", "0", "-I", "1"]
    read = ["gdsio", "-D", folder, "-d", "0", "-w", "4", "-s", size, "-i", "1M", "-x", "0", "-I", "0"]
    return (preamble() + _scratch_guard(spec.raid.mount, folder, suite.fio_size_mib * 4 + 64)
            + sh(*write) + " && " + sh(*read) + "\n")


def dcgm_script() -> str:
    return preamble() + "dcgmi diag -r 2 -j\n"


def python_select(train_env: str) -> str:
    """Shell lines that set `gpuctl_py` to the training environment's python, else python3."""
    py = sh(f"{train_env.rstrip('/')}/bin/python")
    return f"gpuctl_py=python3\nif [ -x {py} ]; then gpuctl_py={py}; fi\n"


def program_args(suite: Suite, peak_tflops: float) -> list[str]:
    """The training program's options, the same for the per-node and the multi-node run
    (so that the multi-node tokens/s compares with the per-node ones)."""
    return ["--steps", str(suite.training_steps), "--model", suite.training_model, "--size", suite.training_size,
            "--step-timeout-s", str(suite.training_step_timeout_s), "--peak-tflops", f"{peak_tflops:g}"]


def training_folder(spec: NodeSpec, run_id: str) -> str:
    """The node's scratch folder for the program. It names the node: nodes that share a
    filesystem (several `@local` targets, a shared /tmp) must not truncate each other's
    program while it runs."""
    return f"{SCRATCH}/{run_id}/{spec.node}"


def training_script(spec: NodeSpec, suite: Suite, run_id: str, peak_tflops: float,
                    train_env: str | None = None) -> str:
    """Write the training program (sent on stdin) to the scratch folder and run it on this
    node alone, with the training environment's python (`train_env`, else roles/train_env's
    `train_env_path` for this node)."""
    train_env = train_env or str(train_env_knob(spec, "train_env_path"))
    folder = training_folder(spec, run_id)
    program = f"{folder}/train_smoke.py"
    argv = [program, "--nproc", str(spec.hardware.gpu_count), "--cpu-nproc", str(suite.training_cpu_ranks_single),
            *program_args(suite, peak_tflops)]
    return (preamble() + python_select(train_env) + f"mkdir -p {sh(folder)}\ncat > {sh(program)}\n"
            + '"$gpuctl_py" ' + sh(*argv) + "\n")


def default_train_env() -> str:
    """Where roles/train_env puts the environment unless the inventory says otherwise."""
    return str(train_env_default("train_env_path"))


_PROBE = """import json, sys
try:
    import torch
except ImportError:
    print(json.dumps({"skipped": "no PyTorch", "python": sys.executable}))
    sys.exit(0)
cuda = torch.cuda.is_available()
nccl = None
if cuda:
    try:
        nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:
        pass
print(json.dumps({"python": sys.executable, "torch": torch.__version__, "cuda": torch.version.cuda,
                  "cuda_available": cuda, "gpus": torch.cuda.device_count() if cuda else 0, "nccl": nccl}))
"""


def torch_probe_script(train_env: str) -> str:
    """One JSON line: the python a node would train with, its torch, CUDA and NCCL, and the
    GPUs torch sees (`gpuctl.parsers.training.parse_torch_probe`)."""
    return (preamble() + python_select(train_env)
            + "\"$gpuctl_py\" - <<'GPUCTL_PROBE'\n" + _PROBE + "GPUCTL_PROBE\n")


def rdzv_endpoint(head: NodeSpec, port: int = TRAIN_RDZV_PORT) -> str:
    """host:port of the c10d rendezvous: the first node's fabric address (else its own), as
    for MPI (`mpi_host`); an IPv6 address in brackets."""
    host = mpi_host(head)
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return f"{host}:{port}"


def rdzv_id(run_id: str) -> str:
    """The rendezvous id: the run id with anything but [A-Za-z0-9_.-] replaced."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


def ranks_per_node(spec: NodeSpec, suite: Suite, cuda: bool) -> int:
    """One rank per GPU of the SKU; `training_cpu_ranks_per_node` on CPU (gloo)."""
    return spec.hardware.gpu_count if cuda else suite.training_cpu_ranks_per_node


def torchrun_argv(python: str, spec: NodeSpec, specs: Sequence[NodeSpec], suite: Suite, run_id: str,
                  peak_tflops: float, cuda: bool) -> list[str]:
    """One node's launcher: `python -m torch.distributed.run` (torchrun) with c10d rendezvous
    on the first node of `specs` (that one hosts the store: is_host=1, the others 0), the
    join and read timeouts, no restarts, this node's fabric address as its local address."""
    head = specs[0]
    program = f"{training_folder(spec, run_id)}/train_smoke.py"
    is_host = 1 if spec.node == head.node else 0
    conf = f"join_timeout={suite.training_rdzv_timeout_s},read_timeout={min(60, suite.training_rdzv_timeout_s)}," \
           f"is_host={is_host}"
    return [python, "-m", "torch.distributed.run",
            "--nnodes", str(len(specs)), "--nproc-per-node", str(ranks_per_node(spec, suite, cuda)),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint(head, suite.training_rdzv_port),
            "--rdzv-id", rdzv_id(run_id),
            "--rdzv-conf", conf, "--max-restarts", "0", "--local-addr", mpi_host(spec),
            program, *program_args(suite, peak_tflops)]


def training_env(spec: NodeSpec, specs: Sequence[NodeSpec]) -> dict[str, str]:
    """The launcher's environment: the NCCL settings the multi-node nccl-tests run with
    (`mpi_env`), gloo on the same fabric interface, and the node's inventory name (each rank
    reports it with its checksum)."""
    env = mpi_env(specs)
    port = fabric_port(spec)
    if port is not None:
        env["GLOO_SOCKET_IFNAME"] = port.interface
    elif spec.management_interface:  # the rendezvous uses the node's own address: gloo too
        env["GLOO_SOCKET_IFNAME"] = spec.management_interface
    env["GPUCTL_NODE"] = spec.node
    return env


def training_multi_node_script(spec: NodeSpec, specs: Sequence[NodeSpec], argv: Sequence[str], run_id: str) -> str:
    """On one node: write the program (stdin) to its scratch folder, then run its launcher
    (`torchrun_argv`, which names that program) under the training environment (`training_env`)."""
    folder = training_folder(spec, run_id)
    program = f"{folder}/train_smoke.py"
    env = [f"{k}={v}" for k, v in sorted(training_env(spec, specs).items())]
    return (preamble() + f"mkdir -p {sh(folder)}\ncat > {sh(program)}\n"
            + "exec " + sh("env", *env, *argv) + "\n")
