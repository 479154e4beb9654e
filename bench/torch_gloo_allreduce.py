"""The torch side of bench/collectives.ts: one rank of torch.distributed's Gloo all_reduce.

    python3 torch_gloo_allreduce.py <rank> <world> <store host> <store port> <cases as JSON>

It meets the other ranks through the bench's store server (a TCPStore client, as
init_process_group would use), prints {"ready": true}, then does one timed run per stdin line
naming a case index, exactly as the bench's own ranks do: fill the tensor with rank + 1,
barrier, `iters` in-place sum all_reduces timed together; it answers
{"seconds": per-op time, "wrong": elements that are not S * world^(iters-1)}, S = 1 + ... + world
(the first op sums the ranks' values, each later one multiplies by world).
"exit" ends it. Gloo binds the address of GLOO_SOCKET_IFNAME's interface (the bench sets it).
"""
import datetime
import json
import sys
import time

import torch
import torch.distributed as dist

rank, world, host, port, cases = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5])
timeout = datetime.timedelta(seconds=120)
store = dist.TCPStore(host, port, world, False, timeout=timeout)
dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
tensors = [torch.empty(case["bytes"] // 4, dtype=torch.float32) for case in cases]
print(json.dumps({"ready": True}), flush=True)

for line in sys.stdin:
    if line.strip() == "exit":
        break
    index = int(line)
    case, t = cases[index], tensors[index]
    t.fill_(rank + 1)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(case["iters"]):
        dist.all_reduce(t)
    took = time.perf_counter() - start
    expected = world * (world + 1) / 2 * float(world) ** (case["iters"] - 1)
    print(json.dumps({"seconds": took / case["iters"], "wrong": int((t != expected).sum())}), flush=True)

dist.barrier()
dist.destroy_process_group()
