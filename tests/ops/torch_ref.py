# The torch reference for tests/ops/parity.test.ts: one process serving many cases, one JSON
# object per line on stdin ({"id", "op", "args", "kwargs"}; tensors as {"t": dtype, "shape",
# "data"}), one answer per line on stdout ({"id", "dtype", "shape", "data"} or {"id", "error"}).
# tests/autograd/gradcheck.test.ts adds "wrt" (paths of the tensor arguments: [i] or [i, j] in a
# list) and "weights" (a tensor of the result's shape): the answer is then {"id", "grads"}, the
# gradients of sum(result * weights) by torch's autograd.
import json
import math
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
          "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8, "bool": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


def decode(v):
    if isinstance(v, dict) and "t" in v:
        data = [float(x) if isinstance(x, str) else x for x in v["data"]]  # "NaN", "Infinity"
        if "strides" in v:  # a strided view: data is its storage (tests/worker/strided.test.ts)
            storage = torch.tensor(data, dtype=torch.float64).to(DTYPES[v["t"]])
            return torch.as_strided(storage, v["shape"], v["strides"], v["offset"])
        t = torch.tensor(data, dtype=torch.float64).to(DTYPES[v["t"]]).reshape(v["shape"])
        # "nc": given with its last two dims swapped, and used as their transpose, not contiguous.
        return t.transpose(-1, -2) if v.get("nc") else t
    if isinstance(v, dict) and "float" in v:  # a float number (JSON writes 2.0 as 2)
        return float(v["float"])
    if isinstance(v, list):
        return [decode(x) for x in v]
    if isinstance(v, str) and v in DTYPES:
        return DTYPES[v]
    if v in ("NaN", "Infinity", "-Infinity"):  # a number JSON cannot spell
        return float(v)
    return v


def sliced(x, dim=0, start=None, end=None, step=1):
    return x[(slice(None),) * (dim % x.dim()) + (slice(start, end, step),)]


def matmul_t(a, b, ta, tb):
    """Our _matmul_t: the operands read transposed in their last two dims; integers and bool as
    their int64 products (torch 1.13 has no bool matmul), cast back; bf16 as baddbmm's below."""
    a, b = (a.transpose(-1, -2) if ta else a), (b.transpose(-1, -2) if tb else b)
    if a.dtype == torch.bfloat16:  # as baddbmm's: f32, rounded once
        return (a.float() @ b.float()).to(a.dtype)
    if a.is_floating_point():
        return a @ b
    r = a.long() @ b.long()
    return (r != 0) if a.dtype == torch.bool else r.to(a.dtype)


def upcast(x):
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """torch 1.13 has no scaled_dot_product_attention: torch 2's math form, in f64, rounded once."""
    dtype = q.dtype
    q, k, v = upcast(q), upcast(k), upcast(v)
    w = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if is_causal:
        w = w.masked_fill(~torch.ones(w.shape[-2], w.shape[-1], dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        w = w.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else w + attn_mask.double()
    return (torch.softmax(w, -1) @ v).to(dtype)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """torch 1.13's bf16 layer_norm on CPU keeps its mean and rstd in bf16 (the saved statistics
    have the input's dtype) and rounds the shift -rstd * mean to bf16 too before normalising in
    float (from its saved statistics that form gives its output exactly, 18,500 of 18,500
    elements). Where weight * x_hat + bias cancels, those roundings reach 0.058 from the exact
    result, while f32 rounded once stays within half a bf16 step (0.028; 300 seeds of [5, 37]).
    The reference is f32, rounded once (the form the shim's kernels compute)."""
    if x.dtype == torch.bfloat16:
        return in_f32(F.layer_norm, [x, normalized_shape, weight, bias], {"eps": eps}, torch.bfloat16)
    return F.layer_norm(x, normalized_shape, weight, bias, eps)


def rms_norm(x, normalized_shape, weight=None, eps=None):
    """torch 1.13 has no rms_norm: torch 2.4's definition, in f64, rounded once."""
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    dims = tuple(range(-len(normalized_shape), 0))
    y = upcast(x) * torch.rsqrt(upcast(x).pow(2).mean(dims, keepdim=True) + eps)
    return (y * upcast(weight) if weight is not None else y).to(x.dtype)


# Our names whose torch spelling differs (the rest are torch.<name>).
OPS = {
    "softmax": F.softmax, "log_softmax": F.log_softmax, "cross_entropy": F.cross_entropy,
    "layer_norm": layer_norm, "embedding": F.embedding, "linear": F.linear,
    "_matmul_t": lambda a, b, transpose_input=False, transpose_other=False: matmul_t(a, b, transpose_input, transpose_other),
    "slice": sliced, "to": lambda x, dtype=None: x.to(dtype) if dtype is not None else x.clone(),
    "max": lambda x, dim=None, keepdim=False: torch.max(x) if dim is None else torch.max(x, dim, keepdim=keepdim),
    "min": lambda x, dim=None, keepdim=False: torch.min(x) if dim is None else torch.min(x, dim, keepdim=keepdim),
    "amax": lambda x, dim=None, keepdim=False: torch.amax(x, dim=() if dim is None else dim, keepdim=keepdim),
    "amin": lambda x, dim=None, keepdim=False: torch.amin(x, dim=() if dim is None else dim, keepdim=keepdim),
    "expand": lambda x, size: x.expand(*size), "permute": lambda x, dims: x.permute(*dims),
    "view": lambda x, shape: x.reshape(shape), "contiguous": lambda x: x.contiguous(),
    "sum": lambda x, dim=None, keepdim=False, dtype=None: torch.sum(x, dtype=dtype) if dim is None else torch.sum(x, dim, keepdim=keepdim, dtype=dtype),
    "mean": lambda x, dim=None, keepdim=False, dtype=None: torch.mean(x, dtype=dtype) if dim is None else torch.mean(x, dim, keepdim=keepdim, dtype=dtype),
    "prod": lambda x, dim=None, keepdim=False, dtype=None: torch.prod(x, dtype=dtype) if dim is None else torch.prod(x, dim, keepdim=keepdim, dtype=dtype),
    "masked_fill": lambda x, mask, value: x.masked_fill(mask, value),
    "any": lambda x, dim=None, keepdim=False: torch.any(x) if dim is None else reduce_dims(torch.any, x, dim, keepdim),
    "all": lambda x, dim=None, keepdim=False: torch.all(x) if dim is None else reduce_dims(torch.all, x, dim, keepdim),
    "norm": lambda x, p=2, dim=None, keepdim=False: torch.norm(x, p=p, dim=dim, keepdim=keepdim),
    "silu": F.silu, "softplus": F.softplus, "gelu": F.gelu,
    "scaled_dot_product_attention": sdpa, "rms_norm": rms_norm, "nll_loss": F.nll_loss, "mse_loss": F.mse_loss,
    "one_hot": F.one_hot, "dropout": F.dropout,
    "repeat": lambda x, repeats: x.repeat(repeats),
    "baddbmm": lambda input, batch1, batch2, **kw: baddbmm(input, batch1, batch2, **kw),
    # torch 1.13 has no bf16 eye: the f32 one, rounded (0 and 1 are exact).
    "eye": lambda n, m=None, dtype=None: torch.eye(n, n if m is None else m, dtype=torch.float32 if dtype == torch.bfloat16 else dtype).to(dtype or torch.float32),
}


def reduce_dims(fn, x, dim, keepdim):
    """torch 1.13's any and all take one dim: a list is reduced one dim at a time, from the last."""
    for d in sorted([dim] if isinstance(dim, int) else dim, key=lambda d: d % max(x.dim(), 1), reverse=True):
        x = fn(x, d, keepdim=keepdim)
    return x


def in_f32(fn, args, kwargs, narrow):
    """torch 1.13 has no cpu kernel for some ops on f16 (or bf16): compute in f32, round once to it."""
    up = lambda v: v.float() if isinstance(v, torch.Tensor) and v.dtype == narrow else v
    out = fn(*[up(a) for a in args], **kwargs)
    return out.to(narrow) if out.is_floating_point() else out

def baddbmm(input, batch1, batch2, **kwargs):
    """torch 1.13's bf16 baddbmm on CPU rounds to bf16 after each product term: the reference is f32, rounded once.
    With beta 0, torch 1.13's CPU kernel scales its uninitialised result by 0 (NaN in about half the calls
    here); its documented result, which ignores input, is alpha * batch1 @ batch2."""
    if kwargs.get("beta", 1) == 0:
        return torch.bmm(batch1, batch2) * kwargs.get("alpha", 1)
    if batch1.dtype == torch.bfloat16:
        return in_f32(torch.baddbmm, [input, batch1, batch2], kwargs, torch.bfloat16)
    return torch.baddbmm(input, batch1, batch2, **kwargs)


def encode(out):
    flat = out.detach().reshape(-1)
    data = flat.tolist() if not flat.is_floating_point() else [x if math.isfinite(x) else str(x) for x in flat.double().tolist()]
    return {"dtype": NAMES[out.dtype], "shape": list(out.shape), "data": data}


def numbers(t):
    return [x if math.isfinite(x) else str(x) for x in t.detach().reshape(-1).double().tolist()]


def gradients(fn, args, kwargs, wrt, weights):
    """The gradients of sum(fn(*args, **kwargs) * weights) with respect to the arguments at the paths `wrt`."""
    leaves = []
    for path in wrt:
        holder, key = (args, path[0]) if len(path) == 1 else (args[path[0]], path[1])
        holder[key] = holder[key].detach().requires_grad_()
        leaves.append(holder[key])
    out, w = fn(*args, **kwargs), decode(weights)
    # several results (split's pieces): each weighted by its own
    loss = sum((o * x).sum() for o, x in zip(out, w)) if isinstance(out, (tuple, list)) else (out * w).sum()
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return [numbers(g if g is not None else torch.zeros_like(x)) for g, x in zip(grads, leaves)]


OPS["_sum_of_squares"] = lambda tensors: sum(t.double().pow(2).sum() for t in tensors)
OPS["pad"] = F.pad
OPS["max_pool2d"] = F.max_pool2d
OPS["avg_pool2d"] = F.avg_pool2d
OPS["conv1d"] = F.conv1d
OPS["conv2d"] = F.conv2d
OPS["group_norm"] = F.group_norm
OPS["unfold"] = lambda x, dimension, size, step: x.unfold(dimension, size, step)
OPS["alias"] = lambda x: x.view_as(x)
OPS["batch_norm"] = F.batch_norm
# batch_norm's running statistics after the call (updated in place in training): [running_mean, running_var]
OPS["batch_norm_stats"] = lambda x, rm, rv, *a, **k: (F.batch_norm(x, rm, rv, *a, **k), torch.cat([rm, rv]))[1]


def einsum(equation, operands):
    """torch 1.13's bf16 einsum on CPU runs bmm, which rounds to bf16 after each product term (as
    baddbmm's above): the reference is f32, rounded once, as our matmul accumulates."""
    if operands and operands[0].dtype == torch.bfloat16:
        return torch.einsum(equation, [o.float() for o in operands]).to(torch.bfloat16)
    return torch.einsum(equation, operands)


OPS["einsum"] = einsum

for line in sys.stdin:
    case = json.loads(line)
    try:
        op = case["op"]
        # In place: the tensor method, on the first argument, which is the result.
        fn = OPS.get(op) or (getattr(torch.Tensor, op) if op.endswith("_") else getattr(torch, op))
        args, kwargs = decode(case["args"]), {k: decode(v) for k, v in case["kwargs"].items()}
        if "wrt" in case:
            print(json.dumps({"id": case["id"], "grads": gradients(fn, args, kwargs, case["wrt"], case["weights"])}), flush=True)
            continue
        try:
            out = fn(*args, **kwargs)
        except RuntimeError as e:
            narrow = torch.float16 if "not implemented for 'Half'" in str(e) else torch.bfloat16 if "not implemented for 'BFloat16'" in str(e) else None
            if narrow is None:
                raise
            out = in_f32(fn, args, kwargs, narrow)
        answer = {"id": case["id"], "outs": [encode(o) for o in out]} if isinstance(out, (tuple, list)) else {"id": case["id"], **encode(out)}
    except Exception as e:  # the case reports it; the server goes on
        answer = {"id": case["id"], "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(answer), flush=True)
