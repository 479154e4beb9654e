"""The torch side of scripts/gpu/store_probe.ts: the real TCPStore servers, clients and process
groups whose traffic the probe captures. Runs under torch 1.13 or 2.x; every answer is one JSON
line on stdout, and torch's own chatter goes to stderr.

  stores        hosts TCPStore servers and runs client calls, one JSON command per stdin line:
                  {"op": "serve", "kind": "default" | "libuv" | "legacy"} -> {"port", "kind", "libuv"}
                  {"op": "client", "port": P} -> what the Python Store API offers and does
                Prints {"torch", "pid"} first; exits when stdin closes.
  pg BACKEND    init_process_group(BACKEND) through env:// (rank, world and the store from the
                environment), all_reduce, new_group([0]), all_reduce in it. Marks each phase
                with ADD probe/<phase> on the default store so the capture can be cut by phase.
  env DIR       run by torchrun: writes DIR/rank<RANK>.json with this worker's session, process
                group, CUDA_VISIBLE_DEVICES and the variables the agent added to its own.
"""
import datetime
import json
import os
import sys


def say(obj):
    print(json.dumps(obj), flush=True)


def error_text(e):
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def stores():
    import torch
    import torch.distributed as dist

    servers = []  # kept alive until exit
    say({"torch": torch.__version__, "pid": os.getpid()})
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "serve":
                kwargs = {} if cmd["kind"] == "default" else {"use_libuv": cmd["kind"] == "libuv"}
                store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=30), **kwargs)
                servers.append(store)
                say({"port": store.port, "kind": cmd["kind"], "libuv": getattr(store, "libuv_backend", None)})
            elif cmd["op"] == "client":
                say(client_api(dist, cmd["port"]))
            else:
                say({"error": f"unknown op {cmd['op']}"})
        except Exception as e:  # noqa: BLE001 - every failure is an answer here
            say({"error": error_text(e)})


def client_api(dist, port):
    """A torch client through the relay: its handshake, then the tail of the Store API."""
    store = dist.TCPStore("127.0.0.1", port, 1, False, timeout=datetime.timedelta(seconds=3))
    store.set("probe_api", "1")
    out = {"pid": os.getpid(), "methods": sorted(m for m in dir(store) if not m.startswith("_"))}
    if hasattr(store, "list_keys"):
        try:
            out["list_keys"] = sorted(store.list_keys())
        except Exception as e:  # noqa: BLE001
            out["list_keys_error"] = error_text(e)
    if hasattr(store, "barrier"):
        out["barrier_doc"] = (store.barrier.__doc__ or "").strip().splitlines()[:3]
        try:
            out["barrier"] = repr(store.barrier())
        except Exception as e:  # noqa: BLE001 - pybind's TypeError lists the real signatures
            out["barrier_error"] = str(e).strip()[:400]
    out["num_keys"] = store.num_keys()  # a round trip, so the relay has seen everything before
    return out


def pg(backend):
    import torch
    import torch.distributed as dist

    out = {"torch": torch.__version__, "backend": backend, "TORCH_DIST_INIT_BARRIER": os.environ.get("TORCH_DIST_INIT_BARRIER")}
    try:
        if backend == "nccl":
            if not torch.cuda.is_available():
                out["skipped"] = "torch sees no GPU"
                return say(out)
            torch.cuda.set_device(0)
        device = "cuda" if backend == "nccl" else "cpu"
        dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=30))
        store = dist.distributed_c10d._get_default_store()
        store.add("probe/after_init", 1)  # ADD has a reply: the relay has logged what came before
        t = torch.full((4,), 3.0, device=device)
        dist.all_reduce(t)
        out["all_reduce"] = t.tolist()
        store.add("probe/before_new_group", 1)
        group = dist.new_group([0])
        store.add("probe/after_new_group", 1)
        t = torch.full((4,), 5.0, device=device)
        dist.all_reduce(t, group=group)
        out["group_all_reduce"] = t.tolist()
        if device == "cuda":
            torch.cuda.synchronize()
        store.add("probe/end", 1)
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        out["error"] = error_text(e)
    say(out)


def env(folder):
    """What torchrun gave this worker, next to what its agent (our parent) runs with."""
    agent = os.getppid()
    with open(f"/proc/{agent}/environ", "rb") as f:
        agent_env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    agent_env = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in agent_env.items()}
    added = sorted(k for k in os.environ if k not in agent_env)
    changed = sorted(k for k in os.environ if k in agent_env and agent_env[k] != os.environ[k])
    out = {
        "rank": int(os.environ["RANK"]),
        "pid": os.getpid(),
        "sid": os.getsid(0),
        "pgid": os.getpgid(0),
        "agent_pid": agent,
        "agent_sid": os.getsid(agent),
        "agent_pgid": os.getpgid(agent),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "agent_CUDA_VISIBLE_DEVICES": agent_env.get("CUDA_VISIBLE_DEVICES"),
        "added": added,
        "changed": changed,
    }
    with open(os.path.join(folder, f"rank{out['rank']}.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "stores":
        stores()
    elif mode == "pg":
        pg(sys.argv[2])
    elif mode == "env":
        env(sys.argv[2])
    else:
        sys.exit(f"unknown mode {mode}")
