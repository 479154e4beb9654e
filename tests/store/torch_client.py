"""A real torch.distributed.TCPStore client exercising our server: usage torch_client.py PORT.

Prints one JSON object whose fields are what torch returned, for the test to check.
Values are decoded as latin1 text; errors are reported as their message.
"""
import datetime
import json
import sys
import threading
import time

import torch
import torch.distributed as dist

port = int(sys.argv[1])
ms = lambda n: datetime.timedelta(milliseconds=n)  # noqa: E731
# world_size=1 makes the 1.13 client send ADD init/ 1 on connect, like every real rank does.
s = dist.TCPStore("127.0.0.1", port, 1, False, timeout=ms(10_000))
helper = dist.TCPStore("127.0.0.1", port, None, False, timeout=ms(10_000))
out = {"torch": torch.__version__}
text = lambda b: b.decode("latin1")  # noqa: E731

out["from_ts"] = text(s.get("from_ts"))
s.set("k1", "v1")
out["get_k1"] = text(s.get("k1"))
s.set("from_torch", b"\x00\xffbytes")
out["add_3"] = s.add("ctr", 3)
out["add_minus_1"] = s.add("ctr", -1)
out["get_ctr"] = text(s.get("ctr"))
s.set("num", " 40x")
out["add_on_text"] = s.add("num", 2)
out["cas_missing_empty"] = text(s.compare_set("cas", "", "first"))
out["cas_mismatch"] = text(s.compare_set("cas", "wrong", "second"))
out["cas_match"] = text(s.compare_set("cas", "first", "second"))
keys_before = s.num_keys()
out["cas_missing_nonempty"] = text(s.compare_set("cas_missing", "x", "y"))
out["cas_missing_created"] = s.num_keys() != keys_before
out["num_keys"] = s.num_keys()
out["delete_existing"] = s.delete_key("k1")
out["delete_again"] = s.delete_key("k1")

# wait and get that block until another client sets the key
threading.Timer(0.3, lambda: helper.set("late", "x")).start()
t0 = time.monotonic()
s.wait(["late"])
out["wait_blocked_s"] = time.monotonic() - t0
threading.Timer(0.3, lambda: helper.set("blocking_get", "y")).start()
t0 = time.monotonic()
out["blocking_get"] = text(s.get("blocking_get"))
out["get_blocked_s"] = time.monotonic() - t0

# a wait that times out; its connection is poisoned afterwards (1.13), so use a separate client
doomed = dist.TCPStore("127.0.0.1", port, None, False, timeout=ms(10_000))
t0 = time.monotonic()
try:
    doomed.wait(["never"], ms(300))
    out["wait_timeout"] = "no error"
except RuntimeError as e:
    out["wait_timeout"] = str(e)
out["wait_timeout_s"] = time.monotonic() - t0
out["after_timeout_add"] = s.add("ctr", 10)
dist.PrefixStore("a", dist.PrefixStore("b", s)).set("pk", "pv")
out["num_keys_at_end"] = s.num_keys()
print(json.dumps(out), flush=True)
