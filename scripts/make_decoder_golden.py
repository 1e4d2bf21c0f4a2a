#!/usr/bin/python3
"""Writes the golden reference cases for the Transformer decoder, computed by
PyTorch's own modules in float64.

Run with Debian's interpreter and python3-torch:
    /usr/bin/python3 scripts/make_decoder_golden.py tests/data/decoder_golden.safetensors

Every case lives in the one safetensors file (float32 values, little endian)
under the prefix "caseNNN.":
    caseNNN.x               target input [B, T, d]; NaN at padding (t >= lengths[b])
    caseNNN.memory          memory [B, S, d]; NaN at padding (s >= memory_lengths[b])
    caseNNN.dy              dL/dy [B, T, d] (NaN at padding)
    caseNNN.y               output [B, T, d] (zeros at padding)
    caseNNN.grad_input      dL/dx (zeros at padding)
    caseNNN.grad_memory     dL/dmemory (zeros at padding)
    caseNNN.lengths, caseNNN.memory_lengths   (float32 copies) when the case has them
    caseNNN.<param>, caseNNN.grad.<param>     under PyTorch's state_dict names
Kind "decoder": nn.TransformerDecoder(nn.TransformerDecoderLayer(d, h, F,
dropout=0, activation, layer_norm_eps=eps, batch_first=True, norm_first), N,
norm=LayerNorm(d, eps) if final_norm), y = dec(x, memory, tgt_mask=causal,
tgt_key_padding_mask, memory_key_padding_mask); "layer": one
nn.TransformerDecoderLayer (its names have no "layers.N."). Kind
"transformer": a whole nn.Transformer(d, h, E, N, F, dropout=0, ...), x is
then the target and memory the source ("src"), y = model(src, x, tgt_mask=causal,
src_key_padding_mask, tgt_key_padding_mask, memory_key_padding_mask),
grad_memory is dL/dsrc. Settings are JSON in __metadata__["caseNNN"].

The float32 inputs and parameters are exact in float64; the modules compute in
float64 (.double()), so the file's y and gradients are float64 results
rounded once. Parameters are re-drawn as in make_encoder_golden.py. The script
checks that valid positions do not depend on padding values and recomputes
each decoder forward in plain numpy.
"""
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import write_safetensors  # noqa: E402
from make_encoder_golden import randomize, np_attention, np_layer_norm, read_safetensors  # noqa: E402


def causal_mask(T):
    return torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), diagonal=1)


def build(c):
    d, h, F = c["d_model"], c["heads"], c["d_ff"]
    kw = dict(dropout=0.0, activation=c["activation"], layer_norm_eps=c["eps"], batch_first=True,
              norm_first=c["norm_first"])
    if c["kind"] == "transformer":
        return torch.nn.Transformer(d, h, c["encoder_layers"], c["layers"], F, **kw)
    layer = torch.nn.TransformerDecoderLayer(d, h, F, **kw)
    if c["kind"] == "layer":
        return layer
    norm = torch.nn.LayerNorm(d, eps=c["eps"]) if c["final_norm"] else None
    return torch.nn.TransformerDecoder(layer, c["layers"], norm=norm)


def pad_mask(lengths, S):
    return torch.arange(S)[None, :] >= torch.tensor(lengths)[:, None]


def run(c, module, x_in, m_in, dy):
    T, S = c["seq"], c["memory_seq"]
    tpad = pad_mask(c["lengths"], T) if c["has_lengths"] else None
    mpad = pad_mask(c["memory_lengths"], S) if c["has_memory_lengths"] else None
    mask = causal_mask(T) if c["causal"] else None
    module.zero_grad(set_to_none=True)
    x = x_in.clone().requires_grad_()
    m = m_in.clone().requires_grad_()
    if c["kind"] == "transformer":
        y = module(m, x, tgt_mask=mask, src_key_padding_mask=mpad, tgt_key_padding_mask=tpad,
                   memory_key_padding_mask=mpad)
    else:
        y = module(x, m, tgt_mask=mask, tgt_key_padding_mask=tpad, memory_key_padding_mask=mpad)
    (y * dy).sum().backward()
    grads = {n: t.grad.detach().clone() for n, t in module.named_parameters()}
    return y.detach(), x.grad.detach(), m.grad.detach(), grads


def make_case(idx, c, gen, out, meta):
    B, T, S, d = c["batch"], c["seq"], c["memory_seq"], c["d_model"]
    c["has_lengths"] = "lengths" in c
    c["has_memory_lengths"] = "memory_lengths" in c
    c.setdefault("lengths", [T] * B)
    c.setdefault("memory_lengths", [S] * B)
    tv = (~pad_mask(c["lengths"], T))[:, :, None]
    mv = (~pad_mask(c["memory_lengths"], S))[:, :, None]

    module = build(c)
    randomize(module, gen)
    module.double().train()
    x = torch.randn(B, T, d, generator=gen).double()
    m = torch.randn(B, S, d, generator=gen).double()
    dy = torch.randn(B, T, d, generator=gen).double() * tv
    y, gx, gm, grads = run(c, module, x, m, dy)
    for name, t in [("y", y), ("grad_input", gx), ("grad_memory", gm)]:
        assert torch.isfinite(t).all(), f"case{idx:03d}: torch's {name} is not finite"

    if c["has_lengths"] or c["has_memory_lengths"]:
        x2 = torch.where(tv, x, 100 * torch.randn(B, T, d, generator=gen).double())
        m2 = torch.where(mv, m, 100 * torch.randn(B, S, d, generator=gen).double())
        y2, gx2, gm2, grads2 = run(c, module, x2, m2, dy)
        assert torch.allclose(y * tv, y2 * tv, rtol=0, atol=1e-10), "y depends on padding"
        assert torch.allclose(gx * tv, gx2 * tv, rtol=0, atol=1e-10), "grad_input depends on padding"
        assert torch.allclose(gm * mv, gm2 * mv, rtol=0, atol=1e-10), "grad_memory depends on padding"
        for n in grads:
            assert torch.allclose(grads[n], grads2[n], rtol=0, atol=1e-9), f"grad.{n} depends on padding"

    nan = torch.tensor(float("nan"), dtype=torch.float64)
    pre = f"case{idx:03d}."
    f32 = lambda t: t.float()  # noqa: E731
    out[pre + "x"] = f32(torch.where(tv, x, nan))
    out[pre + "memory"] = f32(torch.where(mv, m, nan))
    out[pre + "dy"] = f32(torch.where(tv, dy, nan))
    out[pre + "y"] = f32(y * tv)
    out[pre + "grad_input"] = f32(gx * tv)
    out[pre + "grad_memory"] = f32(gm * mv)
    if c["has_lengths"]:
        out[pre + "lengths"] = torch.tensor(c["lengths"], dtype=torch.float32)
    if c["has_memory_lengths"]:
        out[pre + "memory_lengths"] = torch.tensor(c["memory_lengths"], dtype=torch.float32)
    for n, t in module.state_dict().items():
        out[pre + n] = f32(t)
        out[pre + "grad." + n] = f32(grads[n])
    keys = ["kind", "d_model", "heads", "d_ff", "layers", "norm_first", "activation", "eps", "final_norm", "causal",
            "batch", "seq", "memory_seq", "has_lengths", "has_memory_lengths", "encoder_layers"]
    meta[f"case{idx:03d}"] = json.dumps({k: c[k] for k in keys}, sort_keys=True)


def cases():
    base = dict(kind="decoder", norm_first=False, activation="relu", eps=1e-5, final_norm=False, causal=True, layers=1,
                encoder_layers=0)
    yield dict(base, d_model=16, heads=4, d_ff=40, batch=3, seq=6, memory_seq=5, lengths=[6, 1, 3],
               memory_lengths=[5, 2, 1])
    yield dict(base, d_model=15, heads=3, d_ff=23, batch=2, seq=7, memory_seq=9, norm_first=True, activation="gelu",
               layers=2, final_norm=True, memory_lengths=[9, 4])
    yield dict(base, d_model=21, heads=7, d_ff=33, batch=2, seq=40, memory_seq=13, layers=3, lengths=[40, 17],
               memory_lengths=[1, 13])  # head dim 3
    yield dict(base, d_model=12, heads=1, d_ff=19, batch=1, seq=1, memory_seq=1)
    yield dict(base, d_model=18, heads=2, d_ff=30, batch=2, seq=5, memory_seq=30, causal=False, eps=1e-6,
               norm_first=True, lengths=[5, 2])
    yield dict(base, d_model=32, heads=4, d_ff=64, batch=1, seq=100, memory_seq=37, activation="gelu")  # > 96 rows
    yield dict(base, kind="layer", d_model=20, heads=5, d_ff=28, batch=2, seq=6, memory_seq=8, lengths=[6, 3],
               memory_lengths=[8, 5])
    yield dict(base, kind="layer", d_model=14, heads=2, d_ff=22, batch=2, seq=4, memory_seq=3, norm_first=True,
               activation="gelu")
    # Whole nn.Transformer models (encoder and decoder stacks, both with final norms).
    tr = dict(base, kind="transformer", final_norm=True)
    yield dict(tr, d_model=16, heads=4, d_ff=24, layers=2, encoder_layers=2, batch=2, seq=7, memory_seq=9,
               lengths=[7, 3], memory_lengths=[9, 4])
    yield dict(tr, d_model=15, heads=5, d_ff=27, layers=1, encoder_layers=3, batch=3, seq=5, memory_seq=6,
               norm_first=True, activation="gelu", memory_lengths=[6, 1, 3])


def np_decoder_layer(x, mem, p, lp, c):
    erf = np.vectorize(math.erf)

    def ff(v):
        z = v @ p[lp + "linear1.weight"].T + p[lp + "linear1.bias"]
        z = np.maximum(z, 0) if c["activation"] == "relu" else 0.5 * z * (1 + erf(z / math.sqrt(2)))
        return z @ p[lp + "linear2.weight"].T + p[lp + "linear2.bias"]

    def n(v, k):
        return np_layer_norm(v, p[lp + k + ".weight"], p[lp + k + ".bias"], c["eps"])

    def sa(v):
        return np_attention(v, p, lp + "self_attn.", c["heads"], c["causal"])

    def ca(v):
        pre = lp + "multihead_attn."
        d = v.shape[1]
        W, b = p[pre + "in_proj_weight"], p[pre + "in_proj_bias"]
        q = v @ W[:d].T + b[:d]
        k = mem @ W[d:2 * d].T + b[d:2 * d]
        vv = mem @ W[2 * d:].T + b[2 * d:]
        dh = d // c["heads"]
        o = np.zeros_like(q)
        for hd in range(c["heads"]):
            sl = slice(hd * dh, (hd + 1) * dh)
            s = q[:, sl] @ k[:, sl].T / math.sqrt(dh)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            o[:, sl] = (s / s.sum(axis=1, keepdims=True)) @ vv[:, sl]
        return o @ p[pre + "out_proj.weight"].T + p[pre + "out_proj.bias"]

    if c["norm_first"]:
        x = x + sa(n(x, "norm1"))
        x = x + ca(n(x, "norm2"))
        return x + ff(n(x, "norm3"))
    x = n(x + sa(x), "norm1")
    x = n(x + ca(x), "norm2")
    return n(x + ff(x), "norm3")


def self_check(path):
    t, meta = read_safetensors(path)
    worst = {}
    for i in range(int(meta["cases"])):
        pre = f"case{i:03d}."
        c = json.loads(meta[f"case{i:03d}"])
        if c["kind"] == "transformer":
            continue
        B, T = c["batch"], c["seq"]
        lengths = t[pre + "lengths"].astype(int) if c["has_lengths"] else [T] * B
        mlengths = t[pre + "memory_lengths"].astype(int) if c["has_memory_lengths"] else [c["memory_seq"]] * B
        err = 0.0
        for b in range(B):
            x = t[pre + "x"][b, :lengths[b]]
            mem = t[pre + "memory"][b, :mlengths[b]]
            for layer in range(c["layers"]):
                lp = pre if c["kind"] == "layer" else f"{pre}layers.{layer}."
                x = np_decoder_layer(x, mem, t, lp, c)
            if c["final_norm"]:
                x = np_layer_norm(x, t[pre + "norm.weight"], t[pre + "norm.bias"], c["eps"])
            err = max(err, float(np.abs(x - t[pre + "y"][b, :lengths[b]]).max()))
        worst[i] = err
        assert err < 1e-5, f"case{i:03d}: numpy differs from torch by {err}"
    return worst


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/decoder_golden.safetensors"
    torch.manual_seed(20261124)
    gen = torch.Generator().manual_seed(32)
    out, meta = {}, {}
    n = 0
    for i, c in enumerate(cases()):
        make_case(i, c, gen, out, meta)
        n += 1
    meta["cases"] = str(n)
    meta["generator"] = f"scripts/make_decoder_golden.py, torch {torch.__version__}, float64"
    write_safetensors(path, out, meta)
    print(f"wrote {n} cases to {path}")
    worst = self_check(path)
    print("self-check (numpy forward vs the file's y, max abs error): " +
          ", ".join(f"case{i:03d} {e:.2e}" for i, e in worst.items()))


if __name__ == "__main__":
    main()
