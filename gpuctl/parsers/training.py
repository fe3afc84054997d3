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

or, when the run could not start, a single ``{"skipped": "no PyTorch"}`` line.

MFU = model_flops_per_token × tokens_per_s / (world_size × dense peak FLOP/s per GPU);
the peak comes from the SKU, so it is computed in `gpuctl.verdicts`, not here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuctl.errors import ParseError
from gpuctl.parsers._common import quote, require_text

TOOL = "training run"


@dataclass(frozen=True)
class TrainingStep:
    step: int
    loss: float
    tokens_per_s: float | None


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

    @property
    def ranks_agree(self) -> bool:
        return len(set(self.param_checksum_per_rank)) == 1

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
