"""Loads a safetensors file (what monarch-bun's exportFile writes) into torch, with only the
standard library and torch (torch 1.13 has no safetensors reader). The layout: an 8-byte
little-endian header length, a JSON header (per tensor its dtype, shape and data_offsets, and
an optional __metadata__ of strings), then the tensors' raw little-endian bytes.

    import monarch_safetensors
    tensors = monarch_safetensors.load_file("model.safetensors")          # {name: torch.Tensor}
    monarch_safetensors.load_into(model, "model.safetensors", prefix="params.")  # load_state_dict, strict

or from the command line, a summary of a file: python3 monarch_safetensors.py FILE
"""
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8, "BOOL": torch.bool}


def load_file(path):
    """Every tensor of the file by its name, each a torch tensor of its own memory."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than a safetensors header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: a header of {n} bytes is past the end of the file ({len(data)} bytes)")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, entry in header.items():
        dtype = DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: {name} has dtype {entry['dtype']}, not one of {', '.join(DTYPES)}")
        begin, end = entry["data_offsets"]
        numel = 1
        for d in entry["shape"]:
            numel *= d
        size = torch.tensor([], dtype=dtype).element_size()
        if not (0 <= begin <= end <= len(body)) or end - begin != numel * size:
            raise ValueError(f"{path}: {name} {entry['dtype']}{entry['shape']} has data_offsets [{begin}, {end}], not {numel * size} bytes inside the data")
        raw = bytearray(body[begin:end])
        flat = torch.frombuffer(raw, dtype=dtype) if numel > 0 else torch.empty(0, dtype=dtype)
        if sys.byteorder != "little" and size > 1:
            flat = flat.view(torch.uint8).view(-1, size).flip(1).reshape(-1).view(dtype)
        tensors[name] = flat.reshape(entry["shape"])
    return tensors


def load_into(module, path, prefix="", strict=True):
    """module.load_state_dict of the file's tensors whose names start with prefix (the prefix taken off)."""
    state = {name[len(prefix):]: t for name, t in load_file(path).items() if name.startswith(prefix)}
    return module.load_state_dict(state, strict=strict)


if __name__ == "__main__":
    for name, t in load_file(sys.argv[1]).items():
        print(f"{name}: {str(t.dtype).replace('torch.', '')}{list(t.shape)}")
