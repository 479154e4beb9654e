# The torch reference for tests/ops/views.test.ts: one process, one JSON program per line on stdin
# ({"id", "t", "shape", "data", "steps"}), one answer per line on stdout ({"id", "steps": [...]}).
# A program starts from a base tensor (data in row-major order); each step is a view op on the
# current tensor ({"op", "args", "piece"}: piece picks one of split's, chunk's or unbind's results)
# or an in-place write ({"write": k, "op", "arg"}: to the k-th tensor made so far, 0 the base).
# After each step the answer records the current tensor's shape, strides, storage offset and
# is_contiguous with the base's and its values, or the error torch raised (a failed view op ends
# the program; a refused write leaves everything as it was).
# An elementwise call ({"id", "operands", "call", "args"}): each operand a base (its "t", "shape",
# "data") and a chain of view steps; "args" the call's arguments, {"operand": k} for the k-th; a
# call ending in "_" writes its first argument. The answer records the result's (or the written
# operand's) dtype, shape, strides, is_contiguous and values.
import json
import sys

import torch

torch.set_num_threads(1)
DTYPES = {"f32": torch.float32, "f64": torch.float64, "i64": torch.int64, "i32": torch.int32, "bool": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


def sliced(x, dim=0, start=None, end=None, step=1):
    return x[(slice(None),) * (dim % x.dim()) + (slice(start, end, step),)]


def apply(x, op, args):
    if op == "slice":
        return sliced(x, *args)
    if op == "alias":
        return x.detach()
    if op in ("view", "unfold", "contiguous", "expand"):
        return getattr(x, op)(*args)
    return getattr(torch, op)(x, *args)


def record(x, base):
    return {
        "shape": list(x.shape), "stride": list(x.stride()), "offset": x.storage_offset(), "contiguous": x.is_contiguous(),
        "base": base.flatten().tolist(), "view": x.flatten().tolist(),
    }


def answer(case):
    base = torch.tensor(case["data"], dtype=torch.float64).to(DTYPES[case["t"]]).reshape(case["shape"])
    made = [base]
    out = []
    for step in case["steps"]:
        try:
            if "write" in step:
                getattr(made[step["write"]], step["op"])(step["arg"])
            else:
                r = apply(made[-1], step["op"], step["args"])
                made.append(r[step.get("piece", 0)] if isinstance(r, (tuple, list)) else r)
        except RuntimeError as e:
            out.append({"error": str(e)})
            if "write" in step:
                continue
            break
        out.append(record(made[-1], base))
    return {"steps": out}


def elementwise(case):
    xs = []
    for o in case["operands"]:
        x = torch.tensor(o["data"], dtype=torch.float64).to(DTYPES[o["t"]]).reshape(o["shape"])
        for step in o["chain"]:
            x = apply(x, step["op"], step["args"])
        xs.append(x)
    args = [xs[a["operand"]] if isinstance(a, dict) else a for a in case["args"]]
    call = case["call"]
    if call.endswith("_"):
        getattr(args[0], call)(*args[1:])
        r = args[0]
    elif call == "to":
        r = args[0].to(DTYPES[args[1]])
    else:
        r = getattr(torch, call)(*args)
    return {
        "dtype": NAMES[r.dtype], "shape": list(r.shape), "stride": list(r.stride()), "contiguous": r.is_contiguous(),
        "values": r.flatten().double().tolist(),
    }


for line in sys.stdin:
    case = json.loads(line)
    try:
        out = elementwise(case) if "operands" in case else answer(case)
    except Exception as e:  # noqa: BLE001 - the test shows it
        out = {"error": f"{type(e).__name__}: {e}"}
    out["id"] = case["id"]
    print(json.dumps(out), flush=True)
