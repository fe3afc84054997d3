"""nvidia_repo: the NVIDIA CUDA repository (or the cluster's mirror), trusted only
through a signing key whose sha256 the NodeSpec pins.

- apt proxy drop-in for OS packages when spec.repo.apt_proxy is set (NVIDIA repo DIRECT);
- the vendor key downloaded from spec.repo.keyring_url and verified against
  spec.repo.keyring_sha256 before anything uses it; **no checksum → the host fails**
  ("never install an unverified key");
- apt: the key dearmored to spec.repo.keyring_path, a deb822 source with Signed-By,
  pinning by origin (NVIDIA names at priority 600 from spec.repo.origin, the same names
  from the distribution archives at -1), `apt-get update` only when a source, key or pin
  file changed (or apt has no lists for the repository yet);
- RHEL 9: a .repo file with gpgcheck=1 and the verified key, `dnf makecache` on change.
"""

from __future__ import annotations

import logging

from pyinfra import host
from pyinfra.api import deploy

from gpuctl.deploy_context import node_spec
from gpuctl.facts.system import FileStates, RepoFacts, apt_lists_prefix
from gpuctl.operations import (
    apt_update,
    dearmor_keyring,
    dnf_makecache,
    fail_host,
    fetch_verified,
    render,
    role_knobs,
    write_file,
)

log = logging.getLogger(__name__)


def pinned_names(spec_packages: list[str], globs: list[str]) -> str:
    """The Package: field of the pin: globs first, then exact names not covered by them."""
    import fnmatch

    exact = sorted({n for n in spec_packages if not any(fnmatch.fnmatchcase(n, g) for g in globs)})
    return " ".join([*globs, *exact])


def _repo_host(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]


@deploy("nvidia_repo")
def install() -> None:
    spec = node_spec()
    repo = spec.repo
    k = role_knobs("nvidia_repo")
    apt = spec.package_manager == "apt"
    label = f"NVIDIA repository {repo.url}"
    if not repo.keyring_sha256:
        fail_host(name=f"Refuse the unverified signing key {repo.keyring_url}",
                  reason=(f"no sha256 for the NVIDIA signing key {repo.keyring_url} "
                          f"(catalog: {repo.source}); set repos.keyring_sha256 in the inventory "
                          "from a verified download — gpuctl never installs an unverified key"))
        return
    key_file = str(k["nvidia_repo_key_file_apt"] if apt else k["nvidia_repo_key_file_dnf"])
    if apt:
        managed = [str(k["nvidia_repo_apt_proxy_file"]), str(k["nvidia_repo_sources_file"]),
                   str(k["nvidia_repo_preferences_file"]), key_file]
    else:
        managed = [str(k["nvidia_repo_dnf_repo_file"]), key_file]
    files = host.get_fact(FileStates, paths=tuple(managed))

    if not apt:
        key = fetch_verified(name=f"Download the NVIDIA signing key (sha256 {repo.keyring_sha256[:12]}…)",
                             url=repo.keyring_url, dest=key_file, sha256=repo.keyring_sha256, states=files)
        repo_file = write_file(name=f"Add the {label}", path=str(k["nvidia_repo_dnf_repo_file"]),
                               content=render("nvidia_repo", "nvidia.repo.j2", description=label,
                                              repo_id=k["nvidia_repo_dnf_repo_id"], url=repo.url,
                                              key_file=key_file),
                               states=files)
        dnf_makecache(name="Refresh the dnf cache",
                      _if=lambda: key.did_change() or repo_file.did_change())
        return

    state = host.get_fact(RepoFacts, armored=key_file, keyring=repo.keyring_path,
                          lists_prefix=apt_lists_prefix(repo.url))
    proxy = write_file(
        name=f"Send OS packages through the apt proxy {repo.apt_proxy}" if repo.apt_proxy
        else "Remove gpuctl's apt proxy setting (none in the inventory)",
        path=str(k["nvidia_repo_apt_proxy_file"]),
        content=render("nvidia_repo", "apt-proxy.conf.j2", proxy=repo.apt_proxy, repo_host=_repo_host(repo.url))
        if repo.apt_proxy else None,
        states=files)
    key = fetch_verified(name=f"Download the NVIDIA signing key (sha256 {repo.keyring_sha256[:12]}…)",
                         url=repo.keyring_url, dest=key_file, sha256=repo.keyring_sha256, states=files)
    keyring = dearmor_keyring(name=f"Install the verified NVIDIA keyring {repo.keyring_path}",
                              armored=key_file, keyring=repo.keyring_path, armored_sha256=repo.keyring_sha256,
                              keyring_matches=state.keyring_matches)
    source = write_file(name=f"Add the {label} (deb822, Signed-By)", path=str(k["nvidia_repo_sources_file"]),
                        content=render("nvidia_repo", "nvidia.sources.j2", description=label, url=repo.url,
                                       keyring=repo.keyring_path),
                        states=files)
    globs = [str(g) for g in k["nvidia_repo_pin_globs"]]  # type: ignore[union-attr]
    names = [p.name for c, comp in spec.components.items() if c not in ("ofed", "lustre")
             for p in comp.packages]
    pin = write_file(name=f"Pin NVIDIA packages to origin {repo.origin}", path=str(k["nvidia_repo_preferences_file"]),
                     content=render("nvidia_repo", "preferences.j2", origin=repo.origin,
                                    packages=pinned_names(names, globs),
                                    priority=k["nvidia_repo_pin_priority"],
                                    driver_version=spec.driver_version,
                                    driver_priority=k["nvidia_repo_driver_pin_priority"],
                                    distro_origins=list(k["nvidia_repo_distro_origins"])),  # type: ignore[arg-type]
                     states=files)
    changed = (proxy, key, keyring, source, pin)
    lists_missing = not state.lists_present
    apt_update(name="Update apt package lists",
               _if=lambda: lists_missing or any(op.did_change() for op in changed))
