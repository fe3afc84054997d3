"""The lab's Debian 12 base image: built once with debootstrap, cached by recipe hash.

Layout of ``<cache>/image-<hash>/`` (written under ``…partial`` and renamed when
complete, so a half-built image is never used):

- ``root/``    the extracted rootfs (kept: the stand-in builder compiles its
               ``nvidia`` kernel module against it via chroot; see `image_root()`)
- ``disk.img`` the raw ext4 root disk made with ``mkfs.ext4 -d`` (sparse, never mounted)
- ``vmlinuz``, ``initrd.img`` the guest kernel and initramfs for ``-kernel``/``-initrd``
- ``manifest.json`` recipe, kernel version, host key, step timings

The image holds no lab credentials: the lab's public SSH key (``<cache>/ssh/``) is
passed on each node's kernel command line and installed at the node's first boot;
hostname and apt proxy come from the command line too, so one image serves every lab.
The sshd host key is baked in (every lab node shares it; the lab's known_hosts pins it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuctl.errors import ExecutionError
from gpuctl.lab.state import cache_root

log = logging.getLogger(__name__)

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://security.debian.org/debian-security"
DISK_SIZE = "5G"
#: Bump when the configuration written into the image changes.
RECIPE_REVISION = 2

DEBOOTSTRAP_INCLUDE: tuple[str, ...] = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "iputils-ping",
    "udev", "kmod", "ifupdown", "mdadm", "xfsprogs", "e2fsprogs", "perftest", "rdma-core",
    "ibverbs-utils", "infiniband-diags", "fio", "sudo", "gnupg", "ca-certificates",
    "initramfs-tools", "procps", "less", "pciutils", "nvme-cli", "vlan", "curl",
)
#: Installed in the chroot after debootstrap: the guest kernel, and what the stand-in
#: builder needs to compile a real module against it.
CHROOT_PACKAGES: tuple[str, ...] = ("linux-image-amd64", "linux-headers-amd64", "gcc", "make", "lz4")
#: Timers that would start apt or disk jobs in the middle of a test run.
MASKED_UNITS: tuple[str, ...] = (
    "apt-daily.timer", "apt-daily-upgrade.timer", "apt-daily.service",
    "apt-daily-upgrade.service", "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer",
    "man-db.timer", "mdcheck_start.timer", "mdcheck_continue.timer", "mdmonitor-oneshot.timer",
    "getty@tty1.service", "nvmf-autoconnect.service",
)

BOOT_SCRIPT = """#!/bin/sh
# gpuctl lab: per-node settings from the kernel command line (written at every boot).
set -eu
proxy=""
key=""
for word in $(cat /proc/cmdline); do
    case "$word" in
        gpuctl.apt_proxy=*) proxy="${word#gpuctl.apt_proxy=}" ;;
        gpuctl.ssh_key=*) key="${word#gpuctl.ssh_key=}" ;;
    esac
done
# The lab key is installed at first boot only (like cloud-init): a later handover that
# removes it stays removed across reboots.
if [ -n "$key" ] && [ ! -e /root/.ssh/authorized_keys ]; then
    install -d -m 0700 /root/.ssh
    printf 'ssh-ed25519 %s gpuctl-lab\n' "$key" > /root/.ssh/authorized_keys
    chmod 0600 /root/.ssh/authorized_keys
fi
conf=/etc/apt/apt.conf.d/00gpuctl-lab-proxy
if [ -n "$proxy" ]; then
    host="${proxy#http://}"; host="${host%%:*}"
    printf 'Acquire::http::Proxy "%s";\\nAcquire::http::Proxy::%s "DIRECT";\\n' \\
        "$proxy" "$host" > "$conf"
else
    rm -f "$conf"
fi
name="$(hostname)"
grep -q "[[:space:]]$name\\$" /etc/hosts || printf '127.0.1.1\\t%s\\n' "$name" >> /etc/hosts
"""

#: A small lz4 initramfs: under TCG, unpacking the stock 36 MB zstd one (MODULES=most)
#: costs 5-30 s per boot. The root disk is virtio + ext4, so these modules suffice.
INITRAMFS_CONF = "MODULES=list\nCOMPRESS=lz4\n"
INITRAMFS_MODULES = "virtio_pci\nvirtio_blk\next4\n"
#: mdadm's initramfs hook force-loads raid456, whose raid6 benchmark costs ~10 s per boot
#: under TCG; lab roots are never on md, so the hook is diverted away in the image.
MDADM_HOOK = "/usr/share/initramfs-tools/hooks/mdadm"

BOOT_UNIT = """[Unit]
Description=gpuctl lab: per-node settings from the kernel command line
DefaultDependencies=no
After=local-fs.target
Before=network-pre.target ssh.service
Wants=network-pre.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/gpuctl-lab-boot
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""

SSHD_CONFIG = """# gpuctl lab
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
HostKey /etc/ssh/ssh_host_ed25519_key
"""

INTERFACES = """# gpuctl lab: management NIC on QEMU user networking (static: minbase has no DHCP client)
source /etc/network/interfaces.d/*

auto lo
iface lo inet loopback

auto eth0
iface eth0 inet static
    address 10.0.2.15/24
    gateway 10.0.2.2
"""

SOURCES_LIST = f"""deb {MIRROR} {SUITE} main
deb {MIRROR} {SUITE}-updates main
deb {SECURITY_MIRROR} {SUITE}-security main
"""


@dataclass(frozen=True)
class Image:
    """A built, cached base image."""

    directory: Path
    kernel_version: str
    host_public_key: str

    @property
    def root(self) -> Path:
        return self.directory / "root"

    @property
    def disk(self) -> Path:
        return self.directory / "disk.img"

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"


def recipe() -> dict[str, object]:
    """Everything that determines the image's content."""
    return {
        "revision": RECIPE_REVISION,
        "suite": SUITE,
        "mirror": MIRROR,
        "include": sorted(DEBOOTSTRAP_INCLUDE),
        "chroot_packages": list(CHROOT_PACKAGES),
        "masked": list(MASKED_UNITS),
        "files": hashlib.sha256(
            (BOOT_SCRIPT + BOOT_UNIT + SSHD_CONFIG + INTERFACES + SOURCES_LIST + INITRAMFS_CONF
             + INITRAMFS_MODULES + MDADM_HOOK).encode()
        ).hexdigest(),
        "disk_size": DISK_SIZE,
    }


def recipe_hash() -> str:
    data = json.dumps(recipe(), sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()[:12]


def image_dir() -> Path:
    """The cache directory of the image for the current recipe (built or not)."""
    return cache_root() / f"image-{recipe_hash()}"


def load_image(directory: Path | None = None) -> Image | None:
    """The cached image for the current recipe, or None if it is not built yet."""
    target = directory or image_dir()
    manifest = target / "manifest.json"
    if not manifest.exists():
        return None
    data = json.loads(manifest.read_text())
    return Image(target, data["kernel_version"], data["host_public_key"])


def image_root() -> Path:
    """The extracted rootfs of the built image (for chroot builds against the guest).

    Raises ExecutionError if the image is not built yet (`lab up` or `build_image()`)."""
    img = load_image()
    if img is None:
        raise ExecutionError("the lab image is not built yet: run `gpuctl lab up` (or build_image())")
    return img.root


def guest_kernel_version() -> str:
    """The guest kernel's release string (``uname -r`` inside a node), e.g. ``6.1.0-37-amd64``."""
    img = load_image()
    if img is None:
        raise ExecutionError("the lab image is not built yet: run `gpuctl lab up` (or build_image())")
    return img.kernel_version


class _Steps:
    """Run and time the build steps; every command's output goes to the build log."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.timings: dict[str, float] = {}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        log.info("image: %s …", name)
        start = time.monotonic()
        yield
        took = time.monotonic() - start
        self.timings[name] = round(took, 1)
        log.info("image: %s done in %.1f s", name, took)

    def run(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        with self.log_path.open("a") as out:
            out.write(f"\n$ {' '.join(argv)}\n")
            out.flush()
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, check=False)
        if proc.returncode != 0:
            tail = self.log_path.read_text()[-3000:]
            raise ExecutionError(
                f"image build step failed ({argv[0]} exit {proc.returncode}); "
                f"log {self.log_path}:\n{tail}"
            )


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / "image.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def debootstrap_argv(root: Path) -> list[str]:
    return [
        "debootstrap", "--variant=minbase", f"--include={','.join(DEBOOTSTRAP_INCLUDE)}",
        SUITE, str(root), MIRROR,
    ]


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _configure(root: Path) -> None:
    """Write the lab configuration into the rootfs."""
    _write(root / "etc/hostname", "lab-node\n")
    _write(root / "etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    _write(root / "etc/resolv.conf", "nameserver 10.0.2.3\n")
    _write(root / "etc/fstab", "/dev/vda\t/\text4\trw,errors=remount-ro\t0\t1\n")
    _write(root / "etc/network/interfaces", INTERFACES)
    (root / "etc/network/interfaces.d").mkdir(parents=True, exist_ok=True)
    _write(root / "etc/apt/sources.list", SOURCES_LIST)
    _write(root / "etc/apt/apt.conf.d/10gpuctl-lab-periodic", 'APT::Periodic::Enable "0";\n')
    _write(root / "etc/ssh/sshd_config.d/gpuctl-lab.conf", SSHD_CONFIG)
    (root / "root/.ssh/authorized_keys").unlink(missing_ok=True)
    _write(root / "usr/local/sbin/gpuctl-lab-boot", BOOT_SCRIPT, 0o755)
    _write(root / "etc/systemd/system/gpuctl-lab-boot.service", BOOT_UNIT)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / "gpuctl-lab-boot.service"
    if not link.is_symlink():
        link.symlink_to("/etc/systemd/system/gpuctl-lab-boot.service")
    for unit in MASKED_UNITS:
        target = root / "etc/systemd/system" / unit
        if target.exists() or target.is_symlink():
            target.unlink()
        target.symlink_to("/dev/null")
    # Serial console on ttyS0 comes from console=ttyS0; keep journald off the console.
    _write(root / "etc/systemd/journald.conf.d/gpuctl-lab.conf",
           "[Journal]\nForwardToConsole=no\nStorage=persistent\n")
    # Machine id: empty, so each node makes its own at first boot.
    _write(root / "etc/machine-id", "")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)


def _kernel_version(root: Path) -> str:
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise ExecutionError(f"no kernel found in {root / 'boot'} after installing linux-image-amd64")
    return kernels[-1].name.removeprefix("vmlinuz-")


def build_image(proxy_port: int | None = None, force: bool = False) -> Image:
    """Build (or reuse) the base image; downloads go through the lab cache if given.

    `proxy_port` is the lab apt cache on 127.0.0.1; without it the mirror is used directly.
    """
    target = image_dir()
    with _build_lock():
        existing = load_image(target)
        if existing is not None and not force:
            log.info("image: reusing %s (kernel %s)", target, existing.kernel_version)
            return existing
        partial = target.with_name(target.name + ".partial")
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        root = partial / "root"
        steps = _Steps(partial / "build.log")
        env = dict(os.environ)
        apt_opts: list[str] = []
        if proxy_port:
            proxy = f"http://127.0.0.1:{proxy_port}"
            env["http_proxy"] = proxy
            apt_opts = ["-o", f"Acquire::http::Proxy={proxy}"]
        chroot_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive",
                      "LC_ALL": "C"}
        total_start = time.monotonic()
        with steps.step("debootstrap"):
            steps.run(debootstrap_argv(root), env=env)
        _write(root / "etc/apt/sources.list", SOURCES_LIST)
        _write(root / "usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n", 0o755)
        _write(root / "etc/initramfs-tools/conf.d/gpuctl-lab.conf", INITRAMFS_CONF)
        _write(root / "etc/initramfs-tools/modules", INITRAMFS_MODULES)
        steps.run(["chroot", str(root), "dpkg-divert", "--local", "--rename", "--divert",
                   MDADM_HOOK + ".gpuctl-lab", "--add", MDADM_HOOK], env=chroot_env)
        with steps.step("apt-get update"):
            steps.run(["chroot", str(root), "apt-get", *apt_opts, "update"], env=chroot_env)
        with steps.step("kernel, headers, compiler"):
            steps.run(["chroot", str(root), "apt-get", *apt_opts, "-y", "install",
                       *CHROOT_PACKAGES], env=chroot_env)
        with steps.step("configure"):
            (root / "usr/sbin/policy-rc.d").unlink()
            steps.run(["chroot", str(root), "apt-get", "clean"], env=chroot_env)
            _configure(root)
            version = _kernel_version(root)
            shutil.copy2(root / "boot" / f"vmlinuz-{version}", partial / "vmlinuz")
            shutil.copy2(root / "boot" / f"initrd.img-{version}", partial / "initrd.img")
            host_pub = (root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().strip()
        with steps.step("mkfs.ext4 -d"):
            disk = partial / "disk.img"
            steps.run(["truncate", "-s", DISK_SIZE, str(disk)])
            steps.run(["mkfs.ext4", "-F", "-q", "-L", "gpuctl-root", "-d", str(root), str(disk)])
        steps.timings["total"] = round(time.monotonic() - total_start, 1)
        manifest = {
            "recipe": recipe(),
            "kernel_version": version,
            "host_public_key": host_pub,
            "timings_s": steps.timings,
            "built_with_cache": bool(proxy_port),
            "built": time.time(),
        }
        _write(partial / "manifest.json", json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        partial.rename(target)
        log.info("image: built %s in %.0f s (%s)", target, steps.timings["total"], steps.timings)
        return Image(target, version, host_pub)
