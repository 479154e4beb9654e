"""The torch twin of examples/cnn/model.ts: the same CNN in torch 1.13 from the same initial
weights on the same batches (handed over on stdin as JSON), with torch.optim.AdamW. Data
parallelism as the mesh runs it: each of dp ranks takes its rows of the batch with its own
batch_norm running statistics; the step's loss is the mean of the ranks' (so its gradient is the
mean of theirs). Prints {"losses": [...], "eval": loss}: the eval loss over the held-out batch,
each rank's rows normalised by its running statistics.

    /usr/bin/python3 examples/cnn/twin.py < request.json
"""
import json
import sys

import torch
import torch.nn.functional as F


def forward(p, x, rm, rv, training):
    h = F.conv2d(x, p["conv1.weight"], None, 1, 1)
    h = F.batch_norm(h, rm, rv, p["bn1.weight"], p["bn1.bias"], training, 0.1, 1e-5)
    h = F.max_pool2d(F.relu(h), 2)
    h = F.conv2d(h, p["conv2.weight"], p["conv2.bias"], 1, 2, 2, 2)
    h = F.avg_pool2d(F.relu(F.group_norm(h, 4, p["gn.weight"], p["gn.bias"])), 2)
    return F.linear(h.reshape(h.shape[0], -1), p["fc.weight"], p["fc.bias"])


def main():
    req = json.load(sys.stdin)
    torch.set_num_threads(1)
    p = {n: torch.tensor(w["data"], dtype=torch.float32).reshape(w["shape"]).requires_grad_() for n, w in req["weights"].items()}
    dp = req["dp"]
    stats = [(torch.zeros(8), torch.ones(8)) for _ in range(dp)]
    o = req["optim"]
    opt = torch.optim.AdamW(list(p.values()), lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["weight_decay"])

    def loss_of(b, training):
        x = torch.tensor(b["x"], dtype=torch.float32).reshape(b["rows"], 2, 8, 8)
        y = torch.tensor(b["y"], dtype=torch.int64)
        n = b["rows"] // dp
        return sum(F.cross_entropy(forward(p, x[r * n:(r + 1) * n], *stats[r], training), y[r * n:(r + 1) * n]) for r in range(dp)) / dp

    losses = []
    for b in req["batches"]:
        loss = loss_of(b, True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        held = loss_of(req["held_out"], False).item()
    json.dump({"losses": losses, "eval": held}, sys.stdout)


if __name__ == "__main__":
    main()
