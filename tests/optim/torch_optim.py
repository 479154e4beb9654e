# The torch reference for tests/optim: one process serving many cases, one JSON object per line
# on stdin, one answer per line on stdout ({"id", ...} or {"id", "error"}); tensors as
# {"t": dtype, "shape", "data"}. Cases:
#   {"kind": "optimizer", "optimizer": "SGD" | "AdamW", "groups": [{"params": [i...], **torch kwargs}],
#    "params": [T], "steps": [{"lrs": [lr per group] | null, "grads": [T | null per param]}]}
#     -> {"params": [[data per param] per step], "state": [{name: data} per param]}
#   {"kind": "clip", "grads": [T], "max_norm"} -> {"total", "grads": [data]}
#   {"kind": "schedule", "scheduler": "LinearLR" | "CosineAnnealingLR", "lr", "kwargs", "steps"} -> {"lrs"}
import json
import math
import sys

import torch

torch.set_num_threads(1)
DTYPES = {"f32": torch.float32, "f64": torch.float64}


def decode(v):
    # float() reads the strings non-finite numbers come as ("NaN", "Infinity", "-Infinity").
    return torch.tensor([float(x) for x in v["data"]], dtype=torch.float64).to(DTYPES[v["t"]]).reshape(v["shape"])


def data(t):
    return [x if math.isfinite(x) else str(x) for x in t.detach().reshape(-1).double().tolist()]


def optimizer(case):
    params = [decode(p).requires_grad_() for p in case["params"]]
    groups = [dict(g, params=[params[i] for i in g["params"]]) for g in case["groups"]]
    if case["optimizer"] == "AdamW":
        for g in groups:
            if "betas" in g:
                g["betas"] = tuple(g["betas"])
    opt = getattr(torch.optim, case["optimizer"])(groups)
    history = []
    for step in case["steps"]:
        if step.get("lrs") is not None:
            for g, lr in zip(opt.param_groups, step["lrs"]):
                g["lr"] = lr
        for p, g in zip(params, step["grads"]):
            p.grad = None if g is None else decode(g)
        opt.step()
        history.append([data(p) for p in params])
    state = []
    for p in params:
        s = opt.state.get(p, {})
        state.append({k: (float(v) if k == "step" else data(v)) for k, v in s.items() if v is not None})
    return {"params": history, "state": state}


def clip(case):
    grads = [decode(g) for g in case["grads"]]
    params = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g
    total = torch.nn.utils.clip_grad_norm_(params, case["max_norm"])
    return {"total": float(total), "grads": [data(p.grad) for p in params]}


def schedule(case):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=case["lr"])
    sched = getattr(torch.optim.lr_scheduler, case["scheduler"])(opt, **case["kwargs"])
    lrs = []
    for _ in range(case["steps"]):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return {"lrs": lrs}


KINDS = {"optimizer": optimizer, "clip": clip, "schedule": schedule}

for line in sys.stdin:
    case = json.loads(line)
    try:
        answer = dict(KINDS[case["kind"]](case), id=case["id"])
    except Exception as e:  # the case reports it; the server goes on
        answer = {"id": case["id"], "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(answer), flush=True)
