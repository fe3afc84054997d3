"""gpuctl train_env probe: run with the training environment's own python; prints one JSON
object (schema "gpuctl-train-env" v1, read by gpuctl/parsers/train_env.py).

What it reports: the Python, torch.__version__, torch.version.cuda, the NCCL torch loads
(torch.cuda.nccl.version()), torch.cuda.device_count(), and per GPU the largest absolute
difference between a 256x256 float32 matmul on that GPU and the same product on the CPU
(the checks judge it), plus every installed distribution. It judges nothing itself.
"""

import importlib.metadata
import json
import platform

N = 256
out = {"probe": "gpuctl-train-env", "version": 1, "python": platform.python_version(), "torch": None,
       "cuda": None, "nccl": None, "nccl_error": None, "cuda_available": False, "device_count": 0,
       "gpus": [], "distributions": {}, "error": None}
out["distributions"] = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions()}
try:
    import torch
except Exception as exc:  # the environment is broken: say why, as data
    out["error"] = f"{type(exc).__name__}: {exc}"
else:
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    try:
        v = torch.cuda.nccl.version()
        # a tuple (2, 27, 3) in torch >= 1.13; an int 22703 (major*10000+minor*100+patch) before
        out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else \
            f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    except Exception as exc:  # CPU builds have no NCCL
        out["nccl_error"] = f"{type(exc).__name__}: {exc}"
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(N, N, generator=gen, dtype=torch.float32)
    b = torch.randn(N, N, generator=gen, dtype=torch.float32)
    ref = a @ b
    torch.backends.cuda.matmul.allow_tf32 = False  # compare float32 with float32
    for i in range(out["device_count"]):
        gpu = {"index": i, "name": "", "max_abs_err": None, "max_abs_ref": float(ref.abs().max()), "error": None}
        try:
            gpu["name"] = torch.cuda.get_device_name(i)
            dev = torch.device("cuda", i)
            got = (a.to(dev) @ b.to(dev)).cpu()
            gpu["max_abs_err"] = float((got - ref).abs().max())
        except Exception as exc:
            gpu["error"] = f"{type(exc).__name__}: {exc}"
        out["gpus"].append(gpu)
print(json.dumps(out))
