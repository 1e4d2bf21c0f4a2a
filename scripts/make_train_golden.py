#!/usr/bin/python3
"""Writes the PyTorch golden data for the training tests.

Run with Debian's interpreter and python3-torch:
    /usr/bin/python3 scripts/make_train_golden.py tests/data/train_golden.safetensors

Contents (float32; labels stored as float32 integers):
    headN.y, headN.labels, headN.weight, headN.bias     an output head and its input
    headN.loss, headN.dy, headN.grad_weight, headN.grad_bias
        F.cross_entropy(F.linear(y, weight, bias), labels) and its gradients
        (head1 has logits in the hundreds: the log-sum-exp path must not overflow)
    runN.x, runN.targets (mse) or runN.labels (xent)     24 rows
    runN.<param>            initial layer weights, this project's names (linear1.weight, ...)
    runN.head.weight/bias   initial output head (xent)
    runN.losses [20]        loss of each step, before its update
    runN.final.<param>      layer weights after the 20 steps
Step s trains on rows 8*(s % 3) .. 8*(s % 3) + 7 (no shuffling), with the
torch.optim optimizer named in __metadata__["runN"] (JSON with the layer's
settings too).
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import linear_params, sublayer, write_safetensors  # noqa: E402

NATIVE = dict(w1="linear1.weight", b1="linear1.bias", wg="gate.weight", bg="gate.bias", w2="linear2.weight",
              b2="linear2.bias", gamma="norm.weight", beta="norm.bias")

RUNS = [
    dict(activation="relu", norm="post", norm_type="layernorm", bias=True, loss="xent", vocab=5,
         optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=1e-3),
    dict(activation="relu", norm="none", norm_type="layernorm", bias=True, loss="mse",
         optimizer="adamw", lr=1e-2, momentum=0.0, weight_decay=1e-2),
    dict(activation="swiglu", norm="pre", norm_type="rmsnorm", bias=False, loss="xent", vocab=7,
         optimizer="adam", lr=3e-3, momentum=0.0, weight_decay=1e-4),
    dict(activation="gelu", norm="post", norm_type="layernorm", bias=True, loss="mse",
         optimizer="sgd", lr=0.05, momentum=0.0, weight_decay=0.0),
]
D, DFF, ROWS, STEPS, BATCH = 8, 16, 24, 20, 8


def head_cases(out):
    g = torch.Generator().manual_seed(7)
    for i, scale in enumerate([1.0, 100.0]):
        t, d, v = 7, 6, 5
        y = (torch.randn(t, d, generator=g) * scale).requires_grad_()
        w = (torch.rand(v, d, generator=g) * 2 - 1).requires_grad_()
        b = (torch.rand(v, generator=g) * 2 - 1).requires_grad_()
        labels = torch.randint(0, v, (t,), generator=g)
        loss = F.cross_entropy(F.linear(y, w, b), labels)
        loss.backward()
        p = f"head{i}."
        out.update({p + "y": y.detach(), p + "labels": labels.float(), p + "weight": w.detach(),
                    p + "bias": b.detach(), p + "loss": loss.detach().reshape(1), p + "dy": y.grad,
                    p + "grad_weight": w.grad, p + "grad_bias": b.grad})


def run_case(i, c, out, meta):
    torch.manual_seed(100 + i)
    cfg = dict(c, eps=1e-5)
    gated = c["activation"] in ("swiglu", "geglu", "reglu")
    p = linear_params(D, DFF, c["bias"], gated)
    if c["norm"] != "none":
        p["gamma"] = torch.nn.Parameter(1 + 0.1 * torch.randn(D))
        if c["norm_type"] == "layernorm":
            p["beta"] = torch.nn.Parameter(0.1 * torch.randn(D))
    params = list(p.values())
    x = torch.randn(ROWS, D)
    prefix = f"run{i}."
    for k, v in p.items():
        out[prefix + NATIVE[k]] = v.detach().clone()
    out[prefix + "x"] = x
    head = None
    if c["loss"] == "xent":
        head = torch.nn.Linear(D, c["vocab"])
        params += [head.weight, head.bias]
        out[prefix + "head.weight"] = head.weight.detach().clone()
        out[prefix + "head.bias"] = head.bias.detach().clone()
        target = torch.randint(0, c["vocab"], (ROWS,))
        out[prefix + "labels"] = target.float()
    else:
        target = torch.randn(ROWS, D)
        out[prefix + "targets"] = target
    if c["optimizer"] == "sgd":
        opt = torch.optim.SGD(params, lr=c["lr"], momentum=c["momentum"], weight_decay=c["weight_decay"])
    elif c["optimizer"] == "adam":
        opt = torch.optim.Adam(params, lr=c["lr"], weight_decay=c["weight_decay"])
    else:
        opt = torch.optim.AdamW(params, lr=c["lr"], weight_decay=c["weight_decay"])
    losses = []
    for s in range(STEPS):
        rows = slice(BATCH * (s % 3), BATCH * (s % 3) + BATCH)
        opt.zero_grad()
        y = sublayer(cfg, p, x[rows], None, None)
        if head is not None:
            loss = F.cross_entropy(head(y), target[rows])
        else:
            loss = F.mse_loss(y, target[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    out[prefix + "losses"] = torch.tensor(losses)
    for k, v in p.items():
        out[prefix + "final." + NATIVE[k]] = v.detach().clone()
    meta[f"run{i}"] = json.dumps(cfg)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/train_golden.safetensors"
    out, meta = {}, {"format": "pt", "torch": torch.__version__}
    head_cases(out)
    for i, c in enumerate(RUNS):
        run_case(i, c, out, meta)
    write_safetensors(path, out, meta)
    print(f"wrote {path}: {len(RUNS)} training runs, 2 head cases, {len(out)} tensors")


if __name__ == "__main__":
    main()
