#!/usr/bin/env python3
"""ffn on a machine that other processes share (issue 45): each case with the
default threads and with --threads 1, for two builds of the program (OLD and
NEW, alternating within each round), on an idle machine and beside busy
loops, medians over the rounds.

  bench/busy_machine.py --old OLD_FFN --new NEW_FFN [--rounds 5]
                        [--loads idle,busy1,nice19busy2] [--cases t1,t64,t4096,generate,embed]
                        [--model GGUF] [--llama-bench PATH] [--timeout 120] [--json OUT.jsonl]

Loads: idle; busy1 = one busy loop at nice 0 beside ffn at nice 0 (a build,
a browser); nice19busy2 = two busy loops at nice 0 beside ffn at nice 19 (a
background job on a full machine). The busy loops are separate processes
(`sh -c 'while :; do :; done'`, each in a session of its own, as jobs from
another terminal are) started before each load's rounds and killed after. Each figure is the program's own rate (`ffn bench --json`): tokens/s
of the FFN call's median, prompt and generation tokens/s, texts/s. A run that
passes --timeout counts as 0 (printed as "timeout").

--llama-bench: llama.cpp's llama-bench on the same GGUF under the same load
(-p prompt -n new, -t 2 and -t 1), beside ffn's generate case.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

SMOLLM2 = os.path.expanduser("~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
MINILM = os.path.expanduser("~/.cache/ffn/all-MiniLM-L6-v2")

TEXTS = [
    "The feed-forward network is applied to each position separately and identically.",
    "A busy machine is the normal case for a program that people run on their laptops.",
    "Attention weights are computed from queries and keys, then applied to the values.",
    "Le chat est assis sur le tapis et regarde la pluie tomber dehors.",
]


def cases(args, texts_file):
    """name -> (arguments after the program, [(metric label, json key)])."""
    c = {
        "t1": (["bench", "--tokens", "1", "--repeats", "400", "--warmup", "20", "--yes"], [("T=1 tokens/s", "tokens_per_s")]),
        "t64": (["bench", "--tokens", "64", "--repeats", "60", "--yes"], [("T=64 tokens/s", "tokens_per_s")]),
        "t4096": (["bench", "--tokens", "4096", "--repeats", "5", "--yes"], [("T=4096 tokens/s", "tokens_per_s")]),
        "generate": (["bench", "--generate", "--model", args.model, "--prompt-tokens", str(args.prompt),
                      "--new-tokens", str(args.new_tokens)],
                     [(f"prompt {args.prompt} tokens/s", "prompt_tokens_per_s"),
                      (f"{args.new_tokens} new tokens/s", "generate_tokens_per_s")]),
        "embed": (["bench", "--embed", "--model", MINILM, "--input-file", texts_file, "--embed-batch", "32"],
                  [("embed texts/s", "texts_per_s")]),
    }
    return {k: c[k] for k in args.cases.split(",")}


def run(cmd, timeout, nice):
    """cmd's stdout (at `nice`), None past the timeout; exits naming cmd when it fails."""
    full = (["nice", "-n", str(nice)] if nice else []) + cmd
    try:
        p = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if p.returncode != 0:
        sys.exit(f"busy_machine: {' '.join(full)} failed ({p.returncode}): {p.stderr.strip()[-400:]}")
    return p.stdout


def run_json(cmd, timeout, nice):
    out = run(cmd + ["--json"], timeout, nice)
    return None if out is None else json.loads(out.strip().splitlines()[-1])


def run_llama_bench(path, model, prompt, new, threads, timeout, nice):
    stdout = run([path, "-m", model, "-p", str(prompt), "-n", str(new), "-t", str(threads), "-r", "1", "-o", "json"],
                 timeout, nice)
    if stdout is None:
        return None
    out = {}
    for r in json.loads(stdout):
        key = "prompt_tokens_per_s" if r.get("n_prompt", 0) > 0 else "generate_tokens_per_s"
        out[key] = r["avg_ts"]
    return out


LOADS = {"idle": (0, 0), "busy1": (1, 0), "nice19busy2": (2, 19)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loads", default="idle,busy1,nice19busy2")
    ap.add_argument("--cases", default="t1,t64,t4096,generate,embed")
    ap.add_argument("--model", default=SMOLLM2)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--new-tokens", dest="new_tokens", type=int, default=32)
    ap.add_argument("--llama-bench", default="")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    # SIGTERM (timeout, kill) as SystemExit, so that the finally below still
    # kills the busy loops; by default Python dies without running it.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    for load in args.loads.split(","):
        if load not in LOADS:
            sys.exit(f"busy_machine: --loads: unknown load {load!r} (idle, busy1, nice19busy2)")

    texts_file = "/tmp/busy_machine_texts.txt"
    with open(texts_file, "w") as f:
        for i in range(64):
            f.write(TEXTS[i % len(TEXTS)] + "\n")
    cs = cases(args, texts_file)
    progs = {"old": os.path.realpath(args.old), "new": os.path.realpath(args.new)}
    out = open(args.json, "a") if args.json else None
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  rounds {args.rounds}  old {progs['old']}  new {progs['new']}", flush=True)
    for load in args.loads.split(","):
        busy, nice = LOADS[load]
        # Each busy loop in a session of its own, as a job from another
        # terminal or a service is (with the kernel's autogroups, nice then
        # weighs ffn's threads against each other, not against those jobs).
        hogs = []
        try:
            for _ in range(busy):
                hogs.append(subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True))
            time.sleep(0.5 if busy else 0)
            results = {}  # (case, metric, prog, threads) -> [values]
            for r in range(args.rounds):
                order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
                for name, (cmd, metrics) in cs.items():
                    for prog in order:
                        for threads in ("default", "1"):
                            t = [] if threads == "default" else ["--threads", "1"]
                            res = run_json([progs[prog]] + cmd + t, args.timeout, nice)
                            for label, key in metrics:
                                v = 0.0 if res is None else float(res[key])
                                results.setdefault((name, label, prog, threads), []).append(v)
                                if out:
                                    out.write(json.dumps({"load": load, "round": r, "case": name, "metric": label,
                                                          "prog": prog, "threads": threads, "value": v}) + "\n")
                    if name == "generate" and args.llama_bench:
                        for threads in ("2", "1"):
                            res = run_llama_bench(args.llama_bench, args.model, args.prompt, args.new_tokens, threads,
                                                  args.timeout, nice)
                            for label, key in metrics:
                                v = 0.0 if res is None else float(res.get(key, 0.0))
                                results.setdefault((name, label, "llama.cpp", threads), []).append(v)
            print(f"\n## {load}: {busy} busy loop(s) at nice 0, ffn at nice {nice}; medians of {args.rounds}")
            print("| case | old default | old --threads 1 | new default | new --threads 1 | new/old default | "
                  "new default / new 1 thread | llama.cpp -t 2 | llama.cpp -t 1 |")
            print("|---|---|---|---|---|---|---|---|---|")
            for name, (cmd, metrics) in cs.items():
                for label, key in metrics:
                    med = {}
                    for prog in ("old", "new"):
                        for threads in ("default", "1"):
                            med[(prog, threads)] = statistics.median(results[(name, label, prog, threads)])
                    ll = ["", ""]
                    if name == "generate" and args.llama_bench:
                        ll = [f"{statistics.median(results[(name, label, 'llama.cpp', t)]):.1f}" for t in ("2", "1")]
                    f = lambda v: "timeout" if v == 0 else f"{v:.1f}"
                    ratio = lambda a, b: "" if b == 0 else f"{a / b:.2f}x"
                    print(f"| {label} | {f(med[('old', 'default')])} | {f(med[('old', '1')])} | "
                          f"{f(med[('new', 'default')])} | {f(med[('new', '1')])} | "
                          f"{ratio(med[('new', 'default')], med[('old', 'default')])} | "
                          f"{ratio(med[('new', 'default')], med[('new', '1')])} | {ll[0]} | {ll[1]} |", flush=True)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    if out:
        out.close()


if __name__ == "__main__":
    main()
