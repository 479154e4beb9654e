# torch 1.13's side of tests/autograd/inplace.ts, one JSON request per line:
#   {"kind": "program", "leaves": [{"shape", "data"}], "steps": [...], "loss": [i, ...]}
#     runs the program (each step appends a value; a "write" step changes one in place, under
#     no_grad or through detach()), then loss.backward(): {"refused": bool, "message", "grads"}
#     (refused: torch's "modified by an inplace operation"; grads: each leaf's, zeros for none);
#   {"kind": "overlap", "size", "a": [start, length, shape], "b": [...], "op"}: b's elements
#     written by op with a's as input, both views of one storage: {"refused": bool, "message",
#     "base": the storage's values after the op, when it ran}.
import json
import sys

import torch

torch.set_num_threads(1)


def apply(vals, s):
    op, a = s["op"], [vals[i] for i in s["args"]]
    k = s.get("k")
    if op in ("exp", "tanh", "sigmoid", "relu", "abs", "sin", "cos", "neg", "reciprocal", "log", "sqrt"):
        return getattr(torch, op)(a[0])
    if op in ("add", "sub", "mul", "div", "maximum", "minimum", "matmul"):
        return getattr(torch, op)(a[0], a[1])
    if op == "add_scalar":
        return a[0] + k
    if op == "pow":
        return a[0] ** k
    if op == "narrow":
        return a[0].narrow(0, 1, 1)
    if op == "select":
        return a[0].select(0, 0)
    if op == "flat":
        return a[0].reshape(-1)
    if op == "detach":
        return a[0].detach()
    if op == "sum_last":
        return a[0].sum(-1)
    if op == "prod":
        return a[0].prod()
    if op == "amax_last":
        return a[0].amax(-1)
    if op == "softmax_last":
        return a[0].softmax(-1)
    raise ValueError(op)


def program(req):
    # clone: a leaf of its own memory (a reshape would be a view of a tensor without grad).
    leaves = [torch.tensor(l["data"], dtype=torch.float64).reshape(l["shape"]).clone().requires_grad_() for l in req["leaves"]]
    vals = list(leaves)
    for s in req["steps"]:
        if s["op"] == "write":
            t = vals[s["target"]]
            if s["how"] == "nograd":
                with torch.no_grad():
                    t.mul_(1.5)
            else:
                t.detach().add_(0.25)
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
    except RuntimeError as e:
        if "refer to a single memory location" not in str(e):
            raise
        return {"refused": True, "message": str(e).split("\n")[0]}
    return {"refused": False, "message": "", "base": base.tolist()}


for line in sys.stdin:
    req = json.loads(line)
    out = program(req) if req["kind"] == "program" else overlap(req)
    print(json.dumps({"id": req["id"], **out}), flush=True)
