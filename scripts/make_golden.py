#!/usr/bin/python3
"""Writes the golden reference cases for the tests, computed by PyTorch.

Run with Debian's interpreter and python3-torch:
    /usr/bin/python3 scripts/make_golden.py tests/data/golden.safetensors

Every case lives in the one safetensors file under the prefix "caseNNN.":
    caseNNN.x                 input ([T, d], [B, S, d] or [B, d, S] for ncw);
                              padding positions hold NaN: they must never be read
    caseNNN.dy                dL/dy, same shape (NaN at padding: must be ignored)
    caseNNN.y                 output (zeros at padding)
    caseNNN.grad_input        dL/dx (zeros at padding)
    caseNNN.lengths           sequence lengths (float32 copy), when the case has them
    caseNNN.<param>           weights, under the case's naming scheme
    caseNNN.grad.<param>      dL/d<param>
and its settings are a JSON string in __metadata__["caseNNN"].

Cases: every activation x bias x norm placement x norm type x layout x
lengths, plus training-mode dropout (masks from the same Philox4x32-10 rule
as the library, reimplemented below in numpy), odd sizes, and checkpoints
named like PyTorch's TransformerEncoderLayer (computed with that module's
own norm2 and _ff_block) and Hugging Face LLaMA. Non-gated ncw cases without
a norm are computed with torch.nn.functional.conv1d (kernel size 1).
"""
import itertools
import json
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

ACTIVATIONS = ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu", "reglu"]
GATED = {"swiglu": "silu", "geglu": "gelu", "reglu": "relu"}

# ---- Philox4x32-10 and the dropout rule (must match src/core/philox.hpp) -------

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK32 = np.uint64(0xFFFFFFFF)


def philox(c0, c1, c2, c3, k0, k1):
    c0, c1, c2, c3 = (np.asarray(v, dtype=np.uint64) for v in (c0, c1, c2, c3))
    for _ in range(10):
        p0 = M0 * c0
        p1 = M1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        k0 = (k0 + W0) & 0xFFFFFFFF
        k1 = (k1 + W1) & 0xFFFFFFFF
    return c0, c1, c2, c3


def random_bits(seed, stream, index):
    index = np.asarray(index, dtype=np.uint64)
    block = index >> np.uint64(2)
    words = philox(block & MASK32, block >> np.uint64(32), np.full_like(block, stream), np.zeros_like(block),
                   seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)
    sel = (index & np.uint64(3)).astype(np.int64)
    return np.choose(sel, words)


def dropout_factor(p, seed, stream, index):
    """0 or 1/(1-p) per element, as DropoutRule::factor."""
    if p <= 0:
        return np.ones(np.shape(index), dtype=np.float32)
    if p >= 1:
        return np.zeros(np.shape(index), dtype=np.float32)
    threshold = int(float(np.float32(p)) * 4294967296.0)  # p as float32, widened, times 2^32, truncated
    bits = random_bits(seed, stream, index)
    scale = np.float32(1.0) / (np.float32(1.0) - np.float32(p))
    return np.where(bits < np.uint64(threshold), np.float32(0), scale).astype(np.float32)


assert [hex(int(v)) for v in philox(0, 0, 0, 0, 0, 0)] == ["0x6627e8d5", "0xe169c58d", "0xbc57ac4c", "0x9b00dbd8"]

# ---- the layer in PyTorch ----------------------------------------------------


def act(name, z):
    if name == "relu":
        return torch.relu(z)
    if name == "gelu":
        return F.gelu(z)
    if name == "gelu_tanh":
        return F.gelu(z, approximate="tanh")
    if name == "silu":
        return F.silu(z)
    raise ValueError(name)


def norm(kind, v, gamma, beta, eps):
    if kind == "layernorm":
        return F.layer_norm(v, (v.shape[-1],), gamma, beta, eps)
    return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * gamma


def sublayer(c, p, x, mask_h, mask_o):
    """x: [N, d] valid tokens. Returns y: [N, d]."""
    inp = norm(c["norm_type"], x, p.get("gamma"), p.get("beta"), c["eps"]) if c["norm"] == "pre" else x
    z1 = F.linear(inp, p["w1"], p.get("b1"))
    if c["activation"] in GATED:
        h = act(GATED[c["activation"]], F.linear(inp, p["wg"], p.get("bg"))) * z1
    else:
        h = act(c["activation"], z1)
    if mask_h is not None:
        h = h * mask_h
    o = F.linear(h, p["w2"], p.get("b2"))
    if mask_o is not None:
        o = o * mask_o
    if c["norm"] == "none":
        return o
    if c["norm"] == "pre":
        return x + o
    return norm(c["norm_type"], x + o, p.get("gamma"), p.get("beta"), c["eps"])


NAMES = {
    "native": dict(w1="linear1.weight", b1="linear1.bias", wg="gate.weight", bg="gate.bias", w2="linear2.weight",
                   b2="linear2.bias", gamma="norm.weight", beta="norm.bias"),
    "torch": dict(w1="linear1.weight", b1="linear1.bias", w2="linear2.weight", b2="linear2.bias",
                  gamma="norm2.weight", beta="norm2.bias"),
    "llama": dict(w1="mlp.up_proj.weight", wg="mlp.gate_proj.weight", w2="mlp.down_proj.weight",
                  gamma="post_attention_layernorm.weight"),
}


def linear_params(d, f, bias, gated):
    """W1, W2 (and Wg) with nn.Linear's initialization, created in the order
    linear1, linear2, gate (the order fixes the random draws): {"w1", "w2",
    "b1", "b2", "wg", "bg"} as present."""
    lin1 = torch.nn.Linear(d, f, bias=bias)
    lin2 = torch.nn.Linear(f, d, bias=bias)
    p = {"w1": lin1.weight, "w2": lin2.weight}
    if bias:
        p["b1"], p["b2"] = lin1.bias, lin2.bias
    if gated:
        gate = torch.nn.Linear(d, f, bias=bias)
        p["wg"] = gate.weight
        if bias:
            p["bg"] = gate.bias
    return p


def make_case(idx, c, gen, out, meta):
    d, f = c["d_model"], c["d_ff"]
    B, S = c["batch"], c["seq"]
    gated = c["activation"] in GATED
    # Parameters: nn.Linear's distribution, a norm with non-trivial γ, β.
    p = linear_params(d, f, c["bias"], gated)
    module = None
    if c["naming"] == "torch":
        module = torch.nn.TransformerEncoderLayer(d, 1, dim_feedforward=f, dropout=0.0,
                                                  activation="gelu" if c["activation"] == "gelu" else "relu",
                                                  norm_first=c["norm"] == "pre", layer_norm_eps=c["eps"])
        module.eval()
        p = {"w1": module.linear1.weight, "b1": module.linear1.bias, "w2": module.linear2.weight,
             "b2": module.linear2.bias}
        with torch.no_grad():
            module.norm2.weight.copy_(1 + 0.1 * torch.randn(d, generator=gen))
            module.norm2.bias.copy_(0.1 * torch.randn(d, generator=gen))
        p["gamma"], p["beta"] = module.norm2.weight, module.norm2.bias
    elif c["norm"] != "none":
        p["gamma"] = (1 + 0.1 * torch.randn(d, generator=gen)).requires_grad_()
        if c["norm_type"] == "layernorm":
            p["beta"] = (0.1 * torch.randn(d, generator=gen)).requires_grad_()
    for t in p.values():
        t.requires_grad_()

    # Input in the file's layout; valid positions in (b, s) order.
    lengths = c.get("lengths") or [S] * B
    pos = [b * S + s for b in range(B) for s in range(lengths[b])]
    tokens = torch.randn(B, S, d, generator=gen)
    dy_tokens = torch.randn(B, S, d, generator=gen)
    x_valid = tokens.reshape(B * S, d)[pos].clone().requires_grad_()
    N = len(pos)
    mask_h = mask_o = None
    if c["training"]:
        posa = np.array(pos, dtype=np.uint64)[:, None]
        mask_h = torch.from_numpy(dropout_factor(c["dropout_hidden"], c["seed"], 1, posa * f + np.arange(f, dtype=np.uint64)))
        mask_o = torch.from_numpy(dropout_factor(c["dropout_output"], c["seed"], 2, posa * d + np.arange(d, dtype=np.uint64)))

    if module is not None:
        # The real module's feed-forward block and norm2.
        xin = x_valid[None]
        if c["norm"] == "pre":
            y_valid = (xin + module._ff_block(module.norm2(xin)))[0]
        else:
            y_valid = module.norm2(xin + module._ff_block(xin))[0]
    elif c["layout"] == "ncw" and c["norm"] == "none" and not gated and not c["training"]:
        # Conv1d with kernel size 1 on [1, d, N].
        xc = x_valid.t()[None]
        hc = act(c["activation"], F.conv1d(xc, p["w1"][:, :, None], p.get("b1")))
        y_valid = F.conv1d(hc, p["w2"][:, :, None], p.get("b2"))[0].t()
    else:
        y_valid = sublayer(c, p, x_valid, mask_h, mask_o)
    dy_valid = dy_tokens.reshape(B * S, d)[pos]
    (y_valid * dy_valid).sum().backward()

    def to_layout(valid_rows, pad_value):
        full = torch.full((B * S, d), pad_value)
        full[pos] = valid_rows.detach()
        full = full.reshape(B, S, d)
        if c["layout"] == "ncw":
            full = full.transpose(1, 2).contiguous()
        if c["rank"] == 2:
            full = full[0]
        return full

    pre = f"case{idx:03d}."
    nan = float("nan")
    out[pre + "x"] = to_layout(x_valid, nan if c.get("lengths") else 0.0)
    out[pre + "dy"] = to_layout(dy_valid, nan if c.get("lengths") else 0.0)
    out[pre + "y"] = to_layout(y_valid, 0.0)
    out[pre + "grad_input"] = to_layout(x_valid.grad, 0.0)
    if c.get("lengths"):
        out[pre + "lengths"] = torch.tensor(c["lengths"], dtype=torch.float32)
    names = NAMES[c["naming"]]
    for key, t in p.items():
        out[pre + names[key]] = t.detach()
        out[pre + "grad." + names[key]] = t.grad.detach()
    meta[f"case{idx:03d}"] = json.dumps(c, sort_keys=True)


def write_safetensors(path, tensors, metadata):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = tensors[name].detach().contiguous().numpy().astype("<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def cases():
    base = dict(eps=1e-5, training=False, dropout_hidden=0.0, dropout_output=0.0, seed=0, naming="native",
                batch=2, seq=4, rank=3)
    sizes = [(5, 7), (8, 16), (13, 33), (6, 24)]
    k = 0
    # The full product of the options.
    for a, bias, (nrm, ntype), layout, lengths in itertools.product(
            ACTIVATIONS, [True, False],
            [("none", "layernorm"), ("post", "layernorm"), ("post", "rmsnorm"), ("pre", "layernorm"), ("pre", "rmsnorm")],
            ["tokens", "ncw"], [False, True]):
        d, f = sizes[k % len(sizes)]
        c = dict(base, activation=a, bias=bias, norm=nrm, norm_type=ntype, layout=layout, d_model=d, d_ff=f)
        if lengths:
            c["lengths"] = [4, 2] if k % 2 else [3, 4]
        elif k % 3 == 0:
            c.update(rank=2, batch=1, seq=5)  # a 2-D input: [T, d] or [d, S]
        k += 1
        yield c
    # Training mode: hidden and output dropout with their masks.
    for a, nrm, layout in itertools.product(ACTIVATIONS, ["none", "post", "pre"], ["tokens"]):
        yield dict(base, activation=a, bias=True, norm=nrm, norm_type="layernorm", layout=layout, d_model=8, d_ff=40,
                   training=True, dropout_hidden=0.3, dropout_output=0.2, seed=1234567 + k, lengths=[4, 3])
        k += 1
    yield dict(base, activation="relu", bias=True, norm="post", norm_type="rmsnorm", layout="ncw", d_model=8,
               d_ff=40, training=True, dropout_hidden=0.5, dropout_output=0.0, seed=2**40 + 3)
    # Odd and extreme sizes.
    for a in ACTIVATIONS:
        yield dict(base, activation=a, bias=True, norm="post", norm_type="layernorm", layout="tokens", d_model=17,
                   d_ff=301, batch=1, seq=3)
    yield dict(base, activation="relu", bias=True, norm="none", norm_type="layernorm", layout="tokens", d_model=1,
               d_ff=1, batch=1, seq=6, rank=2)
    yield dict(base, activation="swiglu", bias=False, norm="pre", norm_type="rmsnorm", layout="tokens", d_model=1,
               d_ff=3, batch=3, seq=2)
    yield dict(base, activation="gelu", bias=True, norm="pre", norm_type="layernorm", layout="tokens", d_model=64,
               d_ff=256, batch=2, seq=9, eps=1e-3)
    # Checkpoints named like PyTorch TransformerEncoderLayer (its own modules) and LLaMA.
    for a, nrm in [("relu", "post"), ("gelu", "post"), ("relu", "pre")]:
        yield dict(base, activation=a, bias=True, norm=nrm, norm_type="layernorm", layout="tokens", d_model=12,
                   d_ff=20, naming="torch", lengths=[4, 1])
    yield dict(base, activation="swiglu", bias=False, norm="pre", norm_type="rmsnorm", layout="tokens", d_model=12,
               d_ff=32, naming="llama", eps=1e-6)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/golden.safetensors"
    torch.manual_seed(20261121)
    gen = torch.Generator().manual_seed(7)
    out, meta = {}, {}
    n = 0
    for i, c in enumerate(cases()):
        make_case(i, c, gen, out, meta)
        n += 1
    meta["cases"] = str(n)
    meta["generator"] = f"scripts/make_golden.py, torch {torch.__version__}"
    write_safetensors(path, out, meta)
    print(f"wrote {n} cases to {path}")


if __name__ == "__main__":
    main()
