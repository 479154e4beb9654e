"""One rank of a 2-process gloo job whose store is our server: torch_gloo.py PORT RANK MODE.

MODE "store": init_process_group("gloo", store=TCPStore(...)).
MODE "agent": env:// rendezvous as under torchrun with an agent store
(TORCHELASTIC_USE_AGENT_STORE=True): every rank connects to MASTER_ADDR:MASTER_PORT as a client.
Then all_reduce of [rank+1, 10*(rank+1)]; prints {"rank": r, "sum": [...]}.
"""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

port, rank, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
timeout = datetime.timedelta(seconds=30)
if mode == "store":
    store = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timeout)
else:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE="2",
        TORCHELASTIC_USE_AGENT_STORE="True",
        TORCHELASTIC_RESTART_COUNT="0",
    )
    dist.init_process_group("gloo", init_method="env://", timeout=timeout)
t = torch.tensor([rank + 1.0, 10.0 * (rank + 1)])
dist.all_reduce(t)
dist.barrier()
print(json.dumps({"rank": rank, "sum": t.tolist()}), flush=True)
dist.destroy_process_group()
