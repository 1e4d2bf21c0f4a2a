#!/usr/bin/env python3
"""The cost model of tensor parallelism for the FFN (docs/tensor_parallel.md).

Per forward of one FFN layer on T tokens, each of P ranks holding d_ff/P of
the hidden units (Megatron-LM's column- then row-parallel MLP):
  compute  = 2·k·T·d·F / (P·R)        k = 2 matrix products (3 for gated), R = FLOP/s per rank
  sum      = 2·(P−1)/P · T·d·s / B + 2·(P−1)·α    (ring all-reduce, or reduce-scatter + all-gather:
                                                  the same bytes), s bytes per element, B link bandwidth, α latency
  E        = compute / (compute + sum)   (no overlap), speedup = P·E.
Note sum/compute ≈ (P−1)·s·R / (k·F·B): independent of T and d except through F.

  bench/analysis/tp_model.py                 the table for docs/tensor_parallel.md
  bench/analysis/tp_model.py --check R B     this machine's P=2 prediction with a measured R (GFLOP/s per rank) and B (GB/s)
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--check", nargs=2, type=float, metavar=("R_GFLOPS", "B_GBS"))
p.add_argument("--tokens", type=int, default=4096)
a = p.parse_args()


def times(P, T, d, F, R, B, alpha, s, k=2):
    compute = 2 * k * T * d * F / (P * R)
    comm = 2 * (P - 1) / P * T * d * s / B + 2 * (P - 1) * alpha if P > 1 else 0.0
    return compute, comm


if a.check:
    R, B = a.check[0] * 1e9, a.check[1] * 1e9
    T, d, F = a.tokens, 512, 2048
    c1, _ = times(1, T, d, F, 2 * R, B, 0, 4)     # one process, 2 threads: 2 cores' worth
    c2, m2 = times(2, T, d, F, R, B, 0, 4)        # 2 ranks × 1 thread
    print(f"P=2 on this machine, T={T}, 512 -> 2048: one process {c1 * 1e3:.1f} ms; "
          f"2 ranks: compute {c2 * 1e3:.1f} ms + sum {m2 * 1e3:.2f} ms = {(c2 + m2) * 1e3:.1f} ms; "
          f"predicted ratio {c1 / (c2 + m2):.3f}")
    raise SystemExit

systems = [  # name, R per rank (FLOP/s), element bytes, links [(name, B bytes/s, alpha s)]
    ("CPU node, fp32 (64 AVX-512 cores, 3 TFLOP/s achieved)", 3e12, 4),
    ("GPU (H100), bf16 (600 TFLOP/s achieved)", 600e12, 2),
]
links = [("100 Gb/s Ethernet", 12.5e9, 10e-6), ("NVLink-class (450 GB/s)", 450e9, 5e-6)]
T = a.tokens
print(f"T = {T} tokens per call, F = 4·d, non-gated (k = 2); E = efficiency, S = speedup over one rank\n")
for sname, R, s in systems:
    for lname, B, alpha in links:
        print(f"### {sname}, {lname}\n")
        print("| d_model | " + " | ".join(f"P={P}: E, S" for P in (8, 16, 32, 64)) + " |")
        print("|---|" + "---|" * 4)
        for d in (512, 1024, 2048, 4096, 8192):
            cells = []
            for P in (8, 16, 32, 64):
                c, m = times(P, T, d, 4 * d, R, B, alpha, s)
                E = c / (c + m)
                cells.append(f"{E:.2f}, {P * E:.1f}")
            print(f"| {d} | " + " | ".join(cells) + " |")
        print()
