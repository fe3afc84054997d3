"""The training environment's two outputs: the distributions installed in its venv and the
probe's JSON (templates/train_env/probe.py, run with the venv's python).

Distributions (one line each, printed by `DIST_LISTING` through importlib.metadata):

    dist=torch==2.8.0
    dist=nvidia_nccl_cu12==2.27.3          # names normalised here (PEP 503): nvidia-nccl-cu12

Probe (one JSON object, schema "gpuctl-train-env" v1):

    {"probe": "gpuctl-train-env", "version": 1, "python": "3.11.2", "torch": "2.8.0+cu128",
     "cuda": "12.8", "nccl": "2.27.3", "cuda_available": true, "device_count": 8,
     "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "max_abs_err": 1.9e-06,
               "max_abs_ref": 71.3, "error": null}, ...],
     "distributions": {"torch": "2.8.0", ...}, "error": null}

`error` is set (and `torch` null) when `import torch` failed; a GPU whose matmul raised has
its own `error`. The judgement (versions, counts, tolerance) is the checks', not the parser's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote

PROBE_SCHEMA = "gpuctl-train-env"
PROBE_VERSION = 1

#: Python source, run with the venv's interpreter: one `dist=<name>==<version>` per distribution.
DIST_LISTING = ("import importlib.metadata as m\n"
                "for d in m.distributions(): print('dist=%s==%s' % (d.metadata['Name'], d.version))")


def canonical(name: str) -> str:
    """PEP 503 normalised name: 'Nvidia_NCCL.cu12' → 'nvidia-nccl-cu12'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_distributions(lines: list[str]) -> dict[str, str]:
    """`dist=<name>==<version>` lines → {canonical name: version}; other lines ignored."""
    out: dict[str, str] = {}
    for line in lines:
        if not line.startswith("dist="):
            continue
        name, sep, version = line[5:].strip().partition("==")
        if sep and name and version:
            out[canonical(name)] = version
    return out


@dataclass(frozen=True)
class GpuMatmul:
    index: int
    name: str
    max_abs_err: float | None
    max_abs_ref: float | None
    error: str | None = None


@dataclass(frozen=True)
class TrainEnvProbe:
    python: str
    torch: str | None
    cuda: str | None
    nccl: str | None
    cuda_available: bool
    device_count: int
    gpus: tuple[GpuMatmul, ...]
    distributions: dict[str, str] = field(default_factory=dict)
    error: str | None = None


def parse_probe(text: str) -> TrainEnvProbe:
    """The probe's stdout → TrainEnvProbe; ParseError on anything else (empty, truncated,
    another schema), quoting the bad input."""
    body = text.strip()
    if not body:
        raise ParseError("train-env probe printed nothing")
    try:
        data = json.loads(body.splitlines()[-1])
    except json.JSONDecodeError:
        raise ParseError(f"train-env probe output is not JSON: {quote(body)}") from None
    if not isinstance(data, dict) or data.get("probe") != PROBE_SCHEMA:
        raise ParseError(f"not a {PROBE_SCHEMA} probe result: {quote(body)}")
    if data.get("version") != PROBE_VERSION:
        raise ParseError(f"{PROBE_SCHEMA} version {data.get('version')!r}, this gpuctl reads {PROBE_VERSION}")
    try:
        gpus = tuple(GpuMatmul(index=int(g["index"]), name=str(g.get("name", "")),
                               max_abs_err=None if g.get("max_abs_err") is None else float(g["max_abs_err"]),
                               max_abs_ref=None if g.get("max_abs_ref") is None else float(g["max_abs_ref"]),
                               error=g.get("error")) for g in data.get("gpus") or [])
        return TrainEnvProbe(
            python=str(data.get("python", "")), torch=data.get("torch"), cuda=data.get("cuda"),
            nccl=data.get("nccl"), cuda_available=bool(data.get("cuda_available")),
            device_count=int(data.get("device_count") or 0), gpus=gpus,
            distributions={canonical(k): str(v) for k, v in (data.get("distributions") or {}).items()},
            error=data.get("error"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ParseError(f"{PROBE_SCHEMA} result has a malformed field ({exc}): {quote(body)}") from None
