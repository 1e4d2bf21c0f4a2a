"""Issue 48's speed table: one random model shape written as each family's
GGUF (llama, qwen2, qwen3, gemma2, phi3: same d_model, layers, heads, d_ff,
vocabulary and file type), then ffn against itself across families and
against llama.cpp on the same files, 2 threads, alternating rounds.

The shape is SmolLM2-135M's (d 576, 30 layers, 9 heads, 3 KV heads, d_ff
1536), with the llama-spm vocabulary of llama.cpp's models/ (32000 tokens;
scripts/setup.sh extracts it) so that llama.cpp loads every file. Each
family's own parts are there: Qwen2's Q|K|V biases, Qwen3's q/k norms (and
head_dim 64), Gemma 2's post norms, soft-caps and windows (4096, longer than
the run), Phi-3's fused Q|K|V and gate|up (window 2047). Weights are random
F16 (N(0, 0.02)), norms 1, an untied head (as Phi-3's; Gemma 2's is tied in
llama.cpp's graph: there the embedding is the head), then llama-quantize
makes the file type (Q4_0 by default, its own choice for the head: Q6_K in
both cases).

    .venv/bin/python bench/families.py --llama-cpp DIR [--type Q4_0] [--rounds 3]
DIR holds llama-bench and llama-quantize (bench/llm_peers.py builds them).
Files go to ~/.cache/ffn/bench/families/ (reused when present).
Measures `ffn bench --generate --prompt-tokens 64 --new-tokens 128` and
`llama-bench -p 0 -n 128 -d 64`; prints medians and ratios.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from k_quants import ffn, llama  # noqa: E402

OUT = os.path.expanduser("~/.cache/ffn/bench/families")
VOCAB = os.path.expanduser("~/.cache/ffn/llama.cpp-models/ggml-vocab-llama-spm.gguf")
D, LAYERS, HEADS, KV, DFF, HD = 576, 30, 9, 3, 1536, 64
FAMILIES = ["llama", "qwen2", "qwen3", "gemma2", "phi3"]


def write(arch, path):
    import gguf  # the writer's own needs (.venv: gguf, numpy); the benchmark runs on any python3
    import numpy as np
    r = gguf.GGUFReader(VOCAB)

    def field(k):
        f = r.fields[k]
        return [f.parts[i] for i in f.data]
    tokens = [bytes(p).decode("utf-8") for p in field("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in field("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in field("tokenizer.ggml.token_type")]
    V = len(tokens)
    rng = np.random.default_rng(20261127)
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(2048)
    w.add_embedding_length(D)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(DFF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    if arch in ("llama", "phi3"):
        w.add_rope_dimension_count(HD)
    if arch in ("gemma2", "qwen3"):
        w.add_key_length(HD)
        w.add_value_length(HD)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
        w.add_sliding_window(4096)
    if arch == "phi3":
        w.add_rope_scaling_orig_ctx_len(2048)
        w.add_sliding_window(2047)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_file_type(1)  # F16

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n):
        return np.ones(n, dtype=np.float32)
    qd, kvd = HEADS * HD, KV * HD
    w.add_tensor("token_embd.weight", mat(V, D))
    w.add_tensor("output_norm.weight", ones(D))
    for l in range(LAYERS):
        b = f"blk.{l}."
        w.add_tensor(b + "attn_norm.weight", ones(D))
        if arch == "phi3":
            w.add_tensor(b + "attn_qkv.weight", mat(qd + 2 * kvd, D))
        else:
            w.add_tensor(b + "attn_q.weight", mat(qd, D))
            w.add_tensor(b + "attn_k.weight", mat(kvd, D))
            w.add_tensor(b + "attn_v.weight", mat(kvd, D))
        if arch == "qwen2":
            for n, k in (("attn_q.bias", qd), ("attn_k.bias", kvd), ("attn_v.bias", kvd)):
                w.add_tensor(b + n, (rng.standard_normal(k, dtype=np.float32) * 0.02))
        if arch == "qwen3":
            w.add_tensor(b + "attn_q_norm.weight", ones(HD))
            w.add_tensor(b + "attn_k_norm.weight", ones(HD))
        w.add_tensor(b + "attn_output.weight", mat(D, qd))
        if arch == "gemma2":
            w.add_tensor(b + "post_attention_norm.weight", ones(D))
            w.add_tensor(b + "post_ffw_norm.weight", ones(D))
        w.add_tensor(b + "ffn_norm.weight", ones(D))
        if arch == "phi3":
            w.add_tensor(b + "ffn_up.weight", mat(2 * DFF, D))
        else:
            w.add_tensor(b + "ffn_gate.weight", mat(DFF, D))
            w.add_tensor(b + "ffn_up.weight", mat(DFF, D))
        w.add_tensor(b + "ffn_down.weight", mat(D, DFF))
    if arch != "gemma2":  # untied as Phi-3 is; llama.cpp's gemma2 graph ties its head (no output.weight)
        w.add_tensor("output.weight", mat(V, D))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="the directory of llama-bench and llama-quantize")
    ap.add_argument("--ffn", default=os.path.join(ROOT, "build", "bin", "ffn"))
    ap.add_argument("--type", default="Q4_0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--families", default=",".join(FAMILIES))
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    fams = a.families.split(",")
    files = {}
    for f in fams:
        q = os.path.join(OUT, f"{f}-{a.type.lower()}.gguf")
        if not os.path.exists(q):
            f16 = os.path.join(OUT, f"{f}-f16.gguf")
            write(f, f16)
            subprocess.run([os.path.join(a.llama_cpp, "llama-quantize"), f16, q, a.type], check=True,
                           capture_output=True)
            os.remove(f16)
        files[f] = q
    res = {f: {"ffn": [], "llama": []} for f in fams}
    for rnd in range(a.rounds):
        order = fams if rnd % 2 == 0 else fams[::-1]
        for f in order:
            pair = [("ffn", None), ("llama", None)] if rnd % 2 == 0 else [("llama", None), ("ffn", None)]
            for who, _ in pair:
                if who == "ffn":
                    res[f]["ffn"].append(ffn(a.ffn, files[f], 64, 128)["generate_tokens_per_s"])
                else:
                    res[f]["llama"].append(llama(os.path.join(a.llama_cpp, "llama-bench"), files[f], 0, 128, 64))
        print(f"round {rnd + 1} done", flush=True)
    med = statistics.median
    base = med(res["llama"]["ffn"]) if "llama" in res else None
    print(f"| family ({a.type}) | ffn tokens/s | ÷ ffn llama | llama.cpp tokens/s | ffn ÷ llama.cpp (median of pairs) |")
    print("|---|---|---|---|---|")
    for f in fams:
        r = res[f]
        ratio = med([x / y for x, y in zip(r["ffn"], r["llama"])])
        rel = f"{med(r['ffn']) / base:.2f}" if base else "-"
        print(f"| {f} | {med(r['ffn']):.1f} | {rel} | {med(r['llama']):.1f} | {ratio:.2f} |")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
