#!/usr/bin/env python3
"""gpuctl's small distributed training run (shipped to the nodes and run there).

A tiny causal transformer learns a *learnable* synthetic task — Fibonacci sequences
modulo V (x[t] = (x[t-1] + x[t-2]) mod V, a fresh random start pair per sequence and a
fresh batch every step, different on every rank) — with PyTorch DDP, one process per
GPU (NCCL, bf16 autocast), or on CPU with gloo when no GPU is there. The loss falls from
ln(V) towards 0 only if the model really learns the rule, so a fall proves learning, not
memorisation of one batch.

That model is far too small to load a GPU (2.6 M training FLOPs per token: 0.00076 MFU on
a real H200), so on CUDA a second, timed phase measures throughput with a GPT-small-sized
model (12 layers, d_model 768, sequence 1024, 16 sequences per rank: the shape facts.md
measured at 32 % MFU on an H200) on random tokens; --mfu-phase on|off forces it either way.

Output: JSON lines per gpuctl/parsers/training.py — one `{"step", "loss", "tokens_per_s"}`
per learning step (loss averaged over ranks), then one `{"final": true, ...}` record with
every rank's parameter checksum (sha256 of its parameters, gathered at the end), the model
FLOPs per token (6·N + 12·layers·d_model·seq, N = non-embedding parameters) and the global
tokens/s — of the throughput phase when it ran (its shape in `mfu_model`), else of the
learning run — and, when --peak-tflops is given on CUDA, the MFU. Without PyTorch it prints
`{"skipped": "no PyTorch"}` and exits 0. Standard library + torch only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import time
from datetime import timedelta


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the tokens/s figure")
    p.add_argument("--nproc", type=int, default=0, help="ranks (default: every GPU, or 2 on CPU)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=32, help="sequences per rank per step")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--peak-tflops", type=float, default=0.0, help="dense BF16 TFLOPS per GPU, for MFU")
    p.add_argument("--mfu-phase", choices=["auto", "on", "off"], default="auto",
                   help="the timed throughput phase (auto: on CUDA only)")
    p.add_argument("--mfu-d-model", type=int, default=768)
    p.add_argument("--mfu-layers", type=int, default=12)
    p.add_argument("--mfu-heads", type=int, default=12)
    p.add_argument("--mfu-seq", type=int, default=1024)
    p.add_argument("--mfu-batch", type=int, default=16, help="sequences per rank per step")
    p.add_argument("--mfu-steps", type=int, default=30, help="timed steps, after --mfu-warmup")
    p.add_argument("--mfu-warmup", type=int, default=5)
    return p.parse_args(argv)


def mfu_shape(args: argparse.Namespace) -> argparse.Namespace:
    """The throughput phase's model: the learning run's settings with the --mfu-* shape."""
    return argparse.Namespace(**{**vars(args), "d_model": args.mfu_d_model, "layers": args.mfu_layers,
                                 "heads": args.mfu_heads, "seq": args.mfu_seq, "batch": args.mfu_batch})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batch(torch, gen, n: int, seq: int, vocab: int, device):
    """Fibonacci sequences mod `vocab`, each from a random start pair."""
    start = torch.randint(0, vocab, (n, 2), generator=gen)
    cols = [start[:, 0], start[:, 1]]
    for _ in range(seq - 1):
        cols.append((cols[-1] + cols[-2]) % vocab)
    x = torch.stack(cols, dim=1)
    return x[:, :-1].to(device), x[:, 1:].to(device)


def build_model(torch, args):
    nn = torch.nn

    class TinyGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(args.vocab, args.d_model)
            self.pos = nn.Embedding(args.seq, args.d_model)
            layer = nn.TransformerEncoderLayer(args.d_model, args.heads, 4 * args.d_model, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(args.d_model)
            self.head = nn.Linear(args.d_model, args.vocab)

        def forward(self, x):
            t = x.shape[1]
            h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
            mask = torch.nn.Transformer.generate_square_subsequent_mask(t, device=x.device)
            h = self.blocks(h, mask=mask, is_causal=True)
            return self.head(self.norm(h))

    return TinyGPT()


def flops_per_token(model, args) -> float:
    """6·N (forward + backward matmuls) + 12·layers·d_model·seq (attention scores)."""
    embed = model.tok.weight.numel() + model.pos.weight.numel()
    n = sum(p.numel() for p in model.parameters()) - embed
    return 6.0 * n + 12.0 * args.layers * args.d_model * args.seq


def checksum(torch, model) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def train_steps(torch, dist, model, args, steps: int, warmup: int, device, world: int, gen,
                data, on_step=None) -> tuple[int, float]:
    """`steps` optimiser steps of DDP `model` on batches from `data(gen)`; returns the tokens
    and seconds of the steps after `warmup`. `on_step(step, mean loss, tokens/s)` is called
    as each step ends (the output shows how far a run that hangs got)."""
    use_cuda = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    loss_fn = torch.nn.CrossEntropyLoss()
    tokens_per_step = world * args.batch * args.seq
    timed_tokens, timed_s = 0, 0.0
    for step in range(steps):
        x, y = data(gen)
        t0 = time.perf_counter()
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_cuda):
            logits = model(x)
            # positions 0 and 1 cannot be predicted (random start); the rest follow the rule
            loss = loss_fn(logits[:, 1:].float().reshape(-1, args.vocab), y[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if use_cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if step >= warmup:
            timed_tokens += tokens_per_step
            timed_s += dt
        loss_mean = mean.item() / world
        if on_step is not None:
            on_step(step, loss_mean, tokens_per_step / dt if dt > 0 else None)
    return timed_tokens, timed_s


def time_steps(torch, dist, model, args, device, world: int, gen, data) -> tuple[int, float]:
    """The throughput phase: --mfu-warmup steps, then --mfu-steps timed as one window (batches
    made beforehand; no per-step loss read-back or synchronisation inside the window, which
    cost ~10 % on an H200 and made the figure vary from run to run)."""
    use_cuda = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y) -> None:
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_cuda):
            logits = model(x)
            loss = loss_fn(logits.float().reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def barrier() -> None:
        dist.barrier(device_ids=[device.index]) if use_cuda else dist.barrier()

    for _ in range(args.mfu_warmup):
        step(*data(gen))
    batches = [data(gen) for _ in range(args.mfu_steps)]
    if use_cuda:
        torch.cuda.synchronize()
    barrier()
    t0 = time.perf_counter()
    for x, y in batches:
        step(x, y)
    if use_cuda:
        torch.cuda.synchronize()
    barrier()
    return world * args.batch * args.seq * args.mfu_steps, time.perf_counter() - t0


def worker(rank: int, world: int, args: argparse.Namespace, port: int, use_cuda: bool, mfu_phase: bool) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}" if use_cuda else "cpu")
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=120))
    if not use_cuda:
        torch.set_num_threads(1)
    ids = [rank] if use_cuda else None

    # 1. the learning run: the loss must fall and the replicas must stay identical
    torch.manual_seed(args.seed)  # identical initial weights on every rank (DDP also broadcasts)
    model = build_model(torch, args).to(device)
    fpt = flops_per_token(model, args)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)  # different data on every rank
    def show(step: int, loss: float, tps: float | None) -> None:
        if rank == 0:
            emit({"step": step, "loss": round(loss, 6), "tokens_per_s": round(tps, 1) if tps else None})

    tokens, seconds = train_steps(torch, dist, ddp, args, args.steps, args.warmup, device, world, gen,
                                  lambda g: batch(torch, g, args.batch, args.seq, args.vocab, device), show)
    sums = [None] * world
    dist.all_gather_object(sums, checksum(torch, model))
    del ddp, model

    # 2. the throughput phase: a model big enough to load the GPU, timed after its warm-up
    shape = None
    if mfu_phase:
        big = mfu_shape(args)
        torch.manual_seed(args.seed)
        model = build_model(torch, big).to(device)
        fpt = flops_per_token(model, big)
        n = int(sum(p.numel() for p in model.parameters())
                - model.tok.weight.numel() - model.pos.weight.numel())
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        gen = torch.Generator().manual_seed(args.seed * 2000 + rank)

        def random_tokens(g):
            x = torch.randint(0, big.vocab, (big.batch, big.seq + 1), generator=g)
            return x[:, :-1].to(device), x[:, 1:].to(device)

        tokens, seconds = time_steps(torch, dist, ddp, big, device, world, gen, random_tokens)
        shape = {"d_model": big.d_model, "layers": big.layers, "heads": big.heads, "seq": big.seq,
                 "batch_per_rank": big.batch, "params_non_embedding": n, "timed_steps": big.mfu_steps}
        del ddp, model
    if rank == 0:
        tps = tokens / seconds if seconds > 0 else 0.0
        final = {"final": True, "param_checksum_per_rank": sums, "model_flops_per_token": fpt,
                 "tokens_per_s": round(tps, 1), "world_size": world, "dtype": "bf16" if use_cuda else "fp32",
                 "device": torch.cuda.get_device_name(0) if use_cuda else "cpu",
                 "torch_version": torch.__version__}
        if shape is not None:
            final["mfu_model"] = shape
        if args.peak_tflops > 0 and use_cuda:
            final["mfu"] = round(fpt * tps / (world * args.peak_tflops * 1e12), 6)
        emit(final)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        emit({"skipped": "no PyTorch"})
        return 0
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        emit({"skipped": "no CUDA device visible to PyTorch"})
        return 0
    available = torch.cuda.device_count() if use_cuda else 2
    world = min(args.nproc, available) if args.nproc > 0 else available
    if not use_cuda:
        world = min(world, 2)  # CPU/gloo run: a test of the mechanics, not of a GPU
    if world < 1:
        emit({"skipped": "no ranks to run"})
        return 0
    mfu_phase = args.mfu_phase == "on" or (args.mfu_phase == "auto" and use_cuda)
    mp.spawn(worker, args=(world, args, free_port(), use_cuda, mfu_phase), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
