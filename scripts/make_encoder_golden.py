#!/usr/bin/python3
"""Writes the golden reference cases for multi-head attention and the
Transformer encoder layer, computed by PyTorch's own modules.

Run with Debian's interpreter and python3-torch:
    /usr/bin/python3 scripts/make_encoder_golden.py tests/data/encoder_golden.safetensors

Every case lives in the one safetensors file (float32, little endian) under
the prefix "caseNNN.":
    caseNNN.x                 input [B, S, d]; padding positions (s >= lengths[b])
                              hold NaN: they must never be read
    caseNNN.dy                dL/dy [B, S, d] (NaN at padding: must be ignored)
    caseNNN.y                 output [B, S, d] (zeros at padding)
    caseNNN.grad_input        dL/dx [B, S, d] with L = sum(y * dy) (zeros at padding)
    caseNNN.lengths           sequence lengths [B] (float32 copy), when the case has them
    caseNNN.<param>           every parameter under its PyTorch state_dict name
    caseNNN.grad.<param>      dL/d<param>
and its settings are a JSON string in __metadata__["caseNNN"]:
    {"kind": "mha" | "encoder", "d_model", "heads", "d_ff" (encoder only),
     "layers" (encoder only), "norm_first", "activation", "eps", "final_norm",
     "causal", "batch", "seq", "has_lengths"}
(for kind "mha" the norm / activation settings are present but unused).

Modules (train mode, dropout 0.0, so deterministic; float32; autograd):
    mha:     nn.MultiheadAttention(d, h, dropout=0.0, bias=True, batch_first=True)
             y, _ = mha(x, x, x, key_padding_mask=pad, attn_mask=causal, need_weights=False)
             params: in_proj_weight [3d, d], in_proj_bias [3d], out_proj.weight, out_proj.bias
    encoder: nn.TransformerEncoder(nn.TransformerEncoderLayer(d, h, F, dropout=0.0,
             activation, layer_norm_eps=eps, batch_first=True, norm_first), N,
             norm=nn.LayerNorm(d, eps) if final_norm else None, enable_nested_tensor=False)
             y = enc(x, mask=causal, src_key_padding_mask=pad)
             params: layers.i.self_attn.{in_proj_weight, in_proj_bias, out_proj.weight,
             out_proj.bias}, layers.i.linear{1,2}.{weight,bias}, layers.i.norm{1,2}.{weight,bias},
             and norm.{weight,bias} when final_norm
pad is True at padding; causal = triu(full((S, S), -inf), diagonal=1). Every
parameter is re-drawn after construction (each layer differently): weights
U(-1/sqrt(fan_in), 1/sqrt(fan_in)), biases 0.1 N(0, 1), LayerNorm gamma
1 + 0.1 N(0, 1), beta 0.1 N(0, 1); x ~ N(0, 1), dy ~ N(0, 1) at valid positions.
PyTorch computes with finite random values at padding (NaN would poison its
masked bmm) and dy = 0 there; the script checks that the results at valid
positions do not depend on those padding values, and at the end reads the
file back and recomputes every case's forward pass in plain numpy.
"""
import json
import os
import math
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import write_safetensors  # noqa: E402  (the one safetensors writer of the golden scripts)


def causal_mask(S):
    return torch.triu(torch.full((S, S), float("-inf")), diagonal=1)


def build(c):
    d, h = c["d_model"], c["heads"]
    if c["kind"] == "mha":
        return torch.nn.MultiheadAttention(d, h, dropout=0.0, bias=True, batch_first=True)
    layer = torch.nn.TransformerEncoderLayer(d, h, c["d_ff"], dropout=0.0, activation=c["activation"],
                                             layer_norm_eps=c["eps"], batch_first=True, norm_first=c["norm_first"])
    norm = torch.nn.LayerNorm(d, eps=c["eps"]) if c["final_norm"] else None
    return torch.nn.TransformerEncoder(layer, c["layers"], norm=norm, enable_nested_tensor=False)


def randomize(module, gen):
    """Re-draws every parameter (TransformerEncoder deep-copies its layer, so
    all layers start out identical)."""
    with torch.no_grad():
        for name, t in module.named_parameters():
            leaf = name.split(".")[-2] if "." in name else ""
            if leaf.startswith("norm"):  # LayerNorm: norm1, norm2, norm
                if name.endswith("weight"):
                    t.copy_(1 + 0.1 * torch.randn(t.shape, generator=gen))
                else:
                    t.copy_(0.1 * torch.randn(t.shape, generator=gen))
            elif t.dim() == 2:
                bound = 1.0 / math.sqrt(t.shape[1])
                t.copy_((torch.rand(t.shape, generator=gen) * 2 - 1) * bound)
            else:
                t.copy_(0.1 * torch.randn(t.shape, generator=gen))


def run(c, module, x_in, dy):
    """Forward and backward; returns y, dL/dx and {name: dL/dparam}."""
    S = c["seq"]
    pad = None
    if c["has_lengths"]:
        pad = torch.arange(S)[None, :] >= torch.tensor(c["lengths"])[:, None]
    mask = causal_mask(S) if c["causal"] else None
    module.zero_grad(set_to_none=True)
    x = x_in.clone().requires_grad_()
    if c["kind"] == "mha":
        y, _ = module(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)
    else:
        y = module(x, mask=mask, src_key_padding_mask=pad)
    (y * dy).sum().backward()
    grads = {n: t.grad.detach().clone() for n, t in module.named_parameters()}
    return y.detach(), x.grad.detach(), grads


def make_case(idx, c, gen, out, meta):
    B, S, d = c["batch"], c["seq"], c["d_model"]
    c["has_lengths"] = "lengths" in c
    lengths = c.get("lengths", [S] * B)
    valid = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]  # [B, S]
    vmask = valid[:, :, None]

    module = build(c)
    randomize(module, gen)
    module.train()
    assert sorted(dict(module.named_parameters())) == sorted(module.state_dict())

    x = torch.randn(B, S, d, generator=gen)
    dy = torch.randn(B, S, d, generator=gen) * vmask
    y, gx, grads = run(c, module, x, dy)

    # The valid positions must not depend on the padding values.
    if c["has_lengths"]:
        x2 = torch.where(vmask, x, 100 * torch.randn(B, S, d, generator=gen))
        y2, gx2, grads2 = run(c, module, x2, dy)
        assert torch.allclose(y * vmask, y2 * vmask, rtol=0, atol=1e-6), "y depends on padding"
        assert torch.allclose(gx * vmask, gx2 * vmask, rtol=0, atol=1e-6), "grad_input depends on padding"
        for n in grads:
            assert torch.allclose(grads[n], grads2[n], rtol=0, atol=1e-5), f"grad.{n} depends on padding"
        c["pad_y_abs_max"] = float((y * ~vmask).abs().max())  # reported, not stored

    nan = torch.tensor(float("nan"))
    pre = f"case{idx:03d}."
    out[pre + "x"] = torch.where(vmask, x, nan)
    out[pre + "dy"] = torch.where(vmask, dy, nan)
    out[pre + "y"] = y * vmask
    out[pre + "grad_input"] = gx * vmask
    if c["has_lengths"]:
        out[pre + "lengths"] = torch.tensor(lengths, dtype=torch.float32)
    for n, t in module.state_dict().items():
        out[pre + n] = t.detach().clone()
        out[pre + "grad." + n] = grads[n]
    keys = ["kind", "d_model", "heads", "norm_first", "activation", "eps", "final_norm", "causal", "batch", "seq",
            "has_lengths"]
    if c["kind"] == "encoder":
        keys += ["d_ff", "layers"]
    meta[f"case{idx:03d}"] = json.dumps({k: c[k] for k in keys}, sort_keys=True)


def cases():
    base = dict(norm_first=False, activation="relu", eps=1e-5, final_norm=False, causal=False)
    mha = dict(base, kind="mha")
    enc = dict(base, kind="encoder", layers=1)
    # Multi-head attention alone.
    yield dict(mha, d_model=16, heads=4, batch=3, seq=7, lengths=[7, 1, 4])
    yield dict(mha, d_model=20, heads=1, batch=2, seq=5)
    yield dict(mha, d_model=24, heads=8, batch=2, seq=9, causal=True, lengths=[9, 3])  # head dim 3
    yield dict(mha, d_model=16, heads=2, batch=2, seq=1)
    yield dict(mha, d_model=32, heads=4, batch=1, seq=70, causal=True)  # crosses 64-row tiles
    # Whole encoder layers.
    yield dict(enc, d_model=16, heads=4, d_ff=40, batch=3, seq=6, lengths=[6, 1, 3])
    yield dict(enc, d_model=16, heads=2, d_ff=24, batch=2, seq=5, norm_first=True, activation="gelu")
    yield dict(enc, d_model=20, heads=5, d_ff=36, layers=2, final_norm=True, activation="gelu", batch=2, seq=7,
               lengths=[7, 2], causal=True)
    yield dict(enc, d_model=24, heads=3, d_ff=48, layers=2, final_norm=True, norm_first=True, batch=2, seq=1)
    yield dict(enc, d_model=32, heads=1, d_ff=64, batch=1, seq=70)
    yield dict(enc, d_model=12, heads=12, d_ff=20, norm_first=True, activation="gelu", batch=2, seq=4,
               lengths=[4, 2], causal=True)  # head dim 1
    yield dict(enc, d_model=16, heads=4, d_ff=32, activation="gelu", eps=1e-12, batch=2, seq=5)  # BERT's eps


# ---- self-check: read the file back and recompute in plain numpy ------------


def read_safetensors(path):
    with open(path, "rb") as fh:
        data = fh.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__")
    base = 8 + n
    tensors = {}
    for name, e in header.items():
        assert e["dtype"] == "F32"
        lo, hi = e["data_offsets"]
        tensors[name] = np.frombuffer(data[base + lo:base + hi], dtype="<f4").reshape(e["shape"]).astype(np.float64)
    return tensors, meta


def np_attention(x, p, pre, heads, causal):
    """x: [L, d] valid tokens of one sequence. softmax(Q K^T / sqrt(dh)) V per head."""
    L, d = x.shape
    dh = d // heads
    qkv = x @ p[pre + "in_proj_weight"].T + p[pre + "in_proj_bias"]
    q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
    o = np.zeros((L, d))
    for hd in range(heads):
        sl = slice(hd * dh, (hd + 1) * dh)
        s = q[:, sl] @ k[:, sl].T / math.sqrt(dh)
        if causal:
            s = np.where(np.triu(np.ones((L, L), dtype=bool), 1), -np.inf, s)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        o[:, sl] = (s / s.sum(axis=1, keepdims=True)) @ v[:, sl]
    return o @ p[pre + "out_proj.weight"].T + p[pre + "out_proj.bias"]


def np_layer_norm(x, g, b, eps):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def np_encoder(x, p, pre, c):
    erf = np.vectorize(math.erf)
    for i in range(c["layers"]):
        lp = f"{pre}layers.{i}."

        def sa(v):
            return np_attention(v, p, lp + "self_attn.", c["heads"], c["causal"])

        def ff(v):
            z = v @ p[lp + "linear1.weight"].T + p[lp + "linear1.bias"]
            z = np.maximum(z, 0) if c["activation"] == "relu" else 0.5 * z * (1 + erf(z / math.sqrt(2)))
            return z @ p[lp + "linear2.weight"].T + p[lp + "linear2.bias"]

        def n(v, k):
            return np_layer_norm(v, p[lp + k + ".weight"], p[lp + k + ".bias"], c["eps"])

        if c["norm_first"]:
            x = x + sa(n(x, "norm1"))
            x = x + ff(n(x, "norm2"))
        else:
            x = n(x + sa(x), "norm1")
            x = n(x + ff(x), "norm2")
    if c["final_norm"]:
        x = np_layer_norm(x, p[pre + "norm.weight"], p[pre + "norm.bias"], c["eps"])
    return x


def self_check(path):
    t, meta = read_safetensors(path)
    worst = {}
    for i in range(int(meta["cases"])):
        pre = f"case{i:03d}."
        c = json.loads(meta[f"case{i:03d}"])
        B, S, d = c["batch"], c["seq"], c["d_model"]
        lengths = t[pre + "lengths"].astype(int) if c["has_lengths"] else [S] * B
        assert t[pre + "x"].shape == (B, S, d)
        err = 0.0
        for b in range(B):
            L = lengths[b]
            xb = t[pre + "x"][b, :L]
            assert np.isfinite(xb).all()
            if c["has_lengths"]:
                assert np.isnan(t[pre + "x"][b, L:]).all() and np.isnan(t[pre + "dy"][b, L:]).all()
            assert (t[pre + "y"][b, L:] == 0).all() and (t[pre + "grad_input"][b, L:] == 0).all()
            if c["kind"] == "mha":
                yb = np_attention(xb, t, pre, c["heads"], c["causal"])
            else:
                yb = np_encoder(xb, t, pre, c)
            err = max(err, float(np.abs(yb - t[pre + "y"][b, :L]).max()))
        worst[i] = err
        tol = 1e-5 if c["kind"] == "mha" else 1e-4
        assert err < tol, f"case{i:03d} ({c['kind']}): numpy differs from torch by {err}"
    return worst


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/encoder_golden.safetensors"
    torch.manual_seed(20261207)
    np.random.seed(20261207)
    gen = torch.Generator().manual_seed(11)
    out, meta = {}, {}
    n = 0
    for i, c in enumerate(cases()):
        make_case(i, c, gen, out, meta)
        if "pad_y_abs_max" in c:
            print(f"case{i:03d}: torch's y at padding positions (discarded): max |y| = {c['pad_y_abs_max']:.3g}")
        n += 1
    meta["cases"] = str(n)
    meta["generator"] = f"scripts/make_encoder_golden.py, torch {torch.__version__}"
    write_safetensors(path, out, meta)
    print(f"wrote {n} cases to {path}")
    worst = self_check(path)
    print("self-check (numpy forward vs the file's y, max abs error): " +
          ", ".join(f"case{i:03d} {e:.2e}" for i, e in worst.items()))


if __name__ == "__main__":
    main()
