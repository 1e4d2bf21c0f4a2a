#!/usr/bin/env python3
"""ffn serve's /v1/embeddings against llama-server's under concurrency (issue 67).

C clients (default 16) keep one request each in flight; a request holds
`--inputs` texts (default 1, and 32: a client embedding its documents in
batches). The texts are bench/embed_peers.py's kind: short sentences of
5–30 words from the model's vocabulary. Both servers run
all-MiniLM-L6-v2 with the same threads: ffn serve from the
sentence-transformers directory, llama-server from the same model written as
a GGUF (float32, llama.cpp's convert_hf_to_gguf.py) with --embedding
--pooling mean. Rounds alternate the servers; the script prints texts/s per
server and setting (medians over rounds) and the ratio, and first checks
that both give the same vectors (worst cosine between them over 64 texts).

    bench/embed_serve_peers.py --model DIR --gguf FILE.gguf [--llama-server PATH]
                               [--threads 2] [--clients 16] [--inputs 1,32]
                               [--texts 2000] [--rounds 3]

Loopback only; every request and the run are bounded in time.
"""
import argparse
import http.client
import json
import math
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_peers import FFN, LLAMA_SERVER, free_port, start, stop_all  # noqa: E402


def texts_of(model_dir, n, seed=67):
    with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8") as f:
        words = [w.strip() for w in f]
    words = [w for w in words if len(w) >= 2 and w.isascii() and w.isalpha() and w.islower()]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        body = [rng.choice(words) for _ in range(rng.randint(5, 30))]
        out.append(" ".join([body[0].capitalize()] + body[1:]) + ".")
    return out


def embed(port, texts, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/embeddings", body=json.dumps({"input": texts}).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {body[:200]!r}")
        return [d["embedding"] for d in sorted(json.loads(body)["data"], key=lambda d: d["index"])]
    finally:
        c.close()


def run_load(port, texts, clients, per_request):
    batches = [texts[i:i + per_request] for i in range(0, len(texts), per_request)]
    it = iter(batches)
    lock = threading.Lock()
    errors = []

    def client():
        while True:
            with lock:
                b = next(it, None)
            if b is None:
                return
            try:
                embed(port, b)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
                return
    t0 = time.time()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    wall = time.time() - t0
    if errors:
        sys.exit(f"embed_serve_peers: {errors[0]}")
    return len(texts) / wall


def cosine(u, v):
    return sum(a * b for a, b in zip(u, v)) / math.sqrt(sum(a * a for a in u) * sum(b * b for b in v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/ffn/all-MiniLM-L6-v2"))
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama-server", default=LLAMA_SERVER)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--inputs", default="1,32")
    ap.add_argument("--texts", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ffn-args", default="")
    a = ap.parse_args()
    inputs = [int(x) for x in a.inputs.split(",")]
    texts = texts_of(a.model, a.texts)
    pf, pl = free_port(), free_port()
    servers = {
        "ffn": [FFN, "serve", "--embedding-model", a.model, "--port", str(pf), "--threads", str(a.threads),
                "--log-format", "none", *a.ffn_args.split()],
        "llama-server": [a.llama_server, "-m", a.gguf, "--port", str(pl), "--host", "127.0.0.1", "-t", str(a.threads),
                         "-tb", str(a.threads), "--embedding", "--pooling", "mean", "--parallel", str(a.clients),
                         "--ctx-size", str(512 * a.clients), "-b", "4096", "-ub", "4096", "--no-webui"],
    }
    ports = {"ffn": pf, "llama-server": pl}
    procs = {}
    results = {n: {k: [] for k in inputs} for n in servers}
    try:
        for name in servers:
            procs[name] = start(servers[name], ports[name])
        probe = texts[:64]
        ef, el = embed(pf, probe), embed(pl, probe)
        worst = min(cosine(u, v) for u, v in zip(ef, el))
        print(f"ffn vs llama-server on 64 texts: worst cosine {worst:.6f}", flush=True)
        for name in servers:  # warm-up
            run_load(ports[name], texts[:64], a.clients, 1)
        for r in range(a.rounds):
            for k in inputs:
                for name in (servers if r % 2 == 0 else list(servers)[::-1]):
                    tps = run_load(ports[name], texts, a.clients, k)
                    results[name][k].append(tps)
                    print(f"round {r} inputs/request {k:3d} {name:12s} {tps:8.1f} texts/s", flush=True)
    finally:
        stop_all(procs)
    print(f"\nmedians of {a.rounds} rounds; {os.path.basename(a.model.rstrip('/'))}, {a.threads} threads, "
          f"{a.clients} clients, {a.texts} short texts")
    print("| inputs per request | ffn texts/s | llama-server texts/s | ratio |")
    print("|---|---|---|---|")
    for k in inputs:
        f, l = statistics.median(results["ffn"][k]), statistics.median(results["llama-server"][k])
        print(f"| {k} | {f:.1f} | {l:.1f} | {f / l:.2f}x |")


if __name__ == "__main__":
    main()
