"""PyTorch's FFN (Linear -> ReLU -> Linear, biases, fp32) timed like `ffn bench`.

Run by `ffn_peers compare` with Debian's python3-torch (/usr/bin/python3).
Prints one JSON object with median_s, min_s, max_s, gflops.
"""
import argparse
import json
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--tokens", type=int, default=4096)
p.add_argument("--d-model", type=int, default=512)
p.add_argument("--d-ff", type=int, default=2048)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--repeats", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--backward", action="store_true")
p.add_argument("--json", action="store_true")
p.add_argument("--autocast-bf16", action="store_true", help="forward under torch.autocast('cpu', bfloat16)")
a = p.parse_args()

# The BLAS under PyTorch keeps its own thread pool, which torch.set_num_threads
# does not limit; fix every pool's size before torch is imported.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(a.threads)
import torch  # noqa: E402

torch.set_num_threads(a.threads)
torch.manual_seed(0)
l1 = torch.nn.Linear(a.d_model, a.d_ff)
l2 = torch.nn.Linear(a.d_ff, a.d_model)
x = torch.rand(a.tokens, a.d_model) * 2 - 1
dy = (torch.rand(a.tokens, a.d_model) * 2 - 1) * 0.01
if a.backward:
    x.requires_grad_(True)


def call():
    if a.backward:
        y = l2(torch.relu(l1(x)))
        y.backward(dy)
    elif a.autocast_bf16:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            l2(torch.relu(l1(x)))
    else:
        with torch.no_grad():
            l2(torch.relu(l1(x)))


times = []
for i in range(a.warmup + a.repeats):
    t0 = time.perf_counter()
    call()
    t = time.perf_counter() - t0
    if i >= a.warmup:
        times.append(t)
times.sort()
n = len(times)
med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
flops = (12.0 if a.backward else 4.0) * a.tokens * a.d_model * a.d_ff
print(json.dumps({"impl": "torch_bf16" if a.autocast_bf16 else "torch", "tokens": a.tokens, "threads": a.threads, "backward": a.backward,
                  "median_s": med, "min_s": times[0], "max_s": times[-1], "gflops": flops / med * 1e-9,
                  "torch": torch.__version__}))
