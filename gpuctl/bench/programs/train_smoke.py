#!/usr/bin/env python3
"""gpuctl's small distributed training run (shipped to the nodes and run there).

A tiny causal transformer learns a *learnable* synthetic task — Fibonacci sequences
modulo V (x[t] = (x[t-1] + x[t-2]) mod V, a fresh random start pair per sequence and a
fresh batch every step, different on every rank) — with PyTorch DDP, one process per
GPU (NCCL, bf16 autocast), or on CPU with gloo when no GPU is there. The loss falls from
ln(V) towards 0 only if the model really learns the rule, so a fall proves learning, not
memorisation of one batch.

Two model shapes, built in code (--model): `gpt` (learned positions, LayerNorm, GELU MLP:
today's GPT-small shape) and `llama` (rotary position embeddings, RMSNorm, SwiGLU MLP, no
biases: a small Llama-shaped model). Two sizes of the learning run (--size, `SIZES`): `small`
(the default) and `tiny`, about 240x fewer FLOPs per step, for nodes whose CPU is slow or
emulated (QEMU without KVM), where `small` did not finish 40 steps in 600 s; an explicit
--d-model, --layers, ... overrides the size's figure.

Two ways to start: on its own it spawns one process per GPU (or 1-2 on CPU) on this
machine; started by `torchrun` (one launcher per node, c10d rendezvous: gpuctl's
multi-node run) every process is one rank of the whole job and reads RANK, LOCAL_RANK and
WORLD_SIZE from the launcher. --step-timeout-s bounds every collective: a rank that hangs
or dies makes the others fail within it instead of waiting forever.

That model is far too small to load a GPU (2.6 M training FLOPs per token: 0.00076 MFU on
a real H200), so on CUDA a second, timed phase measures throughput with a GPT-small-sized
model (12 layers, d_model 768, sequence 1024, 16 sequences per rank: the shape facts.md
measured at 32 % MFU on an H200) on random tokens; --mfu-phase on|off forces it either way.

Output: JSON lines per gpuctl/parsers/training.py — one `{"step", "loss", "tokens_per_s"}`
per learning step (loss averaged over ranks), then one `{"final": true, ...}` record with
every rank's parameter checksum (sha256 of its parameters, gathered at the end), the model
FLOPs per token (6·N + 12·layers·d_model·seq, N = non-embedding parameters) and the global
tokens/s — of the throughput phase when it ran (its shape in `mfu_model`), else of the
learning run — and, when --peak-tflops is given on CUDA, the MFU; `ranks` names each rank's
node (GPUCTL_NODE, set by gpuctl's launcher, else the host name), host and checksum.
Without PyTorch it prints `{"skipped": "no PyTorch"}` and exits 0. Standard library +
torch only (no numpy).

For gpuctl's own tests and lab faults only: GPUCTL_TRAIN_TEST_CORRUPT_RANK=<rank> (a global
rank) or GPUCTL_TRAIN_TEST_CORRUPT_LOCAL_RANK=<local rank> (in the environment of one node's
launcher: that node's rank) adds a small offset to that rank's parameters after DDP's
initial broadcast (what a GPU that corrupts its copy of the weights would do), so the ranks
end the run with different parameters and the ranks-agree check must fail.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import socket
import sys
import time
from datetime import timedelta


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


#: The learning run's shape per --size. `small`: 2.6 M training FLOPs per token (gpt), 2,048
#: tokens per rank and step. `tiny`: 0.086 M FLOPs per token (gpt; llama 0.11 M), 256 tokens per
#: rank and step: ~240x fewer FLOPs per step. With 16 symbols and a higher learning rate its loss
#: still falls well below the judge's 0.9 of its start: in 40 steps on torch 2.13.0+cpu, 1 rank,
#: seeds 1-3, to 0.70 of it (gpt; llama 0.61), 2 ranks 0.49 (gpt).
SIZES: dict[str, dict[str, float | int]] = {
    "small": {"vocab": 32, "seq": 64, "batch": 32, "d_model": 128, "layers": 2, "heads": 4, "lr": 3e-3},
    "tiny": {"vocab": 16, "seq": 16, "batch": 16, "d_model": 32, "layers": 1, "heads": 2, "lr": 1e-2},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the tokens/s figure")
    p.add_argument("--nproc", type=int, default=0, help="ranks on GPUs (default: every GPU)")
    p.add_argument("--cpu-nproc", type=int, default=2, help="ranks when there is no GPU (gloo)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--size", choices=sorted(SIZES), default="small",
                   help="the learning run's shape (SIZES); the options below override its figures")
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--batch", type=int, default=None, help="sequences per rank per step")
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
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
    p.add_argument("--model", choices=["gpt", "llama"], default="gpt",
                   help="gpt: learned positions, LayerNorm, GELU; llama: RoPE, RMSNorm, SwiGLU")
    p.add_argument("--step-timeout-s", type=int, default=120,
                   help="the process group's timeout: a collective that waits longer fails")
    args = p.parse_args(argv)
    for key, value in SIZES[args.size].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


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
    """The `--model` shape: `gpt` or `llama`."""
    return build_llama(torch, args) if args.model == "llama" else build_gpt(torch, args)


def build_gpt(torch, args):
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

        def embedding_params(self) -> int:
            return self.tok.weight.numel() + self.pos.weight.numel()

        def forward(self, x):
            t = x.shape[1]
            h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
            mask = torch.nn.Transformer.generate_square_subsequent_mask(t, device=x.device)
            h = self.blocks(h, mask=mask, is_causal=True)
            return self.head(self.norm(h))

    return TinyGPT()


def swiglu_hidden(d_model: int) -> int:
    """Llama's MLP width: 2/3 of 4·d_model, rounded up to a multiple of 64."""
    return -(-(8 * d_model // 3) // 64) * 64


def build_llama(torch, args):
    """A small Llama-shaped decoder: RMSNorm before attention and MLP, rotary position
    embeddings on queries and keys, a SwiGLU MLP, no biases, an untied output layer."""
    nn, F = torch.nn, torch.nn.functional
    head_dim = args.d_model // args.heads

    class RMSNorm(nn.Module):
        def __init__(self, d: int, eps: float = 1e-6) -> None:
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight

    def rope_tables(seq: int):
        inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv)  # (seq, head_dim/2)
        return torch.cos(angles), torch.sin(angles)

    def rotate(x, cos, sin):
        """Rotary embedding: each (even, odd) pair of a head's channels turned by its angle."""
        x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
        return out.type_as(x)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d, hidden = args.d_model, swiglu_hidden(args.d_model)
            self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
            self.wq, self.wk = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            self.wv, self.wo = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.w2 = nn.Linear(hidden, d, bias=False)

        def forward(self, h, cos, sin):
            b, t, d = h.shape
            x = self.attn_norm(h)
            q, k, v = (w(x).view(b, t, args.heads, head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + self.wo(a.transpose(1, 2).reshape(b, t, d))
            x = self.mlp_norm(h)
            return h + self.w2(F.silu(self.w1(x)) * self.w3(x))

    class TinyLlama(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(args.vocab, args.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.norm = RMSNorm(args.d_model)
            self.head = nn.Linear(args.d_model, args.vocab, bias=False)
            cos, sin = rope_tables(args.seq)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)

        def embedding_params(self) -> int:
            return self.tok.weight.numel()

        def forward(self, x):
            t = x.shape[1]
            h = self.tok(x)
            cos, sin = self.cos[:t], self.sin[:t]
            for block in self.blocks:
                h = block(h, cos, sin)
            return self.head(self.norm(h))

    return TinyLlama()


def flops_per_token(model, args) -> float:
    """6·N (forward + backward matmuls) + 12·layers·d_model·seq (attention scores)."""
    n = sum(p.numel() for p in model.parameters()) - model.embedding_params()
    return 6.0 * n + 12.0 * args.layers * args.d_model * args.seq


def checksum(torch, model) -> str:
    """sha256 of every parameter's fp32 bytes, in order (read through ctypes: no numpy)."""
    h = hashlib.sha256()
    for p in model.parameters():
        t = p.detach().float().cpu().contiguous()
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return h.hexdigest()[:16]


RECORD_BYTES = 512


def gather_records(torch, dist, record: dict, world: int, device) -> list[dict]:
    """Every rank's small JSON record, in rank order, through a plain tensor all_gather
    (all_gather_object needs numpy, which a bare torch install lacks)."""
    data = json.dumps(record).encode()[:RECORD_BYTES]
    mine = torch.zeros(RECORD_BYTES, dtype=torch.uint8)
    mine[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    mine = mine.to(device)
    out = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(out, mine)
    return [json.loads(bytes(t.cpu().tolist()).rstrip(b"\0").decode()) for t in out]


def corrupt_for_test(torch, model, rank: int, local_rank: int) -> None:
    """GPUCTL_TRAIN_TEST_CORRUPT_RANK / _LOCAL_RANK (tests and lab faults only): offset this
    rank's weights."""
    wanted = os.environ.get("GPUCTL_TRAIN_TEST_CORRUPT_RANK", "").strip()
    wanted_local = os.environ.get("GPUCTL_TRAIN_TEST_CORRUPT_LOCAL_RANK", "").strip()
    if wanted == str(rank) or wanted_local == str(local_rank):
        with torch.no_grad():
            next(model.parameters()).add_(1e-3)


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


def worker(rank: int, world: int, args: argparse.Namespace, port: int | None, use_cuda: bool, mfu_phase: bool,
           local_rank: int | None = None) -> None:
    """One rank. `port` is this machine's rendezvous port (the mp.spawn mode) or None when
    torchrun set MASTER_ADDR/MASTER_PORT; `local_rank` is the GPU index on this node."""
    import torch
    import torch.distributed as dist

    if port is not None:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    local = rank if local_rank is None else local_rank
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(local)
    device = torch.device(f"cuda:{local}" if use_cuda else "cpu")
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=args.step_timeout_s))
    if not use_cuda:
        torch.set_num_threads(1)
    ids = [local] if use_cuda else None
    node = os.environ.get("GPUCTL_NODE") or socket.gethostname()

    # 1. the learning run: the loss must fall and the replicas must stay identical
    torch.manual_seed(args.seed)  # identical initial weights on every rank (DDP also broadcasts)
    model = build_model(torch, args).to(device)
    fpt = flops_per_token(model, args)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    corrupt_for_test(torch, model, rank, local)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)  # different data on every rank
    def show(step: int, loss: float, tps: float | None) -> None:
        if rank == 0:
            emit({"step": step, "loss": round(loss, 6), "tokens_per_s": round(tps, 1) if tps else None})

    tokens, seconds = train_steps(torch, dist, ddp, args, args.steps, args.warmup, device, world, gen,
                                  lambda g: batch(torch, g, args.batch, args.seq, args.vocab, device), show)
    ranks = gather_records(torch, dist, {"rank": rank, "node": node, "host": socket.gethostname(),
                                         "checksum": checksum(torch, model)}, world, device)
    sums = [r["checksum"] for r in ranks]
    del ddp, model

    # 2. the throughput phase: a model big enough to load the GPU, timed after its warm-up
    shape = None
    if mfu_phase:
        big = mfu_shape(args)
        torch.manual_seed(args.seed)
        model = build_model(torch, big).to(device)
        fpt = flops_per_token(model, big)
        n = int(sum(p.numel() for p in model.parameters()) - model.embedding_params())
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        gen = torch.Generator().manual_seed(args.seed * 2000 + rank)

        def random_tokens(g):
            x = torch.randint(0, big.vocab, (big.batch, big.seq + 1), generator=g)
            return x[:, :-1].to(device), x[:, 1:].to(device)

        tokens, seconds = time_steps(torch, dist, ddp, big, device, world, gen, random_tokens)
        shape = {"model": big.model, "d_model": big.d_model, "layers": big.layers, "heads": big.heads, "seq": big.seq,
                 "batch_per_rank": big.batch, "params_non_embedding": n, "timed_steps": big.mfu_steps}
        del ddp, model
    if rank == 0:
        tps = tokens / seconds if seconds > 0 else 0.0
        final = {"final": True, "param_checksum_per_rank": sums, "model_flops_per_token": fpt,
                 "tokens_per_s": round(tps, 1), "world_size": world, "dtype": "bf16" if use_cuda else "fp32",
                 "device": torch.cuda.get_device_name(0) if use_cuda else "cpu",
                 "torch_version": torch.__version__, "model": args.model, "size": args.size, "backend": backend,
                 "ranks": ranks, "cuda_version": torch.version.cuda,
                 "nccl_version": nccl_version(torch) if use_cuda else None}
        if shape is not None:
            final["mfu_model"] = shape
        if args.peak_tflops > 0 and use_cuda:
            final["mfu"] = round(fpt * tps / (world * args.peak_tflops * 1e12), 6)
        emit(final)
    # every rank leaves together: a rank tearing gloo down while a peer is still in its last
    # collective aborted the peer ("terminate called without an active exception", SIGABRT,
    # seen once in 4 two-launcher runs here) and left the other waiting
    dist.barrier(device_ids=[local]) if use_cuda else dist.barrier()
    dist.destroy_process_group()


def nccl_version(torch) -> str | None:
    """The NCCL this torch build runs (its bundled library), e.g. '2.27.3'."""
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # a build without NCCL
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def under_torchrun() -> bool:
    """Started by torchrun (torch.distributed.run): it sets these for every worker."""
    return all(k in os.environ for k in ("TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE"))


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
    if use_cuda:
        available = torch.cuda.device_count()
        world = min(args.nproc, available) if args.nproc > 0 else available
    else:
        world = args.cpu_nproc  # CPU/gloo run: a test of the mechanics, not of a GPU
    if world < 1:
        emit({"skipped": "no ranks to run"})
        return 0
    mfu_phase = args.mfu_phase == "on" or (args.mfu_phase == "auto" and use_cuda)
    if under_torchrun():
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, None, use_cuda, mfu_phase,
               int(os.environ["LOCAL_RANK"]))
        return 0
    if world == 1:  # one rank: run it here (a spawned process would import torch a second time)
        worker(0, 1, args, free_port(), use_cuda, mfu_phase)
        return 0
    mp.spawn(worker, args=(world, args, free_port(), use_cuda, mfu_phase), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
