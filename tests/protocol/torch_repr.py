# The torch reference for tests/protocol/print.test.ts: reads a JSON list of cases
# ({"dtype", "shape", "data": [numbers or "nan"/"inf"/"-inf"]}) on stdin and writes, per case,
# torch 1.13's repr of that tensor and the exact values it holds (after rounding to its dtype).
import json
import math
import sys

import torch

DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
          "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8, "bool": torch.bool}


def number(v):
    return float(v) if isinstance(v, str) else v


def exact(v):
    return v if not isinstance(v, float) or math.isfinite(v) else str(v)


answers = []
for case in json.load(sys.stdin):
    dtype = DTYPES[case["dtype"]]
    data = [number(v) for v in case["data"]]
    source = torch.tensor(data, dtype=torch.int64 if case["dtype"] in ("i64", "i32", "u8") else torch.float64)
    t = source.to(dtype).reshape(case["shape"])
    values = t.reshape(-1).tolist() if dtype in (torch.int32, torch.int64, torch.uint8, torch.bool) else t.reshape(-1).double().tolist()
    answers.append({"repr": repr(t), "values": [exact(v) for v in values]})
print(json.dumps(answers))
