#!/usr/bin/env python3
"""Write random-weight LLaMA GGUF files with the shapes of Llama-3.2-1B.

What it writes (into OUT_DIR, default /root/.cache/ffn/bench/llama1b):
  llama1b-f16.gguf    all matrices F16, norms F32 (the intermediate; about 2.5 GB;
                      removed at the end with --delete-f16)
  llama1b-q4_0.gguf   `llama-quantize llama1b-f16.gguf llama1b-q4_0.gguf Q4_0`
  llama1b-q8_0.gguf   `llama-quantize llama1b-f16.gguf llama1b-q8_0.gguf Q8_0`

Why: for measuring weight-reading speed (ffn against llama.cpp's llama-bench) at
a size that no longer fits in any cache, without downloading a model.  The
weights are random (normal, std 0.02, numpy default_rng(0); RMSNorm weights
N(1, 0.1)), so any quality figure (perplexity, generated text) measured on
these files means nothing; only speed does.

Shapes (Llama-3.2-1B): general.architecture "llama", hidden 2048, 16 layers,
32 heads, 8 KV heads (head dim 64), feed_forward_length 8192, vocab 128256,
context_length 4096, rope freq_base 500000, rms eps 1e-5, tied embeddings (no
output.weight).  Unlike the real model there are no rope scaling keys and no
rope_freqs tensor (ffn refuses rope scaling).  Tensor names are llama.cpp's
llama arch names (token_embd.weight, blk.N.attn_q.weight, ...).

Tokenizer: a synthetic byte-level BPE ("gpt2", pre "default") vocabulary that
both llama.cpp and ffn load: the 256 GPT-2 byte characters, a few merged
tokens with their merges, "tok<N>" fillers, and ids 128000/128001 as control
tokens <|begin_of_text|>/<|end_of_text|> used as BOS/EOS.

The F16 file is written tensor by tensor (GGUFWriter.add_tensor_info for all,
then write_tensor_data one at a time), so memory stays at about one tensor.

Idempotent: a file that already exists is not written again.

Usage:
  python3 bench/make_1b_gguf.py [OUT_DIR] [LLAMA_CPP_BIN_DIR] [--delete-f16]
LLAMA_CPP_BIN_DIR holds llama-quantize (default: the vendored llama.cpp build
in /root/.cache/ffn/bench/llama_cpp_python-*/vendor/llama.cpp/build/bin).
gguf-py is taken from that same vendored llama.cpp (or from GGUF_PY).
Run it under `nice -n 19` on a shared machine.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time

import numpy as np

BENCH_CACHE = "/root/.cache/ffn/bench"

# Llama-3.2-1B dimensions.
HIDDEN = 2048
LAYERS = 16
HEADS = 32
KV_HEADS = 8
HEAD_DIM = HIDDEN // HEADS  # 64
FFN = 8192
VOCAB = 128256
CONTEXT = 4096
ROPE_BASE = 500000.0
RMS_EPS = 1e-5
BOS_ID = 128000
EOS_ID = 128001


def find_vendored_llama_cpp() -> str | None:
    hits = sorted(glob.glob(os.path.join(BENCH_CACHE, "llama_cpp_python-*", "vendor", "llama.cpp")))
    return hits[-1] if hits else None


def import_gguf():
    path = os.environ.get("GGUF_PY")
    if not path:
        root = find_vendored_llama_cpp()
        if root is None:
            sys.exit(f"no llama_cpp_python-*/vendor/llama.cpp under {BENCH_CACHE}; set GGUF_PY to a gguf-py directory")
        path = os.path.join(root, "gguf-py")
    sys.path.insert(0, path)
    import gguf  # noqa: E402

    return gguf


def gpt2_byte_chars() -> list[str]:
    """The 256 characters GPT-2's byte-level BPE uses for bytes 0..255, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def make_vocab() -> tuple[list[str], list[int], list[str]]:
    tokens = gpt2_byte_chars()
    # A few real merges, each producing a token that is in the vocabulary.
    merges = ["Ġ t", "h e", "i n", "e r", "Ġ a", "o n", "t h", "Ġt he"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    while len(tokens) < BOS_ID:
        tokens.append(f"tok{len(tokens)}")
    tokens.append("<|begin_of_text|>")
    tokens.append("<|end_of_text|>")
    while len(tokens) < VOCAB:
        tokens.append(f"tok{len(tokens)}")
    assert len(tokens) == VOCAB and len(set(tokens)) == VOCAB
    types = [1] * VOCAB  # normal
    types[BOS_ID] = 3  # control
    types[EOS_ID] = 3
    return tokens, types, merges


def tensor_specs() -> list[tuple[str, tuple[int, ...], str]]:
    """(name, numpy shape (rows, cols), kind) in file order; GGUF ne is the reverse of the numpy shape."""
    specs: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (VOCAB, HIDDEN), "mat")]
    for i in range(LAYERS):
        p = f"blk.{i}."
        specs += [
            (p + "attn_norm.weight", (HIDDEN,), "norm"),
            (p + "attn_q.weight", (HEADS * HEAD_DIM, HIDDEN), "mat"),
            (p + "attn_k.weight", (KV_HEADS * HEAD_DIM, HIDDEN), "mat"),
            (p + "attn_v.weight", (KV_HEADS * HEAD_DIM, HIDDEN), "mat"),
            (p + "attn_output.weight", (HIDDEN, HEADS * HEAD_DIM), "mat"),
            (p + "ffn_norm.weight", (HIDDEN,), "norm"),
            (p + "ffn_gate.weight", (FFN, HIDDEN), "mat"),
            (p + "ffn_up.weight", (FFN, HIDDEN), "mat"),
            (p + "ffn_down.weight", (HIDDEN, FFN), "mat"),
        ]
    specs.append(("output_norm.weight", (HIDDEN,), "norm"))
    return specs


def write_f16(gguf, path: str) -> None:
    tmp = path + ".part"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name("llama1b-random")
    w.add_description("Random weights with Llama-3.2-1B shapes, for speed measurements only (ffn bench/make_1b_gguf.py)")
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(VOCAB)

    tokens, types, merges = make_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(True)

    specs = tensor_specs()
    for name, shape, kind in specs:
        dt = np.dtype(np.float16) if kind == "mat" else np.dtype(np.float32)
        w.add_tensor_info(name, shape, dt, int(np.prod(shape)) * dt.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    rng = np.random.default_rng(0)
    t0 = time.time()
    for k, (name, shape, kind) in enumerate(specs):
        if kind == "mat":
            a = rng.standard_normal(shape, dtype=np.float32)
            a *= 0.02
            a = a.astype(np.float16)
        else:
            a = rng.normal(1.0, 0.1, size=shape).astype(np.float32)
        w.write_tensor_data(a)
        del a
        if kind == "mat" and (k == 0 or name.endswith("ffn_down.weight")):
            print(f"  {name} written ({time.time() - t0:.0f} s)", flush=True)
    w.close()
    os.replace(tmp, path)


def quantize(bin_dir: str, src: str, dst: str, qtype: str) -> None:
    exe = os.path.join(bin_dir, "llama-quantize")
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe} not found; build it: make -C <llama.cpp>/build llama-quantize")
    tmp = dst + ".part"
    cmd = [exe, src, tmp, qtype]
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    os.replace(tmp, dst)


def main() -> None:
    root = find_vendored_llama_cpp()
    default_bin = os.path.join(root, "build", "bin") if root else ""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=os.path.join(BENCH_CACHE, "llama1b"))
    ap.add_argument("bin_dir", nargs="?", default=default_bin, help="llama.cpp bin directory holding llama-quantize")
    ap.add_argument("--delete-f16", action="store_true", help="remove llama1b-f16.gguf once both quantized files exist")
    args = ap.parse_args()

    os.makedirs(args.out_dir, exist_ok=True)
    f16 = os.path.join(args.out_dir, "llama1b-f16.gguf")
    outs = {q: os.path.join(args.out_dir, f"llama1b-{q.lower()}.gguf") for q in ("Q4_0", "Q8_0")}

    need_f16 = any(not os.path.exists(p) for p in outs.values())
    if os.path.exists(f16):
        print(f"exists, skipped: {f16}")
    elif need_f16:
        gguf = import_gguf()
        print(f"writing {f16}", flush=True)
        write_f16(gguf, f16)
    for q, p in outs.items():
        if os.path.exists(p):
            print(f"exists, skipped: {p}")
        else:
            quantize(args.bin_dir, f16, p, q)
    if args.delete_f16 and os.path.exists(f16) and all(os.path.exists(p) for p in outs.values()):
        os.remove(f16)
        print(f"removed {f16}")
    for p in [f16, *outs.values()]:
        if os.path.exists(p):
            print(f"{p}: {os.path.getsize(p) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
