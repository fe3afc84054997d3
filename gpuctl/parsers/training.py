"""The JSON-lines output of gpuctl's small distributed (DDP) training run.

Schema (one JSON object per line; other lines, e.g. framework warnings, are ignored
unless they start with '{')::

    {"step": 0, "loss": 9.18, "tokens_per_s": 391000.0}          # one per step; tokens_per_s optional
    ...
    {"final": true,
     "param_checksum_per_rank": ["9f2c...", "9f2c..."],   # one per rank, strings or numbers,
                                                          # equal when the ranks agree
     "model_flops_per_token": 7.4e8,                      # training FLOPs per token (6·N + attention)
     "tokens_per_s": 392000.0,                            # global: all ranks together
     "world_size": 8,
     "dtype": "bf16",
     "mfu_model": {"d_model": 768, "layers": 12, ...}}    # optional: the timed model's shape

or, when the run could not start, a single ``{"skipped": "no PyTorch"}`` line. The final
record may also name each rank (``"ranks": [{"rank", "node", "host", "checksum"}]``), the
model shape (``"model": "gpt"|"llama"``), the ``"backend"`` (nccl, gloo) and the torch,
CUDA and NCCL versions that ran (``torch_version``, ``cuda_version``, ``nccl_version``).

For the multi-node run (one torchrun launcher per node) two more readers:
`parse_torch_probe` reads the one JSON line gpuctl's probe prints before the launch (the
python, torch, CUDA and NCCL a node would run), and `parse_launcher_log` reads what one
launcher said when it failed: torchrun's rendezvous error, its "Root Cause" table of
failed ranks (rank, local rank, exit code or signal, host), each rank's last exception
line (``[rank1]: RuntimeError: ...``) and the NCCL warnings and errors
(`gpuctl.parsers.nccl.nccl_problems`).

MFU = model_flops_per_token × tokens_per_s / (world_size × dense peak FLOP/s per GPU);
the peak comes from the SKU, so it is computed in `gpuctl.verdicts`, not here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text, strip_ansi
from gpuctl.parsers.nccl import nccl_problems

TOOL = "training run"


@dataclass(frozen=True)
class TrainingStep:
    step: int
    loss: float
    tokens_per_s: float | None


@dataclass(frozen=True)
class RankRecord:
    """One rank at the end of the run: where it ran and its parameter checksum."""

    rank: int
    node: str
    host: str
    checksum: str


@dataclass(frozen=True)
class TrainingFinal:
    param_checksum_per_rank: tuple[str, ...]
    model_flops_per_token: float
    tokens_per_s: float
    world_size: int
    dtype: str
    # the shape of the model the throughput figures come from, when the run names it
    # (gpuctl's throughput phase: d_model, layers, seq, batch_per_rank, ...)
    mfu_model: tuple[tuple[str, Any], ...] = ()
    ranks: tuple[RankRecord, ...] = ()
    model: str = ""  # "gpt" or "llama" ("" from a program that did not say)
    backend: str = ""  # "nccl" or "gloo"
    device: str = ""
    torch_version: str = ""
    cuda_version: str | None = None
    nccl_version: str | None = None

    @property
    def tokens_per_s_per_rank(self) -> float:
        return self.tokens_per_s / self.world_size

    @property
    def on_cpu(self) -> bool:
        """A gloo/CPU run: a test of the mechanics, its speed says nothing about a GPU fabric."""
        return self.backend == "gloo" or self.device == "cpu" or (not self.backend and self.dtype == "fp32")

    @property
    def ranks_agree(self) -> bool:
        return len(set(self.param_checksum_per_rank)) == 1

    @property
    def majority_checksum(self) -> str:
        """The checksum most ranks hold, on a tie the lowest rank's; a rank with another one
        differs (the verdict and the report mark the same ranks, the same on every run)."""
        sums = self.param_checksum_per_rank
        return max(sums, key=lambda c: (sums.count(c), -sums.index(c)))

    @property
    def achieved_tflops(self) -> float:
        """Model TFLOP/s of the whole job (all ranks)."""
        return self.model_flops_per_token * self.tokens_per_s / 1e12


@dataclass(frozen=True)
class TrainingResult:
    steps: tuple[TrainingStep, ...]
    final: TrainingFinal | None
    skipped: str | None

    def loss_start(self, window: int = 3) -> float:
        """Mean loss of the first `window` steps."""
        head = self.steps[:window]
        return sum(s.loss for s in head) / len(head)

    def loss_end(self, window: int = 3) -> float:
        """Mean loss of the last `window` steps."""
        tail = self.steps[-window:]
        return sum(s.loss for s in tail) / len(tail)


def _number(obj: dict[str, Any], key: str, line: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParseError(f"{TOOL}: '{key}' must be a number in {quote(line)}")
    return float(value)


def parse_training_log(text: str) -> TrainingResult:
    """Parse the training run's JSON lines."""
    text = require_text(text, TOOL)
    steps: list[TrainingStep] = []
    final: TrainingFinal | None = None
    for line in text.splitlines():
        if not line.lstrip().startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise ParseError(f"{TOOL}: not a JSON object: {quote(line)} (truncated?)") from None
        if not isinstance(obj, dict):
            raise ParseError(f"{TOOL}: not a JSON object: {quote(line)}")
        if "skipped" in obj:
            return TrainingResult(tuple(steps), None, str(obj["skipped"]))
        if obj.get("final"):
            checks = obj.get("param_checksum_per_rank")
            if not isinstance(checks, list) or not checks:
                raise ParseError(f"{TOOL}: 'param_checksum_per_rank' must be a non-empty list in {quote(line)}")
            world = obj.get("world_size")
            if not isinstance(world, int) or isinstance(world, bool) or world < 1:
                raise ParseError(f"{TOOL}: 'world_size' must be a positive integer in {quote(line)}")
            final = TrainingFinal(
                param_checksum_per_rank=tuple(str(c) for c in checks),
                model_flops_per_token=_number(obj, "model_flops_per_token", line),
                tokens_per_s=_number(obj, "tokens_per_s", line),
                world_size=world,
                dtype=str(obj.get("dtype", "")),
                mfu_model=tuple(sorted(obj["mfu_model"].items())) if isinstance(obj.get("mfu_model"), dict) else (),
                ranks=_ranks(obj.get("ranks"), line),
                model=str(obj.get("model") or ""),
                backend=str(obj.get("backend") or ""),
                device=str(obj.get("device") or ""),
                torch_version=str(obj.get("torch_version") or ""),
                cuda_version=_opt_str(obj.get("cuda_version")),
                nccl_version=_opt_str(obj.get("nccl_version")),
            )
        elif "step" in obj:
            loss = _number(obj, "loss", line)  # NaN/inf allowed here: the verdict fails them
            tps = obj.get("tokens_per_s")
            steps.append(TrainingStep(int(_number(obj, "step", line)), loss,
                                      float(tps) if isinstance(tps, int | float) and not isinstance(tps, bool)
                                      else None))
        else:
            raise ParseError(f"{TOOL}: a line that is neither a step nor the final record: {quote(line)}")
    if not steps:
        raise ParseError(f"{TOOL}: no step records in the output")
    if final is None:
        raise ParseError(f"{TOOL}: no final record after step {steps[-1].step} (the run did not finish)")
    return TrainingResult(tuple(steps), final, None)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _ranks(value: Any, line: str) -> tuple[RankRecord, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        raise ParseError(f"{TOOL}: 'ranks' must be a list of objects in {quote(line)}")
    out = []
    for r in value:
        rank = r.get("rank")
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise ParseError(f"{TOOL}: a 'ranks' entry without an integer 'rank' in {quote(line)}")
        out.append(RankRecord(rank, str(r.get("node", "")), str(r.get("host", "")), str(r.get("checksum", ""))))
    return tuple(sorted(out, key=lambda r: r.rank))


# ---------------------------------------------------------------- multi-node: probe

PROBE_TOOL = "PyTorch probe"


@dataclass(frozen=True)
class TorchProbe:
    """What a node would run the training with (gpuctl's probe, one JSON line)."""

    python: str
    torch: str | None
    cuda: str | None  # torch.version.cuda: the CUDA runtime the build carries (None: CPU build)
    cuda_available: bool
    gpus: int
    nccl: str | None
    skipped: str | None = None


def parse_torch_probe(text: str) -> TorchProbe:
    """The probe's JSON line: ``{"python", "torch", "cuda", "cuda_available", "gpus", "nccl"}``
    or ``{"skipped": "no PyTorch", "python": ...}``."""
    text = require_text(text, PROBE_TOOL)
    lines = [line for line in text.splitlines() if line.lstrip().startswith("{")]
    if not lines:
        raise ParseError(f"{PROBE_TOOL}: no JSON line in the output: {quote(text.strip().splitlines()[-1])}")
    try:
        obj = json.loads(lines[-1])
    except ValueError:
        raise ParseError(f"{PROBE_TOOL}: not a JSON object: {quote(lines[-1])}") from None
    if not isinstance(obj, dict):
        raise ParseError(f"{PROBE_TOOL}: not a JSON object: {quote(lines[-1])}")
    python = str(obj.get("python") or "")
    if "skipped" in obj:
        return TorchProbe(python, None, None, False, 0, None, str(obj["skipped"]))
    gpus = obj.get("gpus")
    if not python or not isinstance(obj.get("torch"), str) or not isinstance(gpus, int) or isinstance(gpus, bool):
        raise ParseError(f"{PROBE_TOOL}: 'python', 'torch' and an integer 'gpus' are needed in {quote(lines[-1])}")
    return TorchProbe(python, obj["torch"], _opt_str(obj.get("cuda")), bool(obj.get("cuda_available")), gpus,
                      _opt_str(obj.get("nccl")))


# ---------------------------------------------------------------- multi-node: a launcher's log

# torchrun's failure table ("Root Cause (first observed failure):" / "Failures:"), one entry each:
#   [0]:
#     time      : 2026-12-05_16:55:52
#     host      : localhost
#     rank      : 0 (local_rank: 0)
#     exitcode  : -9 (pid: 1402)  (SIGKILL)
_ENTRY = re.compile(r"^\[(\d+)\]:\s*$")
_FIELD = re.compile(r"^\s+(time|host|rank|exitcode|error_file|traceback)\s*:\s*(.*?)\s*$")
_RANK_FIELD = re.compile(r"^(\d+)\s*\(local_rank:\s*(\d+)\)")
_EXIT_FIELD = re.compile(r"^(-?\d+)\s*\(pid:\s*\d+\)\s*(?:\((SIG\w+)\))?")
# "[rank1]: RuntimeError: [.../gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:3309: Connection reset by peer."
_RANK_ERROR = re.compile(r"^\[rank(\d+)\]:\s*((?:[\w.]+\.)?\w*(?:Error|Exception|Timeout)\b:?.*)$")
# "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"
# "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. ..."
# "torch.distributed.DistNetworkError: ... The server socket has failed to listen on any local network address."
_RDZV_ERROR = re.compile(r"^(?:[\w.]+\.)?(Rendezvous\w*Error|DistNetworkError|DistStoreError)\b:?\s*(.*)$")


@dataclass(frozen=True)
class RankFailure:
    """One failed rank in torchrun's failure table, with its last exception line."""

    rank: int
    local_rank: int
    exitcode: int
    signal: str | None  # "SIGKILL" when a signal ended it
    host: str
    error: str = ""

    def describe(self) -> str:
        how = f"killed by {self.signal}" if self.signal else f"exited with code {self.exitcode}"
        return f"rank {self.rank} (local rank {self.local_rank}) {how}" + (f": {self.error}" if self.error else "")


@dataclass(frozen=True)
class LauncherLog:
    """What one torchrun launcher's output says about a failure (empty when it says nothing)."""

    rendezvous_error: str | None
    failures: tuple[RankFailure, ...]
    nccl: tuple[str, ...]
    rank_errors: tuple[tuple[int, str], ...]  # (rank, its last exception line)

    def summary(self) -> str:
        """One line naming what went wrong, most specific first ("" when nothing)."""
        parts = []
        if self.rendezvous_error:
            parts.append(f"rendezvous failed: {self.rendezvous_error}")
        parts += [f.describe() for f in self.failures]
        named = {f.rank for f in self.failures}
        parts += [f"rank {r}: {e}" for r, e in self.rank_errors if r not in named]
        if self.nccl:
            parts.append("NCCL: " + "; ".join(self.nccl[:3]) + (f" (+{len(self.nccl) - 3} more)"
                                                                if len(self.nccl) > 3 else ""))
        return "; ".join(parts)


def _short(text: str, limit: int = 240) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_launcher_log(stdout: str, stderr: str) -> LauncherLog:
    """Read a torchrun launcher's output (any text; never raises: a launcher that said
    nothing gives an empty LauncherLog)."""
    lines = strip_ansi((stdout or "") + "\n" + (stderr or "")).splitlines()
    rendezvous: list[str] = []
    entries: list[dict[str, str]] = []
    errors: dict[int, str] = {}
    current: dict[str, str] | None = None
    for line in lines:
        if _ENTRY.match(line):
            current = {}
            entries.append(current)
            continue
        if current is not None and (m := _FIELD.match(line)):
            current[m.group(1)] = m.group(2)
            continue
        current = None
        if m := _RANK_ERROR.match(line.strip()):
            errors[int(m.group(1))] = _short(m.group(2))
        elif m := _RDZV_ERROR.match(line.strip()):
            rendezvous.append(_short(m.group(1) + (f": {m.group(2)}" if m.group(2) else "")))
    failures: dict[int, RankFailure] = {}
    for e in entries:
        r, x = _RANK_FIELD.match(e.get("rank", "")), _EXIT_FIELD.match(e.get("exitcode", ""))
        if r is None or x is None:
            continue
        rank = int(r.group(1))
        failures.setdefault(rank, RankFailure(rank, int(r.group(2)), int(x.group(1)), x.group(2),
                                              e.get("host", ""), errors.get(rank, "")))
    # the last error says what failed, the one before it (an inner socket error) often why
    named = list(dict.fromkeys(reversed(rendezvous)))[:2]
    return LauncherLog("; ".join(named) or None, tuple(sorted(failures.values(), key=lambda f: f.rank)),
                       nccl_problems("\n".join(lines)), tuple(sorted(errors.items())))
