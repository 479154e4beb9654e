# torch 1.13's type promotion for tests/ops/promotion.test.ts: reads one JSON list of operand
# lists from stdin (an operand: {"t": dtype, "dims": 0 or 1} for a 0-d or a [2] tensor, or
# {"n": "bool" | "int" | "float"} for a Python number) and prints the dtype of each, torch.result_type's
# for two operands and torch._prims_common.elementwise_dtypes' (torch's n-ary form of the same
# rule, checked against result_type on every pair first) for three. A case {"inplace": op,
# "operands": [input, other]} answers whether torch's input.op(other) runs ("ok") or is refused
# ("refused": a result that cannot be cast back into the input), or "unsupported" (no CPU kernel).
import json
import sys

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
          "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8, "bool": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


def operand(o):
    if "n" in o:
        return {"bool": True, "int": 2, "float": 2.0}[o["n"]]
    return torch.ones([2] if o["dims"] else [], dtype=DTYPES[o["t"]])


def n_ary(xs):
    return elementwise_dtypes(*xs, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]


out = []
for case in json.load(sys.stdin):
    if isinstance(case, dict):
        x, other = (operand(o) for o in case["operands"])
        try:
            getattr(x, case["inplace"])(other)
            out.append("ok")
        except RuntimeError as e:
            # torch 1.13's CPU has no f16 clamp; its pow_ says "Found dtype Long but expected Float".
            out.append("unsupported" if "not implemented" in str(e) else "refused")
        continue
    xs = [operand(o) for o in case]
    if len(xs) == 2:
        dtype = torch.result_type(*xs)
        assert n_ary(xs) == dtype, (case, n_ary(xs), dtype)
    else:
        dtype = n_ary(xs)
    out.append(NAMES[dtype])
print(json.dumps(out))
