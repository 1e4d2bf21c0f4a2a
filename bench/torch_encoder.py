"""PyTorch's Transformer encoder layer (nn.TransformerEncoderLayer: multi-head
self-attention + FFN, biases, fp32, dropout 0.0, batch_first) timed like
`ffn bench`.

Run with Debian's python3-torch (/usr/bin/python3), e.g.
    /usr/bin/python3 bench/torch_encoder.py --threads 2 --batch 8 --seq 128 --mode both
    /usr/bin/python3 bench/torch_encoder.py --threads 2 --batch 1 --seq 4096 --rss

Modes (--mode): inference is module.eval() under torch.inference_mode(), where
PyTorch takes its fused fast path (torch._transformer_encoder_layer_fwd) when
the conditions hold (e.g. an even number of heads); whether it did is reported.
train is module.train(), forward and backward(dy) with x.requires_grad (so dL/dx
is computed too), the gradients reset between calls outside the timing.
Median of --repeats calls after --warmup calls, time.perf_counter.

FLOPs per layer: forward 2*B*S*(4 d^2 + 2 d F) (projections and FFN) +
4*B*S^2*d (Q K^T and P V); forward + backward counts 3x that.

Prints a line per mode, or with --json one JSON object: the settings and, for
one mode, median_s, min_s, max_s, gflops, fast_path at the top level; for
--mode both, those under "inference" and "train".
--rss instead runs one call (inference, or train with --mode train) at the
given shape and reports the peak resident set size (ru_maxrss) before and
after it, in MiB.
"""
import argparse
import json
import os
import resource
import time

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--d-model", type=int, default=512)
p.add_argument("--heads", type=int, default=8)
p.add_argument("--d-ff", type=int, default=2048)
p.add_argument("--layers", type=int, default=1)
p.add_argument("--activation", choices=["relu", "gelu"], default="relu")
p.add_argument("--norm-first", action="store_true")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--repeats", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--mode", choices=["inference", "train", "both"], default="inference")
p.add_argument("--rss", action="store_true", help="one call, then print the peak RSS")
p.add_argument("--json", action="store_true")
a = p.parse_args()
if a.d_model % a.heads:
    p.error("--d-model must be a multiple of --heads")

# The BLAS under PyTorch keeps its own thread pool, which torch.set_num_threads
# does not limit; fix every pool's size before torch is imported.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(a.threads)
import torch  # noqa: E402

torch.set_num_threads(a.threads)
torch.manual_seed(0)

# Count the calls of the fused fast path (looked up on the torch module at call time).
fast_calls = [0]
_fast_fwd = torch._transformer_encoder_layer_fwd


def _counting_fast_fwd(*args, **kwargs):
    fast_calls[0] += 1
    return _fast_fwd(*args, **kwargs)


torch._transformer_encoder_layer_fwd = _counting_fast_fwd

layer = torch.nn.TransformerEncoderLayer(a.d_model, a.heads, a.d_ff, dropout=0.0, activation=a.activation,
                                         batch_first=True, norm_first=a.norm_first)
if a.layers == 1:
    module = layer
else:
    module = torch.nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False)
x = torch.rand(a.batch, a.seq, a.d_model) * 2 - 1
dy = (torch.rand(a.batch, a.seq, a.d_model) * 2 - 1) * 0.01
xg = x.clone().requires_grad_(True)


def infer():
    with torch.inference_mode():
        module(x)


def train():
    module(xg).backward(dy)


def reset_grads():
    module.zero_grad(set_to_none=True)
    xg.grad = None


def set_mode(mode):
    module.train(mode == "train")
    reset_grads()
    fast_calls[0] = 0


def max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def timed(mode):
    set_mode(mode)
    call = train if mode == "train" else infer
    times = []
    for i in range(a.warmup + a.repeats):
        reset_grads()
        t0 = time.perf_counter()
        call()
        t = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(t)
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    B, S, d, F = a.batch, a.seq, a.d_model, a.d_ff
    flops = a.layers * (2.0 * B * S * (4 * d * d + 2 * d * F) + 4.0 * B * S * S * d)
    if mode == "train":
        flops *= 3
    return {"median_s": med, "min_s": times[0], "max_s": times[-1], "gflops": flops / med * 1e-9,
            "fast_path": fast_calls[0] > 0}


settings = {"impl": "torch", "batch": a.batch, "seq": a.seq, "d_model": a.d_model, "heads": a.heads, "d_ff": a.d_ff,
            "layers": a.layers, "activation": a.activation, "norm_first": a.norm_first, "threads": a.threads,
            "torch": torch.__version__}

if a.rss:
    mode = "train" if a.mode == "train" else "inference"
    set_mode(mode)
    before = max_rss_mib()
    t0 = time.perf_counter()
    train() if mode == "train" else infer()
    t = time.perf_counter() - t0
    res = dict(settings, mode=mode, rss_before_mib=before, peak_rss_mib=max_rss_mib(), seconds=t,
               fast_path=fast_calls[0] > 0)
    if a.json:
        print(json.dumps(res))
    else:
        print(f"{mode} B={a.batch} S={a.seq} d={a.d_model} h={a.heads} F={a.d_ff} N={a.layers}: "
              f"peak RSS {res['peak_rss_mib']:.1f} MiB (before the call {before:.1f} MiB), "
              f"{t * 1e3:.1f} ms, fast path: {'yes' if res['fast_path'] else 'no'}")
    raise SystemExit(0)

modes = ["inference", "train"] if a.mode == "both" else [a.mode]
results = {m: timed(m) for m in modes}
if a.json:
    if len(modes) == 1:
        print(json.dumps(dict(settings, mode=modes[0], **results[modes[0]])))
    else:
        print(json.dumps(dict(settings, mode="both", **results)))
else:
    print(f"torch {torch.__version__}: B={a.batch} S={a.seq} d={a.d_model} h={a.heads} F={a.d_ff} N={a.layers} "
          f"{a.activation}{' norm_first' if a.norm_first else ''}, {a.threads} threads")
    for m, r in results.items():
        extra = f", fast path: {'yes' if r['fast_path'] else 'no'}" if m == "inference" else ""
        print(f"{m:9s}: median {r['median_s'] * 1e3:.3f} ms (min {r['min_s'] * 1e3:.3f}, max {r['max_s'] * 1e3:.3f})"
              f", {r['gflops']:.1f} GFLOP/s{extra}")
