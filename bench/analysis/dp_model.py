#!/usr/bin/env python3
"""The cost model of data parallelism for the FFN (docs/data_parallel.md).

Per training step of one FFN layer on a batch of T tokens, P ranks each
computing T/P tokens, every rank holding all weights (m·d·F of them, m = 2
matrices, 3 gated; biases and norm are noise):
  compute = 6·m·(T/P)·d·F / R           forward 2, backward 4 FLOPs per weight and token; R = FLOP/s per rank
  sum     = 2·(P−1)/P · m·d·F·s / B + 2·(P−1)·α·buckets   (reduce-scatter + all-gather per bucket: a ring all-reduce's bytes)
  E       = compute / (compute + sum) without overlap; with the sum hidden behind the backward, E → 1 while sum < ⅔ compute.
sum/compute ≈ (P−1)·s·R / (3·T·B): independent of d and F, shrinking with the batch.

  bench/analysis/dp_model.py                       the table for docs/data_parallel.md
  bench/analysis/dp_model.py --check R B T         this machine's P=2 prediction: R GFLOP/s per rank, B GB/s, T tokens
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--check", nargs=3, type=float, metavar=("R_GFLOPS", "B_GBS", "TOKENS"))
a = p.parse_args()


def times(P, T, d, F, R, B, alpha, s=4, m=2, buckets=6):
    compute = 6 * m * (T / P) * d * F / R
    comm = 2 * (P - 1) / P * m * d * F * s / B + 2 * (P - 1) * alpha * buckets if P > 1 else 0.0
    return compute, comm


if a.check:
    R, B, T = a.check[0] * 1e9, a.check[1] * 1e9, int(a.check[2])
    c, s = times(2, T, 512, 2048, R, B, 2e-6)
    one, _ = times(1, T, 512, 2048, 2 * R, B, 0)
    print(f"P=2, T={T}, 512 -> 2048: compute {c*1e3:.1f} ms, sum {s*1e3:.2f} ms per step; "
          f"predicted 2x1 / 1x2 = {one / (c + s):.3f}")
else:
    nets = [("CPU node, fp32 (3 TFLOP/s achieved per rank), 100 Gb/s Ethernet", 3e12, 12.5e9, 5e-6),
            ("GPU (H100), bf16 weights and gradients (600 TFLOP/s achieved), 100 Gb/s Ethernet", 600e12, 12.5e9, 5e-6),
            ("GPU (H100), bf16 (600 TFLOP/s achieved), NVLink-class (450 GB/s)", 600e12, 450e9, 2e-6)]
    for name, R, B, alpha in nets:
        s = 2 if "bf16" in name else 4
        print(f"\n### {name}\n")
        print("| tokens per batch T | P=8 E | P=16 E | P=64 E | sum/compute at P=64 |")
        print("|---|---|---|---|---|")
        for T in (4096, 65536, 1048576):
            row = []
            for P in (8, 16, 64):
                c, m = times(P, T, 4096, 16384, R, B, alpha, s)
                row.append(c / (c + m))
            c, m = times(64, T, 4096, 16384, R, B, alpha, s)
            print(f"| {T} | {row[0]:.2f} | {row[1]:.2f} | {row[2]:.2f} | {m / c:.2f} |")
