#!/usr/bin/python3
"""Writes PyTorch's outputs on inputs with NaN, +Inf, -Inf and overflowing
values, for the test that ours propagate them the same way.

    /usr/bin/python3 scripts/make_nonfinite_golden.py tests/data/nonfinite_golden.safetensors

Case "caseNN.": x [6, 5] (row 0 finite, row 1 a NaN, row 2 +Inf, row 3 -Inf,
row 4 3e38 (finite, but sums overflow), row 5 finite), the layer's weights
under this project's names, and y; settings in __metadata__["caseNN"].
"""
import itertools
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import sublayer, write_safetensors  # noqa: E402
from make_train_golden import NATIVE  # noqa: E402

D, DFF = 5, 7


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/nonfinite_golden.safetensors"
    out, meta = {}, {"format": "pt", "torch": torch.__version__}
    torch.manual_seed(5)
    acts = ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu", "reglu"]
    norms = [("none", "layernorm"), ("post", "layernorm"), ("pre", "rmsnorm")]
    for i, (act, (norm, norm_type)) in enumerate(itertools.product(acts, norms)):
        c = dict(activation=act, norm=norm, norm_type=norm_type, eps=1e-5, bias=True)
        p = {"w1": torch.randn(DFF, D) * 0.5, "b1": torch.randn(DFF) * 0.1, "w2": torch.randn(D, DFF) * 0.5,
             "b2": torch.randn(D) * 0.1}
        if act in ("swiglu", "geglu", "reglu"):
            p["wg"], p["bg"] = torch.randn(DFF, D) * 0.5, torch.randn(DFF) * 0.1
        if norm != "none":
            p["gamma"] = 1 + 0.1 * torch.randn(D)
            if norm_type == "layernorm":
                p["beta"] = 0.1 * torch.randn(D)
        x = torch.randn(6, D)
        x[1, 2] = float("nan")
        x[2, 0] = float("inf")
        x[3, 4] = float("-inf")
        x[4, 1] = 3e38
        y = sublayer(c, p, x, None, None)
        prefix = f"case{i:02d}."
        for k, v in p.items():
            out[prefix + NATIVE[k]] = v
        out[prefix + "x"] = x
        out[prefix + "y"] = y
        meta[f"case{i:02d}"] = json.dumps(c)
    write_safetensors(path, out, meta)
    print(f"wrote {path}: {len(acts) * len(norms)} cases")


if __name__ == "__main__":
    main()
