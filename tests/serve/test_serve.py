#!/usr/bin/env python3
"""`ffn serve` end to end, through the official `openai` client (pinned in
.venv by scripts/setup.sh) and plain HTTP, on loopback only:

1. A random LLaMA directory of tests/data/llama with a ChatML template
   (always): /health, /v1/models; chat and completions, plain and streamed
   (role chunk, content, finish, usage, [DONE]), equal to each other and to
   `ffn generate` with the same prompt, settings and seed (greedy and
   sampled); logprobs of a request among 7 concurrent others bitwise those it
   gets alone; a cached prefix reported in usage; /tokenize, /detokenize,
   /apply-template; errors as openai.APIStatusError with the documented
   status and an error object naming the field (400s, 404, 413); a client
   that disconnects mid-stream cancels its sequence (/metrics: 0 running);
   the README's curl examples, run as written (port substituted);
   /v1/translations (tests/data/marian_text) equal to transformers' greedy and
   beam-search texts.
2. A second server with --api-key, --parallel 1 --queue 1: 401 without or
   with a wrong key; 503 with Retry-After when the queue is full; SIGTERM
   while a request streams lets it finish, then exit 0.
3. all-MiniLM-L6-v2 (when scripts/setup.sh installed it; skipped, saying
   so, otherwise): /v1/embeddings float and base64 bitwise `ffn embed`'s.
4. A cross-encoder and an embedding model with prompts (tests/data):
   /v1/rerank and /rerank equal `ffn rerank --json`; the default prompt.

    python tests/serve/test_serve.py FFN_BINARY DATA_DIR
Exit 0 pass, 1 fail, 77 skipped (no openai client, or ffn built without cpp-httplib).
"""
import base64
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, free_port, metrics_text, post  # noqa: E402

try:
    import openai
except ImportError:
    print("SKIPPED: serve: the openai client is not importable (scripts/setup.sh installs it in .venv)")
    sys.exit(77)

FFN, DATA = sys.argv[1], sys.argv[2]
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MINILM = os.environ.get("FFN_MODEL_DIR", os.path.expanduser("~/.cache/ffn/all-MiniLM-L6-v2"))
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


Server.ffn = FFN


def check_metrics_and_log(s, chat_ok, streamed_tokens):
    """/metrics and the access log after main_server's traffic (issue 67): the
    requests by endpoint and status, the latency histograms (cumulative
    buckets ending at +Inf = count), KV pages used + free = total; one log
    line per request with its tokens, and no prompt text (no --log-prompts)."""
    text = metrics_text(s.url)
    series = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(ffn:[^ ]+) (\S+)$", text, re.M)}
    ok_chat = series.get('ffn:http_requests_total{handler="/v1/chat/completions",method="POST",status="200"}', 0)
    check(ok_chat >= chat_ok, f"metrics: {ok_chat} chat requests with 200, at least {chat_ok} were made")
    check(series.get('ffn:http_requests_total{handler="/v1/chat/completions",method="POST",status="400"}', 0) >= 8,
          "metrics: the 400s counted")
    check(series.get('ffn:http_requests_total{handler="other",method="POST",status="404"}', 0) >= 1,
          "metrics: an unknown path counted as handler=\"other\"")
    for h in ("time_to_first_token", "inter_token_latency", "e2e_request_latency"):
        name = f"ffn:{h}_seconds"
        buckets = [(m.group(1), float(m.group(2)))
                   for m in re.finditer(r"^" + re.escape(name) + r'_bucket\{le="([^"]+)"\} (\S+)$', text, re.M)]
        counts = [c for _, c in buckets]
        check(len(buckets) > 5 and buckets[-1][0] == "+Inf" and counts == sorted(counts)
              and counts[-1] == series.get(name + "_count") and counts[-1] >= 1,
              f"metrics: {name} is a histogram with observations ({buckets[-3:]})")
    check(series["ffn:kv_pages_used"] + series["ffn:kv_pages_free"] == series["ffn:kv_pages_total"],
          "metrics: KV pages used + free = total")
    check(series.get('ffn:request_success_total{finished_reason="length"}', 0)
          + series.get('ffn:request_success_total{finished_reason="stop"}', 0) >= chat_ok, "metrics: successes")
    log = s.log()
    lines = [l for l in log.splitlines() if '"POST /v1/chat/completions" 200' in l]
    check(len(lines) >= chat_ok, f"access log: {len(lines)} chat lines for at least {chat_ok} requests")
    check(all(re.search(r"prompt_tokens=\d+ generated_tokens=\d+ \d+\.\d{3}s$", l) for l in lines),
          f"access log: tokens and time on every chat line ({lines[:1]})")
    check(any(f"generated_tokens={streamed_tokens} " in l for l in lines), "access log: a stream's tokens, counted at its end")
    check(re.search(r'"POST /v1/nothing" 404 \d+\.\d{3}s', log) is not None, "access log: the 404")
    check("Hello there" not in log and "Be brief" not in log, "access log: no prompt text without --log-prompts")


def metrics(url):
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(ffn:\w+) (\S+)$", metrics_text(url), re.M)}


def ffn_generate(model, *args):
    # (A random model's text can hold bytes that are not UTF-8: the server's
    # JSON has U+FFFD for each invalid sequence, as Python's "replace".)
    r = subprocess.run([FFN, "generate", "--model", model, *args], capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode(errors="replace"))
    out = r.stdout[:-1] if r.stdout.endswith(b"\n") else r.stdout
    return out.decode("utf-8", errors="replace")


def expect_status(fn, status, param=None, what=""):
    try:
        fn()
    except openai.APIStatusError as e:
        check(e.status_code == status, f"{what}: status {e.status_code}, expected {status}")
        body = e.body if isinstance(e.body, dict) else {}
        err = body.get("error", body)  # (the client may give the error object itself)
        if param is not None:
            check(isinstance(err, dict) and err.get("param") == param, f"{what}: param {err!r}, expected {param}")
        return
    check(False, f"{what}: no error, expected {status}")


def main_server(model_dir):
    marian = os.path.join(DATA, "marian_text")
    s = Server("--model", model_dir, "--translation-model", marian, "--parallel", "4", "--threads", "2")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        name = os.path.basename(model_dir)
        models = [m.id for m in c.models.list().data]
        check(models == [name, "marian_text"], f"models: {models}")
        # Translations: transformers' greedy and beam (the generation config's) texts (tests/data/marian_text/cases.json).
        cases = json.load(open(os.path.join(marian, "cases.json"), encoding="utf-8"))
        for beams, want in ((1, cases["greedy_text"]), (None, cases["beam_text"])):
            st, _, body = post(s.url + "/v1/translations", {"input": cases["translated_texts"],
                                                            **({"beams": beams} if beams else {})})
            got = [d["text"] for d in json.loads(body)["data"]] if st == 200 else body
            check(got == want, f"translations (beams {beams}): {got!r:.300}")
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
        r = c.chat.completions.create(model=name, messages=msgs, max_tokens=12)
        text = r.choices[0].message.content
        check(r.choices[0].finish_reason in ("stop", "length"), "chat finish_reason")
        check(r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, f"chat usage {r.usage}")
        check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "chat total_tokens")
        # The same request streamed: role chunk, content, finish, usage.
        chunks = list(c.chat.completions.create(model=name, messages=msgs, max_tokens=12, stream=True,
                                                stream_options={"include_usage": True}))
        check(chunks[0].choices[0].delta.role == "assistant", "stream: the first chunk names the role")
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        check(streamed == text, f"stream: {streamed!r} != {text!r}")
        finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        check(finishes == [r.choices[0].finish_reason], f"stream finish {finishes}")
        check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens,
              "stream: the last chunk carries usage")
        # The second time the conversation's prefix is cached.
        check(chunks[-1].usage.prompt_tokens_details.cached_tokens > 0, "cached_tokens after the same prompt")
        # Against ffn generate: the same messages, greedy and sampled.
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(msgs, f)
        try:
            check(ffn_generate(model_dir, "--messages", f.name, "--max-new-tokens", "12") == text,
                  "chat == ffn generate --messages (greedy)")
            rs = c.chat.completions.create(model=name, messages=msgs, max_tokens=12, temperature=0.9, top_p=0.9,
                                           seed=42, extra_body={"top_k": 20, "min_p": 0.05})
            check(ffn_generate(model_dir, "--messages", f.name, "--max-new-tokens", "12", "--temperature", "0.9",
                               "--top-p", "0.9", "--seed", "42", "--top-k", "20", "--min-p", "0.05")
                  == rs.choices[0].message.content, "chat == ffn generate --messages (sampled, seed 42)")
        finally:
            os.unlink(f.name)
        # Completions: text and token ids, against ffn generate.
        cr = c.completions.create(model=name, prompt="The quick brown fox", max_tokens=10, temperature=0.7, seed=3,
                                  frequency_penalty=0.5, presence_penalty=0.2)
        check(cr.choices[0].text == ffn_generate(model_dir, "The quick brown fox", "--max-new-tokens", "10",
                                                 "--temperature", "0.7", "--seed", "3", "--frequency-penalty", "0.5",
                                                 "--presence-penalty", "0.2"),
              "completion == ffn generate (sampled, penalties)")
        ci = c.completions.create(model=name, prompt=[5, 17, 42, 8], max_tokens=6, logprobs=2)
        check(len(ci.choices[0].logprobs.tokens) == ci.usage.completion_tokens, "completion logprobs: one per token")
        # Batch invariance over HTTP: a request's logprobs alone and among 7 concurrent others, bit for bit.
        req = dict(model=name, messages=[{"role": "user", "content": "Tell me a story"}], max_tokens=16,
                   temperature=1.0, seed=7, logprobs=True, top_logprobs=3)

        def lps(resp):
            return [(t.token, t.logprob, [(x.token, x.logprob) for x in t.top_logprobs])
                    for t in resp.choices[0].logprobs.content]
        ref = lps(c.chat.completions.create(**req))
        results = {}

        def other(i):
            results[i] = c.chat.completions.create(model=name, max_tokens=4 + 3 * i, seed=i, temperature=0.5,
                                                   messages=[{"role": "user", "content": "word " * (5 + 9 * i)}])
        threads = [threading.Thread(target=other, args=(i,)) for i in range(7)]
        for i, t in enumerate(threads):
            t.start()
            if i == 3:
                crowd = c.chat.completions.create(**req)
        for t in threads:
            t.join()
        check(lps(crowd) == ref, "logprobs among 7 others == alone (bitwise)")
        check(len(results) == 7, "the 7 others were answered")
        # llama-server's extras.
        st, _, body = post(s.url + "/tokenize", {"content": "Hello world"})
        toks = json.loads(body)["tokens"]
        st2, _, body2 = post(s.url + "/detokenize", {"tokens": toks})
        check(st == 200 and st2 == 200 and json.loads(body2)["content"] == "Hello world", "tokenize/detokenize")
        st, _, body = post(s.url + "/apply-template", {"messages": msgs})
        check(st == 200 and json.loads(body)["prompt"].endswith("<|im_start|>assistant\n"), "apply-template")
        # Errors: the documented status and the field.
        expect_status(lambda: c.chat.completions.create(model=name, messages=[]), 400, "messages", "empty messages")
        expect_status(lambda: c.chat.completions.create(model=name, messages=[{"role": "user"}]), 400,
                      "messages[0].content", "a message without content")
        expect_status(lambda: c.chat.completions.create(model=name, messages=msgs, n=2), 400, "n", "n = 2")
        expect_status(lambda: c.chat.completions.create(model=name, messages=[{"role": "user", "content": [{"type": 1}]}]),
                      400, "messages[0].content[0]", "a content part whose type is not a string")
        expect_status(lambda: c.chat.completions.create(model="gpt-4", messages=msgs), 400, "model", "unknown model")
        expect_status(lambda: c.chat.completions.create(model=name, messages=msgs, max_tokens=-1), 400, "max_tokens",
                      "negative max_tokens")
        expect_status(lambda: c.chat.completions.create(model=name, messages=msgs, max_tokens=100000), 400,
                      "max_tokens", "past the context")
        expect_status(lambda: c.chat.completions.create(model=name, messages=msgs, temperature="hot"), 400,
                      "temperature", "a wrong type")
        expect_status(lambda: c.embeddings.create(model=name, input="x"), 400, "model", "no embedding model")
        st, _, body = post(s.url + "/v1/chat/completions", None, raw=b'{"messages": [')
        check(st == 400 and "error" in json.loads(body), f"malformed JSON: {st}")
        st, _, body = post(s.url + "/v1/chat/completions", None,
                           raw=b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}')
        check(st == 400 and "error" in json.loads(body), f"invalid UTF-8: {st} {body}")
        st, _, body = post(s.url + "/v1/chat/completions", None,
                           raw=b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e999}')
        check(st == 400 and "error" in json.loads(body), f"a number past double's range: {st} {body[:200]}")
        st, _, body = post(s.url + "/v1/chat/completions", None, raw=b'{"messages": ' + b"[" * 100000 + b"]" * 100000 + b"}")
        check(st == 400 and "nests" in body, f"deep nesting: {st} {body[:200]}")
        st, _, body = post(s.url + "/v1/chat/completions", None, raw=b'{"x": "' + b"a" * (17 << 20) + b'"}')
        check(st == 413, f"a body past the limit: {st}")
        st, _, _ = post(s.url + "/v1/nothing", {})
        check(st == 404, f"unknown endpoint: {st}")
        # A client that disconnects mid-stream: its sequence is cancelled.
        stream = c.chat.completions.create(model=name, messages=msgs, max_tokens=100, stream=True)
        next(iter(stream))
        stream.close()
        deadline = time.time() + 10
        while time.time() < deadline and metrics(s.url)["ffn:num_requests_running"] != 0:
            time.sleep(0.05)
        check(metrics(s.url)["ffn:num_requests_running"] == 0, "a disconnected stream's sequence ended")
        # The README's curl examples, as written but for the port.
        readme = open(os.path.join(ROOT, "README.md")).read()
        section = readme[readme.index("## Serving"):]
        section = section[:section.index("\n## ", 4)]
        curls = [b for b in re.findall(r"```sh\n(.*?)```", section, re.S) if b.lstrip().startswith("curl")]
        check(len(curls) >= 1, "the README's serve section has a curl example")
        for block in curls:
            cmd = block.replace("localhost:8080", f"127.0.0.1:{s.port}").replace("MODEL", name)
            out = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True, text=True, timeout=60)
            check(out.returncode == 0 and "choices" in out.stdout, f"README curl: {out.stdout[:200]} {out.stderr[:200]}")
        check_metrics_and_log(s, 3, chunks[-1].usage.completion_tokens)
    finally:
        rc = s.stop()
        check(rc == 0, f"SIGTERM: exit {rc}")


def guarded_server(model_dir):
    s = Server("--model", model_dir, "--parallel", "1", "--queue", "1", "--api-key", "sekrit", "--threads", "1",
               "--log-format", "json", "--log-prompts")
    try:
        name = os.path.basename(model_dir)
        msgs = [{"role": "user", "content": "Hi"}]
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
        expect_status(lambda: bad.chat.completions.create(model=name, messages=msgs), 401, None, "a wrong key")
        st, _, _ = post(s.url + "/v1/chat/completions", {"messages": msgs})
        check(st == 401, f"no key: {st}")
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="sekrit", max_retries=0)
        # One runs, one waits: of a burst of 16 at once, some are refused with 503 and Retry-After, the rest answered.
        answers = []
        gate = threading.Barrier(16)

        def burst():
            gate.wait()
            answers.append(post(s.url + "/v1/chat/completions", {"messages": msgs, "max_tokens": 200},
                                headers={"Authorization": "Bearer sekrit"}))
        threads = [threading.Thread(target=burst) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refused = [a for a in answers if a[0] == 503]
        check(len(answers) == 16 and all(a[0] in (200, 503) for a in answers), f"burst: {[a[0] for a in answers]}")
        check(len(refused) > 0 and all("Retry-After" in a[1] and json.loads(a[2])["error"]["code"] == "queue_full"
                                       for a in refused), f"queue full: {[a[0] for a in answers]}")
        first = iter(c.chat.completions.create(model=name, messages=msgs, max_tokens=200, stream=True))
        next(first)
        # SIGTERM while a request streams: it finishes, then the server exits 0.
        s.p.send_signal(signal.SIGTERM)
        rest = "".join(ch.choices[0].delta.content or "" for ch in first if ch.choices)
        check(isinstance(rest, str), "the stream ended")
        rc = s.p.wait(30)
        check(rc == 0, f"SIGTERM during a request: exit {rc}")
        # --log-format json --log-prompts: an object per line, the prompt text in the chats', the 401s logged.
        entries = []
        for line in s.log().splitlines():
            if line.startswith("{"):
                try:
                    entries.append(json.loads(line))
                except ValueError:
                    check(False, f"json access log: {line!r}")
        chats = [e for e in entries if e.get("path") == "/v1/chat/completions"]
        check(any(e["status"] == 401 for e in chats) and any(e["status"] == 200 for e in chats),
              f"json access log: 401s and 200s ({[e['status'] for e in chats]})")
        check(all("Hi" in e.get("prompt", "") and "prompt_tokens" in e for e in chats if e["status"] == 200),
              "json access log: --log-prompts puts the prompt text in")
    finally:
        s.stop()


def embedding_server():
    if not os.path.exists(os.path.join(MINILM, "model.safetensors")):
        print(f"SKIPPED (part): embeddings: {MINILM} is not installed (scripts/setup.sh installs it)")
        return
    s = Server("--embedding-model", MINILM, "--threads", "2")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        texts = ["A man is eating food.", "Ein Mann isst.", "short", "The quick brown fox jumps over the lazy dog " * 5]
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "e.npy")
            subprocess.run([FFN, "embed", "--model", MINILM, "--output", out, *texts], check=True, capture_output=True)
            raw = open(out, "rb").read()
            header_len = struct.unpack("<H", raw[8:10])[0]
            ref = struct.unpack(f"<{(len(raw) - 10 - header_len) // 4}f", raw[10 + header_len:])
        name = os.path.basename(MINILM.rstrip("/"))
        got = c.embeddings.create(model=name, input=texts)
        flat = [x for d in got.data for x in d.embedding]
        check(len(flat) == len(ref) and all(struct.pack("<f", a) == struct.pack("<f", b) for a, b in zip(flat, ref)),
              "embeddings == ffn embed (bitwise)")
        b64 = c.embeddings.create(model=name, input=texts[:1], encoding_format="base64")
        v = b64.data[0].embedding
        if isinstance(v, str):
            v = list(struct.unpack(f"<{len(base64.b64decode(v)) // 4}f", base64.b64decode(v)))
        check(v == list(ref[:len(v)]), "base64 embeddings == float ones")
        check(got.usage.prompt_tokens > 0, "embedding usage")
    finally:
        s.stop()


def rerank_server():
    """A cross-encoder (tests/data/cross_encoder/logits) with a prompt-model
    embedding server of tests/data/pooling: /v1/rerank (llama-server's shape)
    and /rerank (text-embeddings-inference's) equal `ffn rerank --json`'s
    ranking and scores; the embedding model's default prompt applies."""
    ce = os.path.join(DATA, "cross_encoder", "logits")
    emb = os.path.join(DATA, "pooling", "mean_prompts")
    s = Server("--rerank-model", ce, "--embedding-model", emb, "--threads", "1")
    try:
        docs = ["The cat sat on the red book.", "a dog runs fast", "the cat", ""]
        ref = json.loads(subprocess.run([FFN, "rerank", "--model", ce, "--query", "where is the cat", *docs, "--json"],
                                        check=True, capture_output=True, text=True).stdout)
        st, _, body = post(s.url + "/v1/rerank", {"model": "logits", "query": "where is the cat", "documents": docs,
                                                 "top_n": 2, "return_documents": True})
        got = json.loads(body) if st == 200 else {}
        f32 = lambda x: struct.pack("<f", x)  # noqa: E731  (the CLI prints %.9g, the server a double: one float32)
        check(st == 200 and [(r["index"], f32(r["relevance_score"]), r["document"]["text"]) for r in got["results"]]
              == [(r["index"], f32(r["score"]), r["text"]) for r in ref[:2]] and got["usage"]["prompt_tokens"] > 0,
              f"/v1/rerank == ffn rerank, top 2 ({st} {body[:200]})")
        # /rerank as TEI: the logit's sigmoid by default (this model's own activation is Identity), the logit raw.
        st, _, body = post(s.url + "/rerank", {"query": "where is the cat", "texts": docs})
        sig = [(r["index"], 1 / (1 + math.exp(-r["score"]))) for r in ref]
        got = [(r["index"], r["score"]) for r in json.loads(body)] if st == 200 else []
        check(st == 200 and [i for i, _ in got] == [i for i, _ in sig]
              and all(abs(x - y) <= 1e-6 for (_, x), (_, y) in zip(got, sig)),
              f"/rerank (TEI's shape): sigmoid of ffn rerank's scores, same order ({st} {body[:200]})")
        st, _, body = post(s.url + "/rerank", {"query": "where is the cat", "texts": docs, "raw_scores": True})
        check(st == 200 and [(r["index"], f32(r["score"])) for r in json.loads(body)]
              == [(r["index"], f32(r["score"])) for r in ref], f"/rerank raw_scores == ffn rerank ({st} {body[:200]})")
        st, _, body = post(s.url + "/v1/rerank", {"query": "q", "documents": ["a"], "raw_scores": True})
        check(st == 400 and "raw_scores" in body, f"raw_scores on /v1/rerank is refused by name ({st} {body[:200]})")
        st, _, body = post(s.url + "/v1/rerank", {"query": "q"})
        check(st == 400 and "documents" in body, f"a rerank without documents: 400 naming it ({st})")
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        e = c.embeddings.create(model="mean_prompts", input=["a dog"]).data[0].embedding
        out = subprocess.run([FFN, "embed", "--model", emb, "a dog"], check=True, capture_output=True, text=True).stdout
        check(["%.7g" % x for x in e] == out.split(), "/v1/embeddings applies the model's default prompt, as ffn embed")
        q = c.embeddings.create(model="mean_prompts", input=["a dog"], extra_body={"prompt_name": "query"}).data[0].embedding
        out = subprocess.run([FFN, "embed", "--model", emb, "--prompt-name", "query", "a dog"], check=True,
                             capture_output=True, text=True).stdout
        check(["%.7g" % x for x in q] == out.split(), "prompt_name query: ffn embed --prompt-name query's vector")
        st, _, body = post(s.url + "/v1/embeddings", {"input": "x", "prompt_name": "nope"})
        check(st == 400 and "prompt name 'nope'" in body, f"an unknown prompt_name: 400 naming it ({st} {body[:160]})")
    finally:
        s.stop()


def main():
    probe = subprocess.run([FFN, "serve", "--help"], capture_output=True, text=True)
    if "not built" in probe.stdout + probe.stderr:
        print("SKIPPED: serve: ffn was built without cpp-httplib (libcpp-httplib-dev)")
        return 77
    # A model that cannot load: one line naming it, exit 2, no hang (the listener, already started, is stopped).
    bad = subprocess.run([FFN, "serve", "--model", "/nonexistent/m.gguf", "--port", str(free_port())],
                         capture_output=True, text=True, timeout=60)
    check(bad.returncode == 2 and "/nonexistent/m.gguf" in bad.stderr, f"a bad model: {bad.returncode} {bad.stderr}")
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "gqa3_tied")
        shutil.copytree(os.path.join(DATA, "llama", "gqa3_tied"), model)
        with open(os.path.join(model, "chat_template.jinja"), "w") as f:
            f.write(CHATML)
        main_server(model)
        guarded_server(model)
    embedding_server()
    rerank_server()
    print(f"serve: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
