"""The torch twin of examples/gpt/model.ts: the same GPT in torch 1.13, trained from the same
initial weights on the same batches (both handed over on stdin as JSON, not re-drawn), with
torch.optim.AdamW and the same hyper-parameters (each step's learning rate when given, and clip_grad_norm_ when asked),
its forward and loss under CPU autocast to bf16 when asked ("autocast": "bf16"). Prints {"losses": [...]} (one per step) and,
when asked, the logits of a forward pass.

    /usr/bin/python3 examples/gpt/twin.py < request.json
"""
import json
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.ModuleDict({"q": nn.Linear(dim, dim), "k": nn.Linear(dim, dim), "v": nn.Linear(dim, dim), "proj": nn.Linear(dim, dim)})
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.ModuleDict({"fc": nn.Linear(dim, 4 * dim), "proj": nn.Linear(4 * dim, dim)})

    def attention(self, x, mask):
        b, t, c = x.shape
        h = self.heads
        q, k, v = (self.attn[n](x).reshape(b, t, h, c // h).transpose(1, 2) for n in ("q", "k", "v"))
        scores = q.matmul(k.transpose(-2, -1)).mul(1 / math.sqrt(c // h)).add(mask)
        y = scores.softmax(-1).matmul(v).transpose(1, 2).reshape(b, t, c)
        return self.attn["proj"](y)

    def forward(self, x, mask):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.mlp["proj"](F.gelu(self.mlp["fc"](self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg["vocab"], cfg["dim"])
        self.wpe = nn.Embedding(cfg["block"], cfg["dim"])
        self.h = nn.ModuleList(Block(cfg["dim"], cfg["heads"]) for _ in range(cfg["layers"]))
        self.ln_f = nn.LayerNorm(cfg["dim"])
        if not cfg["tied"]:
            self.head = nn.Linear(cfg["dim"], cfg["vocab"], bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.full((t, t), float("-inf")).triu(1)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x, mask)
        x = self.ln_f(x)
        return x.matmul(self.wte.weight.t()) if self.cfg["tied"] else self.head(x)


def main():
    req = json.load(sys.stdin)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = req["config"]
    model = GPT(cfg)
    state = {name: torch.tensor(w["data"], dtype=torch.float32).reshape(w["shape"]) for name, w in req["weights"].items()}
    # The names must be exactly the module's: nothing re-drawn, nothing left at torch's init.
    model.load_state_dict(state, strict=True)
    o = req["optim"]
    opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["weight_decay"])
    losses = []
    for i, b in enumerate(req["batches"]):
        if o.get("lrs") is not None:
            for g in opt.param_groups:
                g["lr"] = o["lrs"][i]
        x = torch.tensor(b["x"], dtype=torch.int64).reshape(b["rows"], b["length"])
        y = torch.tensor(b["y"], dtype=torch.int64).reshape(-1)
        # torch 1.13's CPU autocast when asked (bf16: the only low type it takes on CPU)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=req.get("autocast") == "bf16"):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), y)
        opt.zero_grad()
        loss.backward()
        if o.get("clip") is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["clip"])
        opt.step()
        losses.append(loss.item())
    json.dump({"losses": losses}, sys.stdout)


if __name__ == "__main__":
    main()
