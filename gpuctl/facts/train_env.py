"""The training environment's venv on a host, read in one command (roles/train_env).

`TrainEnvState(path)`: where the fixed path points (it is a symlink to the versioned
environment the role built) and every distribution installed there, listed by the venv's
own python through importlib.metadata (`gpuctl.parsers.train_env.DIST_LISTING`). A host
without the environment answers `link=` and nothing else; the command always exits 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyinfra.api import FactBase

from gpuctl.facts import marker
from gpuctl.parsers.train_env import DIST_LISTING, parse_distributions
from gpuctl.shellcmd import sh


@dataclass(frozen=True)
class TrainEnv:
    """`target`: what the path's symlink points to (None: no symlink; "" when the path is
    something else than a symlink); `distributions`: {canonical name: version}."""

    target: str | None
    distributions: dict[str, str] = field(default_factory=dict)
    not_a_link: bool = False


def parse_train_env(lines: list[str]) -> TrainEnv:
    target: str | None = None
    not_a_link = False
    for line in lines:
        if line.startswith("link="):
            target = line[5:] or None
        elif line == "notalink":
            not_a_link = True
    return TrainEnv(target=target, distributions=parse_distributions(lines), not_a_link=not_a_link)


class TrainEnvState(FactBase[TrainEnv]):
    def command(self, path: str) -> str:
        p = sh(path)
        return (marker("train-env") + f" if [ -L {p} ]; then echo \"link=$(readlink {p})\"; "
                f"elif [ -e {p} ]; then echo notalink; else echo link=; fi; "
                f"if [ -x {p}/bin/python ]; then {p}/bin/python -c {sh(DIST_LISTING)} 2>/dev/null; fi; true")

    @staticmethod
    def default() -> TrainEnv:
        return TrainEnv(target=None)

    def process(self, output: list[str]) -> TrainEnv:
        return parse_train_env(output)
