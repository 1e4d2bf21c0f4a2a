#!/usr/bin/env python3
"""ffn serve against llama-server under concurrency (issue 61).

A client keeps C requests in flight (C = 1, 4, 16 by default), each a
128-token prompt (random token ids, different for every request, so no
prefix is shared) and a 128-token answer (greedy, ignore_eos, streamed), on
/v1/completions of both servers, which run the same GGUF with the same
threads; rounds alternate ffn and llama-server. Per server and C it prints
the total generated tokens/s (all requests' tokens / wall time), and the p50
and p99 of time to first token (TTFT) and inter-token latency (ITL: the gaps
between streamed chunks after the first), medians over the rounds.

    bench/serve_peers.py --model FILE.gguf [--llama-server PATH] [--threads 2]
                         [--concurrency 1,4,16] [--requests-per-client 2] [--rounds 3]
                         [--json OUT.json]

llama-server: --llama-server, else the build bench/llm_peers.py makes in
~/.cache/ffn/bench/llama.cpp/build/bin (the llama-cpp-python 0.3.36 sdist).
It runs with --parallel max(C) --ctx-size max(C)*512 (its context is split
among the slots) and continuous batching (its default); ffn serve with
--parallel max(C). Loopback only; every request and the whole run are
bounded in time.
"""
import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FFN = os.path.join(ROOT, "build", "bin", "ffn")
LLAMA_SERVER = os.path.expanduser("~/.cache/ffn/bench/llama.cpp/build/bin/llama-server")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_all(procs):
    for p in procs.values():
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def start(cmd, port, timeout=300):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if p.poll() is not None:
            sys.exit(f"serve_peers: {cmd[0]} exited with {p.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return p
        except OSError:
            pass
        time.sleep(0.2)
    p.kill()
    sys.exit(f"serve_peers: {cmd[0]} did not become healthy")


def one_request(port, prompt, new_tokens, timeout=600):
    """Streams one completion; returns (ttft, [gaps between chunks], chunks)."""
    body = json.dumps({"prompt": prompt, "max_tokens": new_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]}")
    times = []
    for raw in r:
        line = raw.strip()
        if not line.startswith(b"data: "):
            continue
        if line == b"data: [DONE]":
            break
        j = json.loads(line[6:])
        ch = j.get("choices") or []
        if ch and ch[0].get("text"):
            times.append(time.perf_counter())
    conn.close()
    if not times:
        raise RuntimeError("no tokens came")
    return times[0] - t0, [b - a for a, b in zip(times, times[1:])], len(times)


def run_load(port, concurrency, total, new_tokens, prompt_len, vocab_lo, vocab_hi, seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab_lo, vocab_hi) for _ in range(prompt_len)] for _ in range(total)]
    ttft, itl, errors = [], [], []
    lock = threading.Lock()
    nxt = [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= total:
                return
            try:
                f, gaps, _ = one_request(port, prompts[i], new_tokens)
            except Exception as e:  # noqa: BLE001 (reported below)
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                ttft.append(f)
                itl.extend(gaps)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit(f"serve_peers: {len(errors)} requests failed, first: {errors[0]}")

    def pct(v, q):
        v = sorted(v)
        return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")
    return {"tokens_per_s": total * new_tokens / wall, "ttft_p50": pct(ttft, 0.5), "ttft_p99": pct(ttft, 0.99),
            "itl_p50": pct(itl, 0.5), "itl_p99": pct(itl, 0.99), "wall_s": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--llama-server", default=LLAMA_SERVER)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--vocab-range", default="1000,40000", help="token ids the random prompts draw from")
    ap.add_argument("--ffn-args", default="", help="more flags for ffn serve (e.g. '--chunk 64')")
    ap.add_argument("--vs-ffn", default=None, metavar="ARGS",
                    help="the peer is ffn serve itself with these extra flags (and not --ffn-args) instead of "
                         "llama-server (e.g. '--log-format none': what the access log costs)")
    ap.add_argument("--json")
    a = ap.parse_args()
    cs = [int(c) for c in a.concurrency.split(",")]
    lo, hi = (int(x) for x in a.vocab_range.split(","))
    par = max(cs)
    pf, pl = free_port(), free_port()
    ctx = par * (a.prompt_tokens + a.new_tokens + 256)
    servers = {
        "ffn": [FFN, "serve", "--model", a.model, "--port", str(pf), "--threads", str(a.threads), "--parallel", str(par),
                "--context", str(a.prompt_tokens + a.new_tokens + 256), "--queue", "256", *a.ffn_args.split()],
        "llama-server": [a.llama_server, "-m", a.model, "--port", str(pl), "--host", "127.0.0.1", "-t", str(a.threads),
                         "-tb", str(a.threads), "--parallel", str(par), "--ctx-size", str(ctx), "--cont-batching",
                         "--no-webui"],
    }
    peer = "llama-server"
    if a.vs_ffn is not None:  # ffn against ffn with other flags, in the same alternating rounds
        peer = "ffn " + a.vs_ffn
        base = servers["ffn"][:len(servers["ffn"]) - len(a.ffn_args.split())]  # (without --ffn-args)
        servers = {"ffn": servers["ffn"], peer: [*base[:5], str(pl), *base[6:], *a.vs_ffn.split()]}
    ports = {"ffn": pf, peer: pl}
    procs = {}
    try:
        for name in servers:
            procs[name] = start(servers[name], ports[name])
        for name in servers:  # warm-up
            one_request(ports[name], list(range(lo, lo + 16)), 8)
        results = {n: {c: [] for c in cs} for n in servers}
        for r in range(a.rounds):
            for c in cs:
                for name in (servers if r % 2 == 0 else list(servers)[::-1]):
                    res = run_load(ports[name], c, c * a.requests_per_client, a.new_tokens, a.prompt_tokens, lo, hi,
                                   seed=1000 * r + c)
                    results[name][c].append(res)
                    print(f"round {r} C={c:2d} {name:12s} {res['tokens_per_s']:7.1f} tokens/s  "
                          f"TTFT p50 {res['ttft_p50'] * 1e3:7.1f} ms p99 {res['ttft_p99'] * 1e3:7.1f} ms  "
                          f"ITL p50 {res['itl_p50'] * 1e3:6.1f} ms p99 {res['itl_p99'] * 1e3:6.1f} ms", flush=True)
    finally:
        stop_all(procs)
    med = {n: {c: {k: statistics.median(x[k] for x in results[n][c]) for k in results[n][c][0]} for c in cs}
           for n in servers}
    print(f"\nmedians of {a.rounds} rounds; {os.path.basename(a.model)}, {a.threads} threads, prompt "
          f"{a.prompt_tokens}, answer {a.new_tokens}, {a.requests_per_client} requests per client")
    print(f"| C | ffn tokens/s | {peer} tokens/s | ratio | TTFT p50 ffn / peer | TTFT p99 ffn / peer | "
          "ITL p50 ffn / peer | ITL p99 ffn / peer |")
    print("|---|---|---|---|---|---|---|---|")
    for c in cs:
        f, l = med["ffn"][c], med[peer][c]
        print(f"| {c} | {f['tokens_per_s']:.1f} | {l['tokens_per_s']:.1f} | {f['tokens_per_s'] / l['tokens_per_s']:.2f}x | "
              f"{f['ttft_p50'] * 1e3:.0f} / {l['ttft_p50'] * 1e3:.0f} ms | {f['ttft_p99'] * 1e3:.0f} / {l['ttft_p99'] * 1e3:.0f} ms | "
              f"{f['itl_p50'] * 1e3:.1f} / {l['itl_p50'] * 1e3:.1f} ms | {f['itl_p99'] * 1e3:.1f} / {l['itl_p99'] * 1e3:.1f} ms |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"model": a.model, "threads": a.threads, "medians": med, "rounds": results}, fh, indent=1)


if __name__ == "__main__":
    main()
