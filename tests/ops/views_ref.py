# The torch reference for tests/ops/views.test.ts: one process, one JSON case per line on stdin
# ({"id", "t", "shape", "data", "chain": [[op, args], ...], "piece", "writes": [[who, op, arg], ...]}),
# one answer per line on stdout ({"id", "contiguous", "steps": [{"base", "view"}, ...]} or {"id", "error"}).
# The chain makes a view of the base (piece: which of split's or chunk's results); each write is an
# in-place op on the view or the base, and each step records both afterwards. torch's view is
# always a view; ours is one only where torch's is contiguous (one block of the base's memory), and
# a copy elsewhere: so where torch's is not contiguous the view is cloned first, and the test
# expects our values to be torch's with that clone.
import json
import sys

import torch

torch.set_num_threads(1)
DTYPES = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64, "i32": torch.int32}


def sliced(x, dim=0, start=None, end=None, step=1):
    return x[(slice(None),) * (dim % x.dim()) + (slice(start, end, step),)]


def apply(x, op, args):
    if op == "slice":
        return sliced(x, *args)
    if op == "contiguous":
        return x.contiguous()
    return getattr(torch, op)(x, *args)


def answer(case):
    base = torch.tensor(case["data"], dtype=torch.float64).to(DTYPES[case["t"]]).reshape(case["shape"])
    view = base
    for op, args in case["chain"]:
        view = apply(view, op, args)
        if isinstance(view, (tuple, list)):
            view = view[case.get("piece", 0)]
    contiguous = view.is_contiguous()
    if not contiguous:
        view = view.clone()
    steps = []
    for who, op, arg in case["writes"]:
        getattr(view if who == "view" else base, op)(arg)
        steps.append({"base": base.flatten().tolist(), "view": view.flatten().tolist()})
    return {"contiguous": contiguous, "steps": steps}


for line in sys.stdin:
    case = json.loads(line)
    try:
        out = answer(case)
    except Exception as e:  # noqa: BLE001 - the test shows it
        out = {"error": f"{type(e).__name__}: {e}"}
    out["id"] = case["id"]
    print(json.dumps(out), flush=True)
