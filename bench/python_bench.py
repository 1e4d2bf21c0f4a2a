"""Benchmarks of the Python package (not tests): issue 13's two figures.

  1. Binding overhead at T=1: ffn.Layer.forward from Python against the same
     call timed inside C++ (`ffn bench --tokens 1 --json`), 512 -> 2048 ReLU
     post-LN, one thread, medians of many calls.
  2. ffn.torch.FeedForward forward+backward at T=4096 against PyTorch's own
     CPU layers (nn.Linear, ReLU, nn.LayerNorm: the FFN half of
     nn.TransformerEncoderLayer) on the same threads, alternating, medians.

  PYTHONPATH=build/python .venv/bin/python bench/python_bench.py [--ffn build/bin/ffn] [--threads N]
"""
import argparse
import json
import platform
import statistics
import subprocess
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

import ffn
from ffn.torch import FeedForward


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def per_call(fn, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ffn", default="build/bin/ffn")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    print(f"python_bench: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_name()}, "
          f"torch {torch.__version__}, ffn {ffn.__version__}, {a.threads} threads")

    # 1. Binding overhead at T=1 (one thread on both sides): at the paper's
    # size, and on a tiny layer where the call itself costs ~1 us so the
    # overhead is not lost in run-to-run noise.
    for d, f in ((512, 2048), (16, 32)):
        layer = ffn.init(ffn.Config(d_model=d, d_ff=f), seed=0)
        x1 = np.random.default_rng(0).uniform(-1, 1, (1, d)).astype(np.float32)
        out = np.empty_like(x1)
        calls = 500 if d == 512 else 20000
        py, py_out, cpp = [], [], []
        for _ in range(a.rounds):
            py.append(per_call(lambda: layer.forward(x1, threads=1), calls))
            py_out.append(per_call(lambda: layer.forward(x1, threads=1, out=out), calls))
            r = subprocess.run([a.ffn, "bench", "--tokens", "1", "--d-model", str(d), "--d-ff", str(f), "--threads",
                                "1", "--repeats", str(calls), "--warmup", "50", "--json"],
                               capture_output=True, text=True, check=True)
            cpp.append(json.loads(r.stdout)["median_s"])
        m_py, m_out, m_cpp = (statistics.median(v) * 1e6 for v in (py, py_out, cpp))
        print(f"T=1 forward {d} -> {f}, 1 thread: C++ {m_cpp:.2f} us, Python {m_py:.2f} us "
              f"(+{m_py - m_cpp:.2f} us), Python with out= {m_out:.2f} us (+{m_out - m_cpp:.2f} us)")

    # 2. FeedForward forward+backward at T=4096 against PyTorch's layers.
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0)
    ours = FeedForward.from_torch(ref, threads=a.threads)
    x = torch.randn(4096, 512)

    def torch_step():
        xx = x.clone().requires_grad_(True)
        y = ref.norm2(xx + ref.linear2(F.relu(ref.linear1(xx))))
        y.backward(torch.ones_like(y))

    def ffn_step():
        xx = x.clone().requires_grad_(True)
        y = ours(xx)
        y.backward(torch.ones_like(y))

    for f in (torch_step, ffn_step):
        f()
    t_torch, t_ffn = [], []
    for _ in range(a.rounds):
        t_torch.append(per_call(torch_step, 3))
        t_ffn.append(per_call(ffn_step, 3))
    mt, mf = statistics.median(t_torch) * 1e3, statistics.median(t_ffn) * 1e3
    flops = 3 * 2 * 2 * 4096 * 512 * 2048
    print(f"T=4096 forward+backward, {a.threads} threads: PyTorch {mt:.1f} ms ({flops / mt * 1e-6:.0f} GFLOP/s), "
          f"ffn.torch.FeedForward {mf:.1f} ms ({flops / mf * 1e-6:.0f} GFLOP/s): {mt / mf:.2f}x")


if __name__ == "__main__":
    main()
