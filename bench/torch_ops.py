# torch's side of bench/ops.ts: times each case (JSON on stdin) on CPU with one thread and
# prints one JSON line of medians (seconds per call), in case order.
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
cases = json.load(sys.stdin)
g = torch.Generator().manual_seed(0)


def make(spec):
    if isinstance(spec, dict):
        if spec["t"] == "i64":
            return torch.randint(0, spec["high"], spec["shape"], generator=g)
        return torch.randn(spec["shape"], generator=g)
    if isinstance(spec, list) and spec and isinstance(spec[0], dict):
        return [make(s) for s in spec]
    return spec


OPS = {"softmax": F.softmax, "log_softmax": F.log_softmax, "linear": F.linear, "layer_norm": F.layer_norm,
       "embedding": F.embedding, "cross_entropy": F.cross_entropy,
       "amax": lambda x, dim: torch.amax(x, dim), "sum": lambda x, dim: torch.sum(x, dim),
       "mean": lambda x, dim: torch.mean(x, dim), "transpose": lambda x, a, b: x.transpose(a, b).contiguous()}
out = []
for case in cases:
    args = [make(a) for a in case["args"]]
    fn = OPS.get(case["op"]) or getattr(torch, case["op"])
    times = []
    for _ in range(case["rounds"]):
        t0 = time.perf_counter()
        for _ in range(case["reps"]):
            fn(*args, **case["kwargs"])
        times.append((time.perf_counter() - t0) / case["reps"])
    out.append(statistics.median(times))
print(json.dumps(out))
