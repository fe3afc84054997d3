"""`gpuctl lab …`: bring the emulated-node lab up and down, inspect it, reach its nodes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from gpuctl.cli.common import console, emit_json, handle_errors, json_option
from gpuctl.errors import ExecutionError, InputError


@click.group("lab")
def lab_group() -> None:
    """Emulated bare-metal nodes (QEMU) for rehearsal and testing."""


@lab_group.command("up")
@click.option("--kind", type=click.Choice(["qemu", "container"]), default="qemu", show_default=True,
              help="Node kind: QEMU VMs (own kernel; default) or systemd-nspawn containers (for scale).")
@click.option("--nodes", "nodes", type=int, default=2, show_default=True, help="Number of nodes.")
@click.option("--sku", default="hgx-h100-80gb", show_default=True, help="SKU the nodes pretend to be.")
@click.option("--nvme", type=int, default=4, show_default=True, help="NVMe drives per node.")
@click.option("--nvme-size", "nvme_size_gb", type=int, default=2, show_default=True,
              help="Size of each NVMe drive in GiB (sparse).")
@click.option("--smp", type=int, default=2, show_default=True, help="vCPUs per node.")
@click.option("--memory", "memory_mb", type=int, default=1536, show_default=True,
              help="Memory per node in MiB.")
@click.option("--cpu", default="qemu64", show_default=True,
              help="QEMU CPU model (qemu64 boots fastest under TCG; 'max' for newer instructions).")
@click.option("--matrix", default=None,
              help="Version matrix written into the lab inventory (default: the one in inventories/lab.yaml).")
@click.option("--inventory", "inventory_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Where to write the generated lab inventory (default: the lab state dir, "
              "removed by `lab down`); never under the checked-in inventories/, whose lab.yaml is its template.")
@click.option("--timeout", "boot_timeout", type=float, default=240.0, show_default=True,
              help="Seconds to wait for SSH on each node.")
@click.option("--train-env", "train_env", is_flag=True,
              help="Enable the training environment's CPU build in the inventory (train_env_build: cpu) and fill "
                   "the lab mirror's wheelhouse from the lab's stand-in of PyTorch's CPU index (~200 MB once); on "
                   "QEMU nodes also size the bench's training run for emulation (bench.training: tiny).")
@json_option
@handle_errors
def up_cmd(kind: str, nodes: int, sku: str, nvme: int, nvme_size_gb: int, smp: int, memory_mb: int,
           cpu: str, matrix: str, inventory_path: Path | None, boot_timeout: float, train_env: bool,
           as_json: bool) -> None:
    """Build the image (once), start the caches, the fabric and NODES QEMU nodes
    (or, with --kind container, NODES systemd-nspawn containers for scale runs)."""
    if kind == "container":
        _up_containers(nodes, sku, matrix, inventory_path, boot_timeout, as_json, train_env)
        return
    from gpuctl.lab.nodes import up

    state = up(nodes, sku, nvme, nvme_size_gb=nvme_size_gb, smp=smp, memory_mb=memory_mb, cpu=cpu,
               matrix=matrix, inventory_path=inventory_path, boot_timeout=boot_timeout)
    wheels = _train_env(Path(state.inventory_path), Path(state.repo_dir), f"http://127.0.0.1:{state.repo_port}/",
                        as_json, emulated=True) if train_env else None
    if as_json:
        emit_json({"inventory": state.inventory_path, "nodes": {
            n.name: {"ssh_port": n.ssh_port, "pid": n.process.pid if n.process else None}
            for n in state.nodes}, "key": state.key_path, **({"train_env": wheels} if wheels else {})})
        return
    out = console()
    for node in state.nodes:
        out.print(f"{node.name}: ssh -p {node.ssh_port} root@127.0.0.1  (gpuctl lab ssh {node.name})")
    _print_inventory(state.inventory_path)


def _print_inventory(path: str) -> None:
    """Where `lab up` wrote the generated inventory, and how to use it (the console soft-wraps:
    a long path stays on one line for a script or a reader to take as is)."""
    out = console()
    out.print(f"inventory written to: {path}", markup=False)
    out.print(f"next: gpuctl provision {path} --yes", markup=False)


def _train_env(inventory: Path, repo: Path, repo_url_here: str, as_json: bool, emulated: bool = False) -> dict:
    """`--train-env`: the inventory switched to the CPU build (on `emulated` QEMU nodes with the
    bench's training run sized for them), the mirror's wheelhouse filled (gpuctl.lab.trainenv);
    on failure the lab stays up and the error says so."""
    from gpuctl.lab import trainenv

    trainenv.enable_in_inventory(inventory, emulated=emulated)
    try:
        res = trainenv.prepare(inventory, repo, repo_url_here)
    except (ExecutionError, OSError) as exc:
        raise ExecutionError(f"{exc} (the lab is up; `gpuctl lab down` stops it)") from None
    if not as_json:
        m = res["mirror"]
        console().print(f"training environment: CPU build; the lab mirror's wheelhouse {m['dir']}: {m['fetched']} "
                        f"wheel(s) fetched ({m['bytes_fetched']} bytes) from {m['upstream']}, {m['cached']} already "
                        "there", markup=False)
    return res


def _up_containers(nodes: int, sku: str, matrix: str, inventory_path: Path | None, boot_timeout: float,
                   as_json: bool, train_env: bool = False) -> None:
    from gpuctl.lab import containers
    from gpuctl.lab.netcache import repo_dir

    state = containers.up(nodes, sku, matrix, inventory_path=inventory_path.resolve() if inventory_path else None,
                          boot_timeout=boot_timeout)
    wheels = _train_env(Path(state.inventory_path), repo_dir(), state.repo_url, as_json) if train_env else None
    if as_json:
        emit_json({"kind": "container", "inventory": state.inventory_path, "key": state.key_path, "nodes": {
            n.name: {"address": n.address, "pid": n.process.pid if n.process else None} for n in state.nodes},
            **({"train_env": wheels} if wheels else {})})
        return
    out = console()
    out.print(f"{len(state.nodes)} container node(s): {state.nodes[0].address} … {state.nodes[-1].address} "
              f"(gpuctl lab ssh --kind container {state.nodes[0].name})")
    _print_inventory(state.inventory_path)


@lab_group.command("down")
@click.option("--kind", type=click.Choice(["qemu", "container"]), default="qemu", show_default=True,
              help="Which lab: the QEMU one or the container one.")
@click.option("--force", is_flag=True, help="Stop the lab even if another checkout started it.")
@json_option
@handle_errors
def down_cmd(kind: str, force: bool, as_json: bool) -> None:
    """Stop every lab process and remove the nodes' disks (or the container lab's nodes).
    A lab started from another checkout is left alone unless --force."""
    from gpuctl.lab.state import other_owner

    if kind == "container":
        from gpuctl.lab.containers import down as down_containers
        from gpuctl.lab.containers import load_state as load_containers

        clab = load_containers()
        why = other_owner(clab.checkout, "the container lab") if clab is not None else None
        if why and not force:
            raise InputError(why)
        stopped = down_containers(clab)
        if as_json:
            emit_json({"stopped": stopped})
        else:
            console().print(f"stopped: {len(stopped)} process(es)" if stopped else "stopped: nothing was running")
        return
    from gpuctl.lab.nodes import down
    from gpuctl.lab.state import load_state

    lab = load_state()
    why = other_owner(lab.checkout, "the lab") if lab is not None else None
    if why and not force:
        raise InputError(why)
    stopped = down(lab)
    if as_json:
        emit_json({"stopped": stopped})
    else:
        console().print("stopped: " + (", ".join(stopped) or "nothing was running"))


@lab_group.command("status")
@click.option("--kind", type=click.Choice(["qemu", "container"]), default="qemu", show_default=True,
              help="Which lab: the QEMU one or the container one.")
@json_option
@handle_errors
def status_cmd(kind: str, as_json: bool) -> None:
    """Nodes and services of the lab: PIDs alive, ports, SSH reachable."""
    from rich.table import Table

    if kind == "container":
        from gpuctl.lab.containers import status as container_status

        info = container_status()
        if as_json:
            emit_json(info)
            return
        table = Table("node", "pid", "alive", "address", "ssh")
        for n in info["nodes"]:
            table.add_row(n["name"], str(n["pid"]), _yes(n["alive"]), n["address"], _yes(n["ssh"]))
        console().print(table if info["nodes"] else f"no container lab (state {info['state']})")
        return

    from gpuctl.lab.nodes import status

    info = status()
    if as_json:
        emit_json(info)
        return
    out = console()
    if not info["nodes"]:
        out.print(f"no lab (state {info['state']})")
        return
    table = Table("node", "pid", "alive", "ssh port", "ssh", "rss MiB", "fabric ip")
    for n in info["nodes"]:
        table.add_row(n["name"], str(n["pid"]), _yes(n["alive"]), str(n["ssh_port"]),
                      _yes(n["ssh"]), str(n["rss_mb"] or "-"), n["fabric_ip"])
    out.print(table)
    services = Table("service", "pid", "alive", "port")
    for s in info["services"]:
        services.add_row(s["name"], str(s["pid"]), _yes(s["alive"]), str(s["port"] or "-"))
    out.print(services)
    out.print(f"inventory: {info['inventory']}")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@lab_group.command("ssh", context_settings={"ignore_unknown_options": True})
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--kind", type=click.Choice(["qemu", "container"]), default="qemu", show_default=True,
              help="Which lab: the QEMU one or the container one.")
@handle_errors
def ssh_cmd(node: str, command: tuple[str, ...], kind: str) -> None:
    """Open a shell on NODE, or run COMMAND there (`gpuctl lab ssh gpu-01 -- uname -r`)."""
    from gpuctl.errors import ExecutionError

    if kind == "container":
        import shlex

        from gpuctl.lab import containers

        cstate = containers.load_state()
        if cstate is None:
            raise ExecutionError("no container lab is running: run `gpuctl lab up --kind container` first")
        argv = containers.ssh_argv(cstate, cstate.node(node), shlex.join(command) if command else None,
                                   tty=not command and sys.stdin.isatty())
        sys.exit(subprocess.call(argv))
    from gpuctl.lab.ssh import ssh_argv
    from gpuctl.lab.state import load_state

    state = load_state()
    if state is None:
        raise ExecutionError("no lab is running: run `gpuctl lab up` first")
    target = state.node(node)
    argv = ssh_argv(target.ssh_port, state.key_path, state.known_hosts,
                    list(command) if command else None, tty=not command and sys.stdin.isatty())
    sys.exit(subprocess.call(argv))


@lab_group.command("kill")
@click.argument("node")
@handle_errors
def kill_cmd(node: str) -> None:
    """Hard-kill NODE's QEMU (like pulling the power cord)."""
    from gpuctl.lab.nodes import kill_node

    kill_node(node)
    console().print(f"{node}: killed")


@lab_group.command("start")
@click.argument("node")
@handle_errors
def start_cmd(node: str) -> None:
    """Start a killed NODE again on its own disks and wait for SSH."""
    from gpuctl.lab.nodes import start_node

    waited = start_node(node)
    console().print(f"{node}: SSH after {waited:.0f} s")


@lab_group.command("replace")
@click.argument("node")
@handle_errors
def replace_cmd(node: str) -> None:
    """Replace NODE as after a hardware swap: fresh root disk, blank NVMe drives, same
    name and address; rehearse `gpuctl rebuild --host NODE` on it."""
    from gpuctl.lab.nodes import replace_node

    waited = replace_node(node)
    console().print(f"{node}: replaced (fresh disk, blank NVMe); SSH after {waited:.0f} s")


@lab_group.command("image")
@click.option("--force", is_flag=True, help="Rebuild even if the cached image exists.")
@json_option
@handle_errors
def image_cmd(force: bool, as_json: bool) -> None:
    """Build (or show) the cached base image."""
    from pathlib import Path as _Path

    from gpuctl.lab.image import build_image
    from gpuctl.lab.netcache import apt_cache_dir, start_server
    from gpuctl.lab.state import state_root, stop_process

    port, rec = start_server("proxy", apt_cache_dir(), _Path(state_root()) / "image-run")
    try:
        image = build_image(proxy_port=port, force=force)
    finally:
        stop_process(rec, "apt-proxy")
    info = {"directory": str(image.directory), "kernel_version": image.kernel_version,
            "root": str(image.root), "disk": str(image.disk)}
    if as_json:
        emit_json(info)
    else:
        for key, value in info.items():
            console().print(f"{key}: {value}")


def register(main: click.Group) -> None:
    main.add_command(lab_group)
