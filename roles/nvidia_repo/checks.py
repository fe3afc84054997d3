"""Checks of the nvidia_repo role: the signing keyring is installed and a package source
points at the repository (or mirror) the spec names, signed by that keyring."""

from __future__ import annotations

from gpuctl.checks.api import CouldNotRun, Remediation, expect, fail

ROLE = "nvidia_repo"
SOURCE_FOLDERS = ("/etc/apt/sources.list.d/", "/etc/yum.repos.d/")


def test_keyring_present(host, spec, probe):
    path = spec.repo.keyring_path
    files, errors = probe.files()
    if path not in files:
        fail(f"the repository keyring {path} is missing", expected=f"{path} present",
             found=errors.get(path, "missing"), remediation=Remediation.RECONFIGURE)


def test_repo_source(host, spec, probe):
    url = spec.repo.url.rstrip("/")
    sources = {p: t for folder in SOURCE_FOLDERS for p, t in probe.files_under(folder).items()}
    matching = {p: t for p, t in sources.items() if url in t}
    _, errors = probe.files()
    unreadable = sorted(p for p, e in errors.items() if p.startswith(SOURCE_FOLDERS) and "denied" in e.lower())
    if not matching and unreadable:
        # a source holding a credential is root's alone (gpuctl.operations.write_file)
        raise CouldNotRun(f"cannot read {', '.join(unreadable)} as the SSH user ({errors[unreadable[0]]}): "
                          "a package source holding a credential is readable by root only; verify as root")
    if not matching:
        fail(f"no package source names {url}", expected=f"a source for {url}",
             found=", ".join(sorted(sources)) or "no source files", remediation=Remediation.RECONFIGURE)
    signed = [p for p, t in matching.items() if spec.repo.keyring_path in t or "gpgkey" in t]
    expect(bool(signed), f"the source for {url} is not tied to the keyring {spec.repo.keyring_path}",
           expected=f"signed-by {spec.repo.keyring_path}", found=", ".join(sorted(matching)),
           remediation=Remediation.RECONFIGURE)
