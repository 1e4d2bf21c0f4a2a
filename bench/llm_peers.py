#!/usr/bin/env python3
"""ffn against llama.cpp and transformers on SmolLM2-135M-Instruct.Q4_1.gguf
(the file scripts/setup.sh installs), 1 and 2 threads, in alternating rounds
(each engine in its own process; a round runs every engine once per case):

  pp512        prompt processing, 512 tokens: tokens/s
               (ffn bench --generate --prompt-tokens 512 --new-tokens 0;
                llama-bench -p 512 -n 0)
  tg128@64     128 new tokens after a 64-token prompt: tokens/s of the
               generation alone (ffn: after its prompt; llama-bench -n 128
               generates from an empty context, which is a little easier)
  pp64+tg128   the whole job, (64 + 128) / time: llama-bench's -pg 64,128
  hf-tg128@64  transformers float32 (the model from the same GGUF through
               its loader; greedy, min_new_tokens = 128): tokens/s

ffn runs with its default compute (native: the file's Q4_1/Q8_0 blocks) and
also --compute fp32; the ratios are medians of the rounds' own ratios.
The weight-reading floor (ffn bench's measured read bandwidth over the
weights' bytes) is printed beside generation.

    bench/llm_peers.py [--rounds 3] [--threads 1,2] [--llama-bench PATH]
                       [--no-hf] [--wait-policy default|passive|active] [--json FILE]

llama.cpp: pass --llama-bench, or the script builds it once from the PyPI
source package llama-cpp-python==0.3.36 (vendored llama.cpp) into
~/.cache/ffn/bench/llama.cpp/ (pip download --no-binary, cmake; ~10 min on 2
cores) with GGML_NATIVE=OFF and the AVX2/FMA/F16C/AVX-512/VNNI/BF16 flags
this CPU reports (GGML_NATIVE=ON built a binary that died with SIGILL on a
KVM guest). Nothing of it goes into the repository.

transformers runs on Debian's torch, which calls the system's libblas.so.3:
with only libblas3 (the reference BLAS) it is ~30x slower than with
OpenBLAS (`apt-get install libopenblas0-pthread`); check before quoting it.
Both engines use OpenMP (llama.cpp's GGML_OPENMP is on by default), so the
wait policy applies to both; 'default' leaves OMP_WAIT_POLICY unset.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tarfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FFN = os.path.join(ROOT, "build", "bin", "ffn")
VENV = os.path.join(ROOT, ".venv", "bin", "python")
MODEL = os.environ.get("FFN_SMOLLM2_GGUF", os.path.expanduser("~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
LLAMA_DIR = os.path.expanduser("~/.cache/ffn/bench/llama.cpp")
LLAMA_SDIST = "llama-cpp-python==0.3.36"

HF_RUNNER = r"""
import os, sys, time, torch
import transformers.generation.utils as gu
gu.is_fsdp_managed_module = lambda m: False
from transformers import AutoModelForCausalLM
path, threads, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
m = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                         torch_dtype=torch.float32).eval()
m.lm_head.weight = m.model.embed_tokens.weight
ids = torch.randint(3, 49152, (1, 64), generator=torch.Generator().manual_seed(0))
times = []
with torch.no_grad():
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        m.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, min_new_tokens=128, max_new_tokens=128,
                   pad_token_id=2)
        if r:
            times.append(time.perf_counter() - t0)
times.sort()
print(128 / times[len(times) // 2])
"""


def cpu_flags():
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def build_llama_bench():
    exe = os.path.join(LLAMA_DIR, "build", "bin", "llama-bench")
    if os.path.exists(exe):
        return exe
    os.makedirs(LLAMA_DIR, exist_ok=True)
    subprocess.run([VENV, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", LLAMA_SDIST, "-d",
                    LLAMA_DIR], check=True)
    sdist = glob.glob(os.path.join(LLAMA_DIR, "llama_cpp_python-*.tar.gz"))[0]
    with tarfile.open(sdist) as t:
        t.extractall(LLAMA_DIR)
    src = glob.glob(os.path.join(LLAMA_DIR, "llama_cpp_python-*", "vendor", "llama.cpp"))[0]
    f = cpu_flags()
    on = lambda flag: "ON" if flag in f else "OFF"  # noqa: E731
    subprocess.run(["cmake", "-S", src, "-B", os.path.join(LLAMA_DIR, "build"), "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_NATIVE=OFF", "-DLLAMA_CURL=OFF", f"-DGGML_AVX2={on('avx2')}", f"-DGGML_FMA={on('fma')}",
                    f"-DGGML_F16C={on('f16c')}", f"-DGGML_AVX512={on('avx512f')}",
                    f"-DGGML_AVX512_VNNI={on('avx512_vnni')}", f"-DGGML_AVX512_BF16={on('avx512_bf16')}"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", os.path.join(LLAMA_DIR, "build"), "-j2", "--target", "llama-bench"], check=True,
                   stdout=subprocess.DEVNULL)
    return exe


def ffn_bench(threads, prompt, new, compute, env):
    r = subprocess.run([FFN, "bench", "--generate", "--model", MODEL, "--threads", str(threads), "--prompt-tokens",
                        str(prompt), "--new-tokens", str(new), "--compute", compute, "--repeats", "3", "--warmup", "1",
                        "--json"], capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout)


def llama_bench(exe, threads, args, env):
    env = dict(env, LD_LIBRARY_PATH=os.path.dirname(exe))
    r = subprocess.run([exe, "-m", MODEL, "-t", str(threads), "-r", "3", "-o", "json", *args], capture_output=True,
                       text=True, env=env, check=True)
    return json.loads(r.stdout)[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--llama-bench")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--wait-policy", choices=["default", "passive", "active"], default="default")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"{MODEL}: missing (scripts/setup.sh installs it)")
    exe = a.llama_bench or build_llama_bench()
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if a.wait_policy != "default":
        env["OMP_WAIT_POLICY"] = a.wait_policy.upper()
    rows = []
    for threads in [int(t) for t in a.threads.split(",")]:
        res = {k: [] for k in ("ffn_pp512", "ffn32_pp512", "llama_pp512", "ffn_tg", "ffn32_tg", "llama_tg", "ffn_pg",
                               "llama_pg", "hf_tg", "floor_tg", "read_gbs")}
        for rnd in range(a.rounds):
            n = ffn_bench(threads, 512, 0, "native", env)
            res["ffn_pp512"].append(n["prompt_tokens_per_s"])
            res["llama_pp512"].append(llama_bench(exe, threads, ["-p", "512", "-n", "0"], env))
            res["ffn32_pp512"].append(ffn_bench(threads, 512, 0, "fp32", env)["prompt_tokens_per_s"])
            g = ffn_bench(threads, 64, 128, "native", env)
            res["ffn_tg"].append(g["generate_tokens_per_s"])
            res["ffn_pg"].append(192 / (g["prompt_s"] + g["generate_s"]))
            res["floor_tg"].append(g["read_floor_tokens_per_s"])
            res["read_gbs"].append(g["read_gb_per_s"])
            res["llama_tg"].append(llama_bench(exe, threads, ["-p", "0", "-n", "128"], env))
            res["llama_pg"].append(llama_bench(exe, threads, ["-p", "0", "-n", "0", "-pg", "64,128"], env))
            res["ffn32_tg"].append(ffn_bench(threads, 64, 128, "fp32", env)["generate_tokens_per_s"])
            if not a.no_hf:
                r = subprocess.run([VENV, "-c", HF_RUNNER, MODEL, str(threads), "1"], capture_output=True, text=True,
                                   env=env)
                res["hf_tg"].append(float(r.stdout.strip().split("\n")[-1]) if r.returncode == 0 else float("nan"))
            print(f"threads {threads} round {rnd + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in res.items() if v),
                  flush=True)
        med = {k: statistics.median(v) for k, v in res.items() if v}
        ratio = lambda x, y: statistics.median(p / q for p, q in zip(res[x], res[y]))  # noqa: E731
        row = {"threads": threads, "wait_policy": a.wait_policy, "median": med,
               "pp512_vs_llama": ratio("ffn_pp512", "llama_pp512"),
               "tg_vs_llama": ratio("ffn_tg", "llama_tg"), "pg_vs_llama": ratio("ffn_pg", "llama_pg")}
        if res["hf_tg"]:
            row["tg_vs_hf"] = ratio("ffn_tg", "hf_tg")
            row["fp32_tg_vs_hf"] = ratio("ffn32_tg", "hf_tg")
        rows.append(row)
    print("\n| threads | case | ffn native | ffn fp32 | llama.cpp | transformers fp32 | ffn native / peer |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        m, t = r["median"], r["threads"]
        print(f"| {t} | pp512 tokens/s | {m['ffn_pp512']:.0f} | {m['ffn32_pp512']:.0f} | {m['llama_pp512']:.0f} | | "
              f"{r['pp512_vs_llama']:.2f}x llama.cpp |")
        hf = f"{m['hf_tg']:.1f}" if "hf_tg" in m else ""
        vs = f"{r['tg_vs_llama']:.2f}x llama.cpp" + (f", {r['tg_vs_hf']:.1f}x transformers" if "tg_vs_hf" in r else "")
        print(f"| {t} | tg128@64 tokens/s | {m['ffn_tg']:.1f} | {m['ffn32_tg']:.1f} | {m['llama_tg']:.1f} | {hf} | {vs} |")
        print(f"| {t} | pp64+tg128 tokens/s | {m['ffn_pg']:.1f} | | {m['llama_pg']:.1f} | | "
              f"{r['pg_vs_llama']:.2f}x llama.cpp |")
        print(f"| {t} | weight-reading floor | {m['floor_tg']:.0f} tokens/s ({m['read_gbs']:.1f} GB/s) | | | | |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
