"""Reads keys from torchrun's agent store the way a torch worker of the same job would.

    python agent_store_keys.py <host> <port> <key>...

torch's env:// rendezvous wraps the agent store in PrefixStore("/worker/attempt_<n>"); this does
the same for attempt 0 and prints one JSON line: for each key, the length of its value, or null
when it is missing.
"""
import json
import sys
from datetime import timedelta

import torch.distributed as dist

host, port, keys = sys.argv[1], int(sys.argv[2]), sys.argv[3:]


def value_length(key):
    # 1.13 has no Store.check in Python and a timed-out wait leaves its connection out of step,
    # so each key gets a connection of its own and a short wait.
    store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=10), wait_for_workers=False)
    worker = dist.PrefixStore("/worker/attempt_0", store)
    try:
        worker.wait([key], timedelta(milliseconds=500))
    except RuntimeError:
        return None
    return len(worker.get(key))


print(json.dumps({key: value_length(key) for key in keys}), flush=True)
