# torch 1.13's side of tests/autograd/inplace.ts, one JSON request per line:
#   {"kind": "program", "leaves": [{"shape", "data"}], "steps": [...], "loss": [i, ...]}
#     runs the program (each step appends a value; a "write" step changes one in place, under
#     no_grad or through detach()), then loss.backward(): {"refused": bool, "message", "grads"}
#     (refused: torch's "modified by an inplace operation"; grads: each leaf's, zeros for none);
#   {"kind": "overlap", "size", "a": [start, length, shape], "b": [...], "op"}: b's elements
#     written by op with a's as input, both views of one storage: {"refused": bool, "message",
#     "base": the storage's values after the op, when it ran}.
# Any other failure answers {"error": ...}, which the test reports.
import json
import sys

import torch

torch.set_num_threads(1)


F = torch.nn.functional
UNARY = {"exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu, "abs": torch.abs, "sin": torch.sin,
         "cos": torch.cos, "neg": torch.neg, "erf": torch.erf, "silu": F.silu, "gelu": F.gelu, "softplus": F.softplus,
         "expm1": torch.expm1, "log": torch.log, "sqrt": torch.sqrt, "reciprocal": torch.reciprocal, "rsqrt": torch.rsqrt}
OPS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum, "minimum": torch.minimum,
    "matmul": torch.matmul, "pow": torch.pow, "clamp": torch.clamp, "lerp": torch.lerp, "where": torch.where,
    "add_half": lambda a: a + 0.5, "square": lambda a: a ** 2, "gt": lambda a: a > 0,
    "masked_fill": lambda a, m: a.masked_fill(m, 0.5),
    "addcmul": lambda a, b, c: torch.addcmul(a, b, c, value=0.5), "addcdiv": lambda a, b, c: torch.addcdiv(a, b, c, value=0.5),
    "sum_last": lambda a: a.sum(-1), "mean_last": lambda a: a.mean(-1), "amax_last": lambda a: a.amax(-1),
    "softmax_last": lambda a: a.softmax(-1), "log_softmax_last": lambda a: a.log_softmax(-1), "cumsum_last": lambda a: a.cumsum(-1),
    "logsumexp_last": lambda a: a.logsumexp(-1), "var_last": lambda a: a.var(-1), "std_last": lambda a: a.std(-1),
    "norm": lambda a: torch.norm(a), "prod": lambda a: a.prod(),
    "max_values": lambda a: a.max(-1)[0], "max_indices": lambda a: a.max(-1)[1],
    "linear": F.linear, "layer_norm": lambda a, w, b: F.layer_norm(a, (a.shape[-1],), w, b), "mse_loss": F.mse_loss,
    "index_select": lambda a, i: a.index_select(0, i), "gather": lambda a, i: a.gather(0, i), "embedding": F.embedding,
    "cat": lambda a, b: torch.cat([a, b], 0), "stack": lambda a, b: torch.stack([a, b], 0),
    "narrow": lambda a: a.narrow(0, 1, 1), "select": lambda a: a.select(0, 0), "flat": lambda a: a.reshape(-1),
    "unsqueeze": lambda a: a.unsqueeze(0), "detach": lambda a: a.detach(),
}


def apply(vals, s):
    args = [vals[i] for i in s["args"]]
    return (UNARY.get(s["op"]) or OPS[s["op"]])(*args)


def write(t, how):
    """A float is scaled; an index keeps its values (its version still moves); a mask flips."""
    if t.dtype == torch.bool:
        t.logical_not_()
    elif t.dtype == torch.int64:
        t.add_(0)
    elif how == "nograd":
        t.mul_(1.5)
    else:
        t.add_(0.25)


def program(req):
    # clone: a leaf of its own memory (a reshape would be a view of a tensor without grad).
    made = [torch.tensor(l["data"], dtype=torch.float64 if l["dtype"] == "f64" else torch.int64).reshape(l["shape"]).clone() for l in req["leaves"]]
    leaves = [t.requires_grad_() for t in made if t.dtype == torch.float64]
    vals = list(made)
    for s in req["steps"]:
        if s["op"] == "write":
            t = vals[s["target"]]
            if s["how"] == "nograd":
                with torch.no_grad():
                    write(t, "nograd")
            else:
                write(t.detach(), "detach")
        else:
            vals.append(apply(vals, s))
    loss = sum(vals[i].sum() for i in req["loss"])
    try:
        loss.backward()
    except RuntimeError as e:
        if "modified by an inplace operation" not in str(e):
            raise
        return {"refused": True, "message": str(e).split("\n")[0]}
    grads = [(l.grad if l.grad is not None else torch.zeros_like(l)).reshape(-1).tolist() for l in leaves]
    return {"refused": False, "message": "", "grads": grads}


def overlap(req):
    base = torch.arange(req["size"], dtype=torch.float64)
    view = lambda v: base.narrow(0, v[0], v[1]).view(v[2])
    a, b = view(req["a"]), view(req["b"])
    try:
        if req["op"] == "add_":
            b.add_(a)
        elif req["op"] == "copy_":
            b.copy_(a)
        elif req["op"] == "mul_":
            b.mul_(a)
        elif req["op"] == "index_add_":
            b.index_add_(0, torch.zeros(a.shape[0], dtype=torch.int64), a)
        elif req["op"] == "scatter_":
            b.scatter_(0, torch.arange(a.shape[0]) if a.dim() == 1 else torch.zeros(a.shape, dtype=torch.int64), a)
        elif req["op"] == "addcmul_":
            b.addcmul_(a, a, value=0.5)
    except RuntimeError as e:
        if "refer to a single memory location" not in str(e):
            raise
        return {"refused": True, "message": str(e).split("\n")[0]}
    return {"refused": False, "message": "", "base": base.tolist()}


for line in sys.stdin:
    req = json.loads(line)
    try:
        out = program(req) if req["kind"] == "program" else overlap(req)
    except Exception as e:  # an answer for every request: the test reports it
        out = {"refused": False, "message": "", "error": f"{type(e).__name__}: {e}"}
    print(json.dumps({"id": req["id"], **out}), flush=True)
