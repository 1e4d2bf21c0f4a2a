#!/usr/bin/env python3
"""Issue 47's speed table: ffn against llama.cpp on GGUF files whose weights
no longer fit in cache (the 1B-shape files of bench/make_1b_gguf.py, quantized
with llama-quantize) and on SmolLM2-135M, 2 threads, in alternating rounds
(each engine in its own process; a round runs every engine once per file):

  pp512      prompt processing, 512 tokens: tokens/s
             (ffn bench --generate --prompt-tokens 512 --new-tokens 0;
              llama-bench -p 512 -n 0)
  tg128@64   128 new tokens after a 64-token prompt: tokens/s of the
             generation alone (ffn bench --generate --prompt-tokens 64
             --new-tokens 128; llama-bench -p 0 -n 128 -d 64)

ffn runs with native compute on the best ISA of this CPU and again with
FFN_ISA=avx2; llama.cpp on what it was built for (this CPU's flags). Beside
generation: ffn's reading floor (the bytes a step reads, weights in their
stored types plus the KV cache, at the measured read rate) and generation as
a share of it. Ratios are medians of the rounds' own ratios.

    python3 bench/k_quants.py --llama-bench PATH [--rounds 3] [--files F1,F2,...] [--json OUT]
                              [--ffn build/bin/ffn] [--no-avx2] [--baseline OLD_FFN]

Files default to ~/.cache/ffn/bench/llama1b/llama1b-{q4_k_m,q4_0,q8_0}.gguf and
~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.{Q4_1,requant.Q4_K_M}.gguf (those
two requantized from the Q4_1 with --allow-requantize: twice quantized).
Standard library only.
"""
import argparse
import json
import os
import statistics
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
B1 = os.path.expanduser("~/.cache/ffn/bench/llama1b")
S = os.path.expanduser("~/.cache/ffn/smollm2")
FILES = [f"{B1}/llama1b-q4_k_m.gguf", f"{B1}/llama1b-q4_0.gguf", f"{B1}/llama1b-q8_0.gguf",
         f"{S}/SmolLM2-135M-Instruct.Q4_1.gguf", f"{S}/SmolLM2-135M-Instruct.requant.Q4_K_M.gguf"]


def ffn(exe, model, prompt, new, isa=None):
    env = dict(os.environ)
    if isa:
        env["FFN_ISA"] = isa
    r = subprocess.run([exe, "bench", "--generate", "--model", model, "--prompt-tokens", str(prompt), "--new-tokens",
                        str(new), "--threads", "2", "--repeats", "1", "--warmup", "0", "--json"],
                       capture_output=True, text=True, check=True, env=env, timeout=600)
    return json.loads(r.stdout.strip().splitlines()[-1])


def llama(exe, model, prompt, new, depth):
    r = subprocess.run([exe, "-m", model, "-p", str(prompt), "-n", str(new), "-d", str(depth), "-t", "2", "-r", "1",
                        "-o", "json"], capture_output=True, text=True, check=True, timeout=600)
    return json.loads(r.stdout)[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--ffn", default=os.path.join(ROOT, "build", "bin", "ffn"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--files", default=",".join(FILES))
    ap.add_argument("--no-avx2", action="store_true")
    ap.add_argument("--baseline", help="another ffn binary (an earlier build), run in the same rounds at the best ISA")
    ap.add_argument("--json")
    a = ap.parse_args()
    files = [f for f in a.files.split(",") if os.path.exists(f)]
    isas = [None] + ([] if a.no_avx2 else ["avx2"])
    res = {f: {"ffn_pp": {}, "ffn_tg": {}, "floor": {}, "llama_pp": [], "llama_tg": []} for f in files}
    for rnd in range(a.rounds):
        for f in files:
            r = res[f]
            order = ["llama"] + [(a.ffn, i, i or "best") for i in isas]
            if a.baseline:
                order.append((a.baseline, None, "baseline"))
            if rnd % 2:
                order.reverse()
            for who in order:
                if who == "llama":
                    r["llama_pp"].append(llama(a.llama_bench, f, 512, 0, 0))
                    r["llama_tg"].append(llama(a.llama_bench, f, 0, 128, 64))
                else:
                    exe, isa, key = who
                    p = ffn(exe, f, 512, 0, isa)
                    g = ffn(exe, f, 64, 128, isa)
                    r["ffn_pp"].setdefault(key, []).append(p["prompt_tokens_per_s"])
                    r["ffn_tg"].setdefault(key, []).append(g["generate_tokens_per_s"])
                    r["floor"].setdefault(key, []).append(g["read_floor_tokens_per_s"])
            print(f"round {rnd + 1}: {os.path.basename(f)} done", flush=True)
    med = statistics.median
    print("| file | ISA | prompt 512: ffn | llama.cpp | ratio | generation 128@64: ffn | llama.cpp | ratio | "
          "ffn / floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f, r in res.items():
        for key in r["ffn_pp"]:
            pr = med([x / y for x, y in zip(r["ffn_pp"][key], r["llama_pp"])])
            tr = med([x / y for x, y in zip(r["ffn_tg"][key], r["llama_tg"])])
            fl = med([x / y for x, y in zip(r["ffn_tg"][key], r["floor"][key])])
            print(f"| {os.path.basename(f)} | {key} | {med(r['ffn_pp'][key]):.1f} | {med(r['llama_pp']):.1f} | "
                  f"{pr:.2f} | {med(r['ffn_tg'][key]):.1f} | {med(r['llama_tg']):.1f} | {tr:.2f} | "
                  f"{fl:.2f} ({med(r['floor'][key]):.1f}) |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
