"""Hosts a real torch.distributed.TCPStore (is_master=True) on a free port for our client to use.

Prints {"port": N} once listening, then serves line commands on stdin, each a JSON object,
answering each with one JSON line: {"op": "get", "key": k} -> {"value": latin1 text},
{"op": "set", "key": k, "value": v} -> {"ok": true}. Exits when stdin closes.
"""
import datetime
import json
import sys

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=30))
print(json.dumps({"port": store.port, "torch": __import__("torch").__version__}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "get":
        print(json.dumps({"value": store.get(cmd["key"]).decode("latin1")}), flush=True)
    elif cmd["op"] == "set":
        store.set(cmd["key"], cmd["value"])
        print(json.dumps({"ok": True}), flush=True)
