# torch's side of bench/ops.ts: reads the cases (one JSON line), says "ready", then for each
# line "<case> <threads> <reps>" runs that case reps times on CPU with that many threads
# (torch.set_num_threads) and prints the seconds per call, wall and CPU (this process's). The first run of a case at a
# thread count is preceded by one untimed call (allocation and dispatch warm-up, as ours).
import ctypes
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

g = torch.Generator().manual_seed(0)


def blas_threads():
    """Debian's torch calls the pthread OpenBLAS, whose own pool torch.set_num_threads leaves
    alone (it starts with OMP_NUM_THREADS, else a thread per core): its setter, found in the
    process's mapped libraries, so a thread count holds for torch's matmuls as for ours."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "openblas" in line and ".so" in line.split()[-1]}
    setters = [getattr(ctypes.CDLL(p), "openblas_set_num_threads", None) for p in sorted(paths)]
    return [s for s in setters if s is not None]


set_blas_threads = blas_threads()


def make(spec):
    if isinstance(spec, dict):
        if spec["t"] == "i64":
            return torch.randint(0, spec["high"], spec["shape"], generator=g)
        if spec.get("transposed"):
            shape = spec["shape"]
            return torch.randn(shape[:-2] + [shape[-1], shape[-2]], generator=g).transpose(-1, -2)
        return torch.randn(spec["shape"], generator=g)
    if isinstance(spec, list) and spec and isinstance(spec[0], dict):
        return [make(s) for s in spec]
    return spec


def sdpa(q, k, v, is_causal=False):
    """torch 1.13 has no scaled_dot_product_attention: torch 2's math form."""
    w = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        w = w.masked_fill(~torch.ones(w.shape[-2], w.shape[-1], dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(w, -1) @ v


def rms_norm(x, normalized_shape, weight):
    """torch 1.13 has no rms_norm: torch 2.4's definition."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + torch.finfo(x.dtype).eps) * weight


OPS = {"softmax": F.softmax, "log_softmax": F.log_softmax, "linear": F.linear, "layer_norm": F.layer_norm,
       "embedding": F.embedding, "cross_entropy": F.cross_entropy, "gelu": F.gelu,
       "amax": lambda x, dim: torch.amax(x, dim), "sum": lambda x, dim: torch.sum(x, dim),
       "mean": lambda x, dim: torch.mean(x, dim), "expand": lambda x, size: x.expand(size), "slice": lambda x, d, start, end, step: x[(slice(None),) * d + (slice(start, end, step),)],
       "scaled_dot_product_attention": sdpa, "rms_norm": rms_norm, "nll_loss": F.nll_loss, "mse_loss": F.mse_loss,
       "_matmul_t": lambda a, b, ta, tb: (a.t() if ta else a) @ (b.t() if tb else b),
       "repeat": lambda x, repeats: x.repeat(repeats)}
cases = json.loads(sys.stdin.readline())
inputs = [[make(a) for a in case["args"]] for case in cases]
warm = set()
print("ready", flush=True)
for line in sys.stdin:
    i, threads, reps = (int(x) for x in line.split())
    case, args = cases[i], inputs[i]
    torch.set_num_threads(threads)
    for setter in set_blas_threads:
        setter(threads)
    fn = OPS.get(case["op"]) or getattr(torch, case["op"])
    if (i, threads) not in warm:
        fn(*args, **case["kwargs"])
        warm.add((i, threads))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(reps):
        fn(*args, **case["kwargs"])
    print((time.perf_counter() - t0) / reps, (time.process_time() - c0) / reps, flush=True)
