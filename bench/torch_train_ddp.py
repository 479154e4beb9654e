"""The torch side of bench/train.ts: one rank of torch DDP (gloo) training the GPT demo's model
(examples/gpt/twin.py's GPT, the very module the loss-parity test checks against) from the
weights and batches the bench hands over, with torch.optim.AdamW.

    python3 torch_train_ddp.py <rank> <world> <master port> <request.json>

Each rank takes its rows of every batch (rank r: rows [r * B/world, (r + 1) * B/world)), as the
mesh's dp ranks do. After `warmup` steps, `steps` steps are timed between two barriers; rank 0
prints {"seconds": [per timed step], "losses": [every step's loss averaged over the ranks],
"cpu": the CPU seconds of every rank over the timed steps, summed}.
"""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "gpt"))
from twin import GPT  # noqa: E402

rank, world, port, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
req = json.load(open(path))
torch.set_num_threads(req["threads"])
timeout = datetime.timedelta(seconds=300)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timeout)

cfg = req["config"]
model = GPT(cfg)
model.load_state_dict({n: torch.tensor(w["data"], dtype=torch.float32).reshape(w["shape"]) for n, w in req["weights"].items()}, strict=True)
ddp = DistributedDataParallel(model)
o = req["optim"]
opt = torch.optim.AdamW(ddp.parameters(), lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["weight_decay"])


def step(b):
    rows = b["rows"] // world
    x = torch.tensor(b["x"], dtype=torch.int64).reshape(b["rows"], b["length"])[rank * rows:(rank + 1) * rows]
    y = torch.tensor(b["y"], dtype=torch.int64).reshape(b["rows"], b["length"])[rank * rows:(rank + 1) * rows].reshape(-1)
    loss = F.cross_entropy(ddp(x).reshape(-1, cfg["vocab"]), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


losses, seconds = [], []
batches = req["batches"]
cpu0 = 0.0
for i, b in enumerate(batches):
    if i == req["warmup"]:
        dist.barrier()
        cpu0 = time.process_time()
    t0 = time.perf_counter()
    loss = step(b)
    dist.all_reduce(loss)  # the loss averaged over dp, as the mesh's trainStep returns it
    losses.append(loss.item() / world)
    if i >= req["warmup"]:
        seconds.append(time.perf_counter() - t0)
cpu = torch.tensor([time.process_time() - cpu0], dtype=torch.float64)
dist.all_reduce(cpu)  # every rank's CPU seconds over the timed steps, summed
if rank == 0:
    print(json.dumps({"seconds": seconds, "losses": losses, "cpu": cpu.item()}), flush=True)
dist.destroy_process_group()
