"""torch 1.13's autograd on the computations tests/gpt/meshgrad.test.ts runs on the mesh: each
case is one group of members; member r has x_r and c_r, and the objective is what the rule in
src/controller/meshgrad.ts assumes (one loss when the members use a value the same way, the sum
of the members' losses otherwise). Reads {"cases": [...]} on stdin, prints each case's gradient
of every member's x."""
import json
import sys

import torch


def grads(case):
    kind = case["kind"]
    shape = case["shape"]
    xs = [torch.tensor(x, dtype=torch.float64).reshape(shape).requires_grad_() for x in case["xs"]]
    cs = [torch.tensor(c, dtype=torch.float64) for c in case["cs"]]
    n = len(xs)
    sq = [x * x for x in xs]
    if kind in ("all_reduce_sum", "all_reduce_avg"):
        # The output is used the same way on every member: one loss.
        y = sum(sq) if kind == "all_reduce_sum" else sum(sq) / n
        loss = (y * cs[0].reshape(y.shape)).sum()
    elif kind == "copy_to":
        # One replicated value; each member uses its copy its own way: the members' losses add up.
        x = xs[0]
        loss = sum((x * x * c.reshape(shape)).sum() for c in cs)
        loss.backward()
        return [x.grad.flatten().tolist()] * n
    elif kind == "all_gather":
        y = torch.stack(sq)
        loss = sum((y * c.reshape(y.shape)).sum() for c in cs)
    elif kind in ("reduce_scatter", "reduce_scatter_avg"):
        s = sum(sq) if kind == "reduce_scatter" else sum(sq) / n
        loss = sum((s[r] * cs[r].reshape(s[r].shape)).sum() for r in range(n))
    elif kind == "all_to_all":
        chunks = [t.flatten().chunk(n) for t in sq]
        ys = [torch.cat([chunks[j][r] for j in range(n)]) for r in range(n)]
        loss = sum((ys[r] * cs[r]).sum() for r in range(n))
    elif kind == "send":
        loss = sum((sq[r] * cs[r].reshape(shape)).sum() for r in range(n))
    else:
        raise ValueError(kind)
    loss.backward()
    return [x.grad.flatten().tolist() for x in xs]


json.dump([grads(c) for c in json.load(sys.stdin)["cases"]], sys.stdout)
