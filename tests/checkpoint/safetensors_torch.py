"""The torch side of tests/checkpoint/export.test.ts, with only the standard library, numpy
and torch 1.13 (no safetensors package): reads a safetensors file by its layout (an 8-byte
little-endian header length, a JSON header, the raw little-endian bytes), checks the layout's
rules, loads the tensors into torch and runs the forward pass the mesh ran; then writes a file
of its own the same way (tensors ordered by dtype alignment then name and the header padded
with spaces, as the Rust crate does) for the mesh to import.

    python3 safetensors_torch.py check FILE      prints {"max_error": ..., "tensors": {...}}
    python3 safetensors_torch.py write FILE      writes w (f32 [8, 6]) and ids (i64 [5])
    python3 safetensors_torch.py gpt FILE        the GPT demo's torch twin (examples/gpt/twin.py)
        loads the file's params.* (strict) and prints its loss on the batch read from stdin
        ({"config", "x", "y", "rows", "length"})
"""
import json
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    body = data[8 + n :]
    meta = header.pop("__metadata__", {})
    end = 0
    tensors = {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, stop = e["data_offsets"]
        assert begin == end, f"{name}: a hole or overlap at {begin} (previous end {end})"
        dtype = DTYPES[e["dtype"]]
        array = np.frombuffer(body[begin:stop], dtype=np.dtype(dtype).newbyteorder("<")).reshape(e["shape"])
        tensors[name] = torch.from_numpy(array.copy())
        end = stop
    assert end == len(body), f"{len(body) - end} bytes after the last tensor"
    return tensors, meta


def check(path):
    t, meta = read(path)
    # The forward pass the mesh ran: y = x W^T, W's rows sharded over tp there, gathered here.
    y = t["x"] @ t["params.w"].T
    mesh_y = t["y"].permute(1, 0, 2).reshape(y.shape)  # stack over tp: [tp, batch, rows]
    print(json.dumps({
        "max_error": float((y - mesh_y).abs().max()),
        "tensors": {k: [str(v.dtype), list(v.shape)] for k, v in t.items()},
        "w_sum": float(t["params.w"].double().sum()),
        "tree": json.loads(meta.get("monarch", "null")),
    }))


def write(path):
    w = torch.arange(48, dtype=torch.float32).reshape(8, 6) / 7
    ids = torch.tensor([5, -4, 3, 2**40, -(2**40)], dtype=torch.int64)
    items = sorted({"w": w, "ids": ids}.items(), key=lambda kv: (-kv[1].element_size(), kv[0]))
    header, chunks, at = {"__metadata__": {"format": "pt"}}, [], 0
    names = {torch.float32: "F32", torch.int64: "I64"}
    for name, v in items:
        raw = v.numpy().astype(v.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[v.dtype], "shape": list(v.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def gpt(path):
    import os
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../examples/gpt"))
    from twin import GPT
    req = json.load(sys.stdin)
    t, _ = read(path)
    model = GPT(req["config"])
    model.load_state_dict({k[len("params."):]: v for k, v in t.items() if k.startswith("params.")}, strict=True)
    x = torch.tensor(req["x"], dtype=torch.int64).reshape(req["rows"], req["length"])
    y = torch.tensor(req["y"], dtype=torch.int64).reshape(-1)
    with torch.no_grad():
        loss = F.cross_entropy(model(x).reshape(-1, req["config"]["vocab"]), y)
    print(json.dumps({"loss": loss.item()}))


if __name__ == "__main__":
    {"check": check, "write": write, "gpt": gpt}[sys.argv[1]](sys.argv[2])
