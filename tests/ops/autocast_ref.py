# The torch reference for tests/ops/autocast.test.ts: torch 1.13's CPU autocast to bf16. One JSON
# case per line on stdin ({"id", "op", "args", "weights"}; tensors as {"t": dtype, "shape",
# "data"}; "wrt": the indices of the arguments that get a gradient); the op runs under torch.autocast("cpu", dtype=torch.bfloat16) and the answer is its
# result ({"dtype", "shape", "data"}) and the gradients of sum(result.float() * weights) with
# respect to the arguments `wrt` names ({"grads": [...]}, in that order), or {"error"}.
import json
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16, "i64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}


def decode(v):
    if isinstance(v, dict) and "t" in v:
        return torch.tensor(v["data"], dtype=torch.float64).to(DTYPES[v["t"]]).reshape(v["shape"])
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v


OPS = {
    "linear": F.linear, "matmul": torch.matmul, "mm": torch.mm, "bmm": torch.bmm, "baddbmm": torch.baddbmm,
    "conv1d": F.conv1d, "conv2d": F.conv2d, "cross_entropy": F.cross_entropy, "mse_loss": F.mse_loss, "prod": torch.prod,
    "softmax": lambda x: torch.softmax(x, -1), "sum": torch.sum, "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    # chains: a low op's result into one that runs in what it is given, or into an f32 one
    "linear_softmax": lambda x, w, b: torch.softmax(F.linear(x, w, b), -1),
    "linear_cross_entropy": lambda x, w, b, y: F.cross_entropy(F.linear(x, w, b), y),
    "linear_add": lambda x, w, r: F.linear(x, w) + r,
    "conv2d_batch_norm": lambda x, w, rm, rv, g, b: F.relu(F.batch_norm(F.conv2d(x, w, None, 1, 1), rm, rv, g, b, True)),
}



def rounded_once(fn):
    """torch 1.13's bf16 matmul, mm, bmm and baddbmm on CPU round to bf16 within the sum (a few
    bf16 steps from the exact product of their bf16 operands, where its linear and convolutions,
    through oneDNN, round once); autocast's low ops accumulate in f32 and round once (as ours):
    their reference is the f32 product of the bf16-rounded operands, rounded once, with the
    dtype torch's autocast gives."""
    def run(*args):
        low = [a.bfloat16().float() for a in args]
        return fn(*low).bfloat16()
    return run


ROUNDED_ONCE = {"matmul": rounded_once(torch.matmul), "mm": rounded_once(torch.mm), "bmm": rounded_once(torch.bmm), "baddbmm": rounded_once(torch.baddbmm)}

for line in sys.stdin:
    case = json.loads(line)
    try:
        args = decode(case["args"])
        leaves = [args[i].requires_grad_() for i in case["wrt"]]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = OPS[case["op"]](*args)
        if case["op"] in ROUNDED_ONCE:
            assert out.dtype == torch.bfloat16
            out = ROUNDED_ONCE[case["op"]](*args)
        w = torch.tensor(case["weights"], dtype=torch.float32).reshape(out.shape)
        grads = torch.autograd.grad((out.float() * w).sum(), leaves, allow_unused=True)
        answer = {"id": case["id"], "dtype": NAMES[out.dtype], "shape": list(out.shape), "data": out.detach().double().reshape(-1).tolist(),
                  "grads": [(g if g is not None else torch.zeros_like(x)).double().reshape(-1).tolist() for g, x in zip(grads, leaves)]}
    except Exception as e:  # the case reports it; the server goes on
        answer = {"id": case["id"], "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(answer), flush=True)
