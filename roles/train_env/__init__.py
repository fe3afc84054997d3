"""train_env: the training environment (a venv with the matrix's torch build and its lock)."""

from gpuctl.components import Component, ManagedFile
from gpuctl.knobs import Choice, Path, Url, Word


def _applies(w):
    if w.matrix.train_env is None:
        return "matrix pins no training environment"
    if w.knob("train_env_build") == "cpu" and w.matrix.train_env.cpu is None:
        return "role_vars.train_env_build is cpu; the matrix pins no train_env.cpu"
    return "" if w.knob("train_env_enabled") is not False else "role_vars.train_env_enabled is false"


def _rendered(spec):
    """Its files are on the node where the matrix pins an environment and the role runs."""
    return spec.train_env is not None and spec.roles.get("train_env") == ""


COMPONENT = Component(
    name="train_env", order=160,
    summary="the training environment (torch venv)",
    files=(
        ManagedFile("/etc/profile.d/gpuctl-train-env.sh", knob="train_env_profile_file", when=_rendered),
        ManagedFile("/opt/gpuctl/train-env.lock.txt", knob="train_env_lock_file", when=_rendered),
    ),
    applies=_applies,
    knobs={
        "train_env_build": Choice(("cuda", "cpu"), "training environment build"),
        "train_env_path": Path(("/opt/gpuctl",)),
        "train_env_lock_file": Path(("/opt/gpuctl",)),
        "train_env_probe_file": Path(("/opt/gpuctl",)),
        "train_env_profile_file": Path(("/etc/profile.d",)),
        "train_env_index_url": Url(schemes=("https", "http", "file"), words=("",)),
        "train_env_python_package": Word(r"[A-Za-z0-9][A-Za-z0-9.+_~-]*(\{python\}[A-Za-z0-9.+_~-]*)?",
                                         "package name ({python} allowed)"),
    },
)
