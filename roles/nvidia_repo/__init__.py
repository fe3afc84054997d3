"""nvidia_repo: the NVIDIA CUDA repository (or the cluster mirror), its signing key verified
by sha256, and apt pinning by origin."""

from gpuctl.components import Component, ManagedFile, on_apt, on_dnf
from gpuctl.knobs import GLOB, ORIGIN, REPO_ID, Path

COMPONENT = Component(
    name="nvidia_repo", order=20,
    summary="the NVIDIA repository, its verified key and apt pinning",
    files=(
        ManagedFile("/etc/apt/sources.list.d/*gpuctl*", covers=("{nvidia_repo_sources_file}",), when=on_apt),
        ManagedFile("/etc/apt/apt.conf.d/*gpuctl-proxy*", covers=("{nvidia_repo_apt_proxy_file}",),
                    when=on_apt),
        ManagedFile("/etc/yum.repos.d/*gpuctl*", covers=("{nvidia_repo_dnf_repo_file}",), when=on_dnf),
    ),
    knobs={
        "nvidia_repo_key_file_apt": Path(("/etc/apt/keyrings", "/usr/share/keyrings")),
        "nvidia_repo_key_file_dnf": Path(("/etc/pki/rpm-gpg",)),
        "nvidia_repo_sources_file": Path(("/etc/apt/sources.list.d",)),
        "nvidia_repo_preferences_file": Path(("/etc/apt/preferences.d",)),
        "nvidia_repo_pin_globs": GLOB,
        "nvidia_repo_distro_origins": ORIGIN,
        "nvidia_repo_apt_proxy_file": Path(("/etc/apt/apt.conf.d",)),
        "nvidia_repo_dnf_repo_file": Path(("/etc/yum.repos.d",)),
        "nvidia_repo_dnf_repo_id": REPO_ID,
    },
)
