#!/usr/bin/env python3
"""ffn serve against llama-server under the load test's mixed traffic (issue 67).

Each round sends one server, at once, the traffic of tests/serve/load_test.py
(tests/serve/traffic.py), drawn from the same seed for both: well-formed chat
and completion requests from 6 clients (random prompts of 1–40 words,
1–24 new tokens, greedy or sampled, stream and logprobs on or off), a client
that drops its connection after the first streamed chunk, one that drops it
halfway through its body, a slow client sending its body a byte at a time,
and a burst of 36 requests. Both servers run the same GGUF with the same
threads and --parallel 4, and both take every request (ffn serve --queue 64;
llama-server queues without a bound), with 64 HTTP threads and a 30 s read
timeout each (ffn serve's defaults; llama-server's are one HTTP thread per
core and 3600 s, under which the dropped half-sent body holds a thread for
an hour and the rest wait behind it).
Rounds alternate the servers. Per server: the well-formed requests answered
per second, their generated tokens per second (from usage), and the p50 and
p99 of their latency; medians over the rounds.

    bench/serve_mixed_peers.py --model FILE.gguf [--llama-server PATH] [--threads 2]
                               [--requests 60] [--rounds 3]

Loopback only; every request and the run are bounded in time.
"""
import argparse
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
from serve_peers import FFN, LLAMA_SERVER, free_port, start, stop_all  # noqa: E402
from traffic import drop_mid_body, drop_mid_stream, random_request, request, slow_client  # noqa: E402


def one_round(port, seed, n):
    rng = random.Random(seed)
    wellformed = [random_request(rng) for _ in range(n)]
    slow_path, slow_body = random_request(rng)
    lat, tokens, answered = [], [0], [0]
    lock = threading.Lock()

    def client(k):
        for i in range(k, n, 6):
            path, body = wellformed[i]
            t0 = time.time()
            try:
                st, _, b = request(port, path, body)
            except Exception:  # noqa: BLE001
                continue
            if st != 200:
                continue
            usage = (b[-2] if isinstance(b, list) and len(b) > 1 and isinstance(b[-2], dict) else b)
            usage = usage.get("usage") if isinstance(usage, dict) else None
            with lock:
                lat.append(time.time() - t0)
                answered[0] += 1
                tokens[0] += (usage or {}).get("completion_tokens", 0)

    def burst():
        try:
            request(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "burst"}], "max_tokens": 16,
                                                   "seed": 5})
        except Exception:  # noqa: BLE001
            pass

    def faults():
        try:
            drop_mid_stream(port, {"messages": [{"role": "user", "content": "tell me"}], "max_tokens": 100,
                                   "stream": True, "seed": 1})
            drop_mid_body(port)
            slow_client(port, slow_path, slow_body)
        except Exception:  # noqa: BLE001
            pass
    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)] + [threading.Thread(target=faults)]
    threads += [threading.Thread(target=burst) for _ in range(36)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads[:6]:
        t.join(600)
    wall = time.time() - t0
    for t in threads[6:]:
        t.join(600)
    lat.sort()
    pct = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]) if lat else (lambda q: float("nan"))
    return {"requests_per_s": answered[0] / wall, "tokens_per_s": tokens[0] / wall, "answered": answered[0],
            "p50": pct(0.5), "p99": pct(0.99)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--llama-server", default=LLAMA_SERVER)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    pf, pl = free_port(), free_port()
    servers = {
        "ffn": [FFN, "serve", "--model", a.model, "--port", str(pf), "--threads", str(a.threads), "--parallel", "4",
                "--queue", "64", "--context", "2048", "--log-format", "none"],
        "llama-server": [a.llama_server, "-m", a.model, "--port", str(pl), "--host", "127.0.0.1", "-t", str(a.threads),
                         "-tb", str(a.threads), "--parallel", "4", "--ctx-size", str(4 * 2048), "--cont-batching",
                         "--threads-http", "64", "--timeout", "30", "--no-webui"],
    }
    ports = {"ffn": pf, "llama-server": pl}
    procs, results = {}, {n: [] for n in servers}
    try:
        for name in servers:
            procs[name] = start(servers[name], ports[name])
        for r in range(a.rounds):
            for name in (servers if r % 2 == 0 else list(servers)[::-1]):
                res = one_round(ports[name], 1000 + r, a.requests)
                results[name].append(res)
                print(f"round {r} {name:12s} {res['answered']:3d} answered, {res['requests_per_s']:6.2f} req/s, "
                      f"{res['tokens_per_s']:7.1f} tokens/s, p50 {res['p50'] * 1e3:6.0f} ms, p99 {res['p99'] * 1e3:6.0f} ms",
                      flush=True)
    finally:
        stop_all(procs)
    med = {n: {k: statistics.median(x[k] for x in results[n]) for k in results[n][0]} for n in servers}
    f, l = med["ffn"], med["llama-server"]
    print(f"\nmedians of {a.rounds} rounds; {os.path.basename(a.model)}, {a.threads} threads, {a.requests} well-formed "
          f"requests a round with the faults and a burst of 36")
    print("| server | well-formed answered | requests/s | generated tokens/s | p50 | p99 |")
    print("|---|---|---|---|---|---|")
    for n, m in med.items():
        print(f"| {n} | {m['answered']:.0f} | {m['requests_per_s']:.2f} | {m['tokens_per_s']:.1f} | "
              f"{m['p50'] * 1e3:.0f} ms | {m['p99'] * 1e3:.0f} ms |")
    print(f"ffn / llama-server: {f['requests_per_s'] / l['requests_per_s']:.2f}x requests/s, "
          f"{f['tokens_per_s'] / l['tokens_per_s']:.2f}x tokens/s, p99 {f['p99'] / l['p99']:.2f}x")


if __name__ == "__main__":
    main()
