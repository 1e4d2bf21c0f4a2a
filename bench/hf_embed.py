#!/usr/bin/env python3
"""The Hugging Face reference timing for `ffn embed`: all-MiniLM-L6-v2
sentence embeddings (tokenize -> BertModel -> mean pooling -> L2 normalize),
end to end from text, in float32 on the CPU.

    .venv/bin/python bench/hf_embed.py [--model DIR] [--threads 2] [--mode throughput|latency]
        [--batch 32] [--sentences 1000] [--write-sentences FILE] [--impl auto|st|hf] [--json]

--mode throughput (default): --sentences deterministic synthetic sentences
  (seeded RNG over the vocabulary's plain lowercase words, each one token,
  so a sentence is 20-120 tokens with [CLS] and [SEP], uniformly; the script
  checks the counts with the tokenizer), encoded in batches of --batch;
  prints sentences/s and tokens/s from the median of --repeats (3) runs
  after --warmup (1). --write-sentences FILE writes the very same sentences,
  one a line (UTF-8), for `ffn embed` to run on.
--mode latency: one 16-token sentence ([CLS] and [SEP] included), one
  encode call at a time; the median of --calls (50) calls after 5 warm-up
  calls, in ms.
--impl auto (default) uses sentence-transformers when it is installed
  (SentenceTransformer(DIR).encode(batch_size=--batch): sorts the sentences
  by length, pads each batch to its longest); hf, or auto without it, runs
  transformers' BertTokenizerFast + BertModel + mean pooling + normalization
  (as scripts/make_minilm_golden.py) on the same length-sorted batches.
Thread pools (OpenMP, MKL, OpenBLAS, torch) are fixed to --threads before
torch is imported. The model is read offline from --model, default
${FFN_MODEL_DIR:-~/.cache/ffn/all-MiniLM-L6-v2} (scripts/setup.sh puts it there).
Run it on an idle machine: with another process busy on the 2 cores,
OpenMP's spin-waiting threads made --threads 2 up to 15x slower (latency
168 ms against 12 ms with OMP_WAIT_POLICY=PASSIVE, measured 2026-11-23 while
a build ran); --threads 1 is not affected.
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--model", default=os.environ.get("FFN_MODEL_DIR") or
               os.path.expanduser("~/.cache/ffn/all-MiniLM-L6-v2"))
p.add_argument("--threads", type=int, default=2)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--sentences", type=int, default=1000)
p.add_argument("--mode", choices=["throughput", "latency"], default="throughput")
p.add_argument("--impl", choices=["auto", "st", "hf"], default="auto")
p.add_argument("--repeats", type=int, default=3, help="throughput runs timed (median)")
p.add_argument("--warmup", type=int, default=1, help="throughput runs before timing")
p.add_argument("--calls", type=int, default=50, help="latency calls timed (median)")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--write-sentences", metavar="FILE", help="write the synthetic sentences, one a line")
p.add_argument("--json", action="store_true")
a = p.parse_args()

# The BLAS under PyTorch keeps its own thread pool, which torch.set_num_threads
# does not limit; fix every pool's size before torch is imported.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(a.threads)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from transformers import BertModel, BertTokenizerFast  # noqa: E402

torch.set_num_threads(a.threads)

st_module = None
if a.impl in ("auto", "st"):
    try:
        import sentence_transformers as st_module
    except ImportError:
        if a.impl == "st":
            sys.exit("hf_embed.py: --impl st but sentence-transformers is not installed")
impl = "sentence-transformers" if st_module is not None else "transformers"

with open(os.path.join(a.model, "sentence_bert_config.json")) as f:
    MAX_LEN = int(json.load(f)["max_seq_length"])
tok = BertTokenizerFast.from_pretrained(a.model, local_files_only=True)


def vocab_words():
    """The vocabulary's plain lowercase ASCII words (2+ letters): each is one token."""
    with open(os.path.join(a.model, "vocab.txt"), encoding="utf-8") as f:
        words = [w.strip() for w in f]
    return [w for w in words if len(w) >= 2 and w.isascii() and w.isalpha() and w.islower()]


def make_sentence(rng, words, tokens):
    """A sentence of exactly `tokens` tokens with [CLS] and [SEP]: capitalized words and a full stop."""
    body = [rng.choice(words) for _ in range(tokens - 3)]
    body[0] = body[0].capitalize()
    return " ".join(body) + "."


def count_tokens(texts):
    return [len(ids) for ids in tok(texts, truncation=True, max_length=MAX_LEN)["input_ids"]]


if st_module is not None:
    model = st_module.SentenceTransformer(a.model, device="cpu")
    model.eval()

    def encode(texts):
        return model.encode(texts, batch_size=a.batch, show_progress_bar=False, convert_to_numpy=True)
else:
    bert = BertModel.from_pretrained(a.model, local_files_only=True, torch_dtype=torch.float32)
    bert.eval()

    def encode(texts):
        # sentence-transformers' order: longest text first, so each batch pads little.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = [None] * len(texts)
        with torch.no_grad():
            for k in range(0, len(texts), a.batch):
                idx = order[k:k + a.batch]
                enc = tok([texts[i].strip() for i in idx], padding=True, truncation=True, max_length=MAX_LEN,
                          return_tensors="pt")
                h = bert(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
                e = F.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)
                for j, i in enumerate(idx):
                    out[i] = e[j]
        return torch.stack(out).numpy()


rng = random.Random(a.seed)
words = vocab_words()
result = {"impl": impl, "mode": a.mode, "threads": a.threads, "model": os.path.basename(os.path.normpath(a.model)),
          "torch": torch.__version__, "transformers": transformers.__version__}
if st_module is not None:
    result["sentence_transformers"] = st_module.__version__

if a.mode == "throughput":
    lengths = [rng.randint(20, 120) for _ in range(a.sentences)]
    texts = [make_sentence(rng, words, n) for n in lengths]
    assert count_tokens(texts) == lengths
    if a.write_sentences:
        with open(a.write_sentences, "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in texts)
    times = []
    for i in range(a.warmup + a.repeats):
        t0 = time.perf_counter()
        encode(texts)
        t = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(t)
    med = statistics.median(times)
    result.update(batch=a.batch, sentences=a.sentences, tokens=sum(lengths), median_s=med, min_s=min(times),
                  max_s=max(times), sentences_per_s=a.sentences / med, tokens_per_s=sum(lengths) / med)
    line = (f"{impl}: {a.sentences} sentences ({sum(lengths)} tokens), batch {a.batch}, {a.threads} threads: "
            f"{result['sentences_per_s']:.1f} sentences/s, {result['tokens_per_s']:.0f} tokens/s "
            f"(median {med:.3f} s of {a.repeats})")
else:
    text = make_sentence(rng, words, 16)
    assert count_tokens([text]) == [16]
    for _ in range(5):
        encode([text])
    times = []
    for _ in range(a.calls):
        t0 = time.perf_counter()
        encode([text])
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    result.update(tokens=16, text=text, calls=a.calls, median_ms=med * 1e3, min_ms=min(times) * 1e3,
                  max_ms=max(times) * 1e3)
    line = (f"{impl}: one 16-token sentence, {a.threads} threads: median {med * 1e3:.2f} ms "
            f"(min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f}, {a.calls} calls)")

print(json.dumps(result) if a.json else line)
