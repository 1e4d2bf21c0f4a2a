#!/usr/bin/env python3
"""Writes a small LLaMA GGUF in the K-quants, 16-bit and dequantize-only
types, and what transformers 4.46.3 makes of it, for
tests/models/test_causal_lm.cpp (issue 47):

    .venv/bin/python scripts/make_llama_k_gguf_golden.py tests/data/gguf

llama_k.gguf: a random-weight LlamaForCausalLM (make_llama_gguf_golden.py's
tokenizer and vocabulary of 300, d_model 256, 4 query heads sharing 2
key/value heads, d_ff 512, 3 layers, tied embeddings, θ 10000) with W_Q and
W_K rows in llama.cpp's rotary order, in these types (rows of 256 and 512:
whole K-quant blocks):
  token_embd  Q6_K (the tied head and the embedding rows, as a Q4_K_M file)
  layer 0     attn_q Q4_K, attn_k Q5_K, attn_v Q6_K (one Q|K|V product of
              three native parts), attn_output Q4_K, ffn_gate Q5_K, ffn_up
              Q4_K, ffn_down Q6_K
  layer 1     attn_q, attn_k, attn_v F16 (16-bit panels), attn_output IQ4_XS
              (dequantized to float32), ffn_gate, ffn_up BF16, ffn_down Q3_K
  layer 2     attn_q Q5_0, attn_k Q5_1, attn_v IQ4_NL (a part without native
              compute: the product in float32), attn_output Q2_K, ffn_gate
              Q5_0, ffn_up Q5_1, ffn_down Q8_0
  norms       F32
The K-quants are quantized here (gguf 0.10.0 has no K-quant quantizer): per
sub-block the scale and minimum of llama.cpp's simplest rule (range / levels),
the 6-bit (Q4_K, Q5_K) or 8-bit (Q6_K) sub-block scales rounded to nearest.
The dequantize-only K and IQ types are written by gguf's own quantizer where
it has one (IQ4_NL, IQ4_XS: none either) or from random bytes with small
finite scales: their weights are whatever the blocks say, the same for ffn
and for transformers.

llama_k.json: prompt id lists of 1 to 40 tokens and the float32 logits of
transformers' model from the GGUF after every position (its loader
dequantizes every type with gguf-py).

fuzz/corpus/gguf/llama_k.gguf: the same with one layer (layer 0's types) and
d_ff 256, a seed for fuzz/fuzz_gguf.cpp.
"""
import json
import os
import sys

import numpy as np
import torch

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import quantize  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_golden import redraw  # noqa: E402
from make_llama_gguf_golden import llama_writer, permute, tokenizer  # noqa: E402


def f16(x):
    return np.asarray(x, dtype=np.float16).reshape(-1, 1).view(np.uint8)


def scale_bytes_k4(sc, mn):
    """8 six-bit scales and minimums into ggml's 12 bytes (inverse of get_scale_min_k4)."""
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    for j in range(4):
        out[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        out[:, j + 4] = (mn[:, j] & 63) | ((mn[:, j + 4] >> 4) << 6)
        out[:, j + 8] = (sc[:, j + 4] & 15) | ((mn[:, j + 4] & 15) << 4)
    return out


def quantize_k45(x, five):
    """Q4_K (five=False) or Q5_K blocks of x [n, 256]: per sub-block of 32, scale (max − min) / levels and
    minimum −min (≥ 0), the scales and minimums on a 6-bit grid of d and dmin."""
    levels = 31 if five else 15
    s = x.reshape(-1, 8, 32)
    lo = np.minimum(s.min(axis=2), 0)
    hi = s.max(axis=2)
    scale = (hi - lo) / levels
    d = np.maximum(scale.max(axis=1), 1e-8) / 63
    dmin = np.maximum((-lo).max(axis=1), 1e-8) / 63
    d16, dmin16 = d.astype(np.float16), dmin.astype(np.float16)
    sc = np.clip(np.round(scale / d16.astype(np.float32)[:, None]), 1, 63).astype(np.uint8)
    mn = np.clip(np.round(-lo / dmin16.astype(np.float32)[:, None]), 0, 63).astype(np.uint8)
    dl = d16.astype(np.float32)[:, None] * sc
    ml = dmin16.astype(np.float32)[:, None] * mn
    q = np.clip(np.round((s + ml[:, :, None]) / dl[:, :, None]), 0, levels).astype(np.uint8)
    n = x.shape[0]
    # qs: pair p (sub-blocks 2p, 2p + 1): byte l = q[2p][l] | q[2p + 1][l] << 4 (low 4 bits)
    qs = ((q[:, 0::2, :] & 15) | ((q[:, 1::2, :] & 15) << 4)).reshape(n, 128)
    parts = [f16(d16), f16(dmin16), scale_bytes_k4(sc, mn)]
    if five:  # qh[l] bit j: sub-block j's fifth bit of weight l
        qh = np.zeros((n, 32), dtype=np.uint8)
        for j in range(8):
            qh |= ((q[:, j, :] >> 4) & 1).astype(np.uint8) << j
        parts.append(qh)
    parts.append(qs)
    return np.concatenate(parts, axis=1)


def quantize_k6(x):
    """Q6_K blocks of x [n, 256]: 16 sub-blocks of 16, scale max|x| / 31 on an 8-bit grid of d."""
    s = x.reshape(-1, 16, 16)
    scale = np.abs(s).max(axis=2) / 31
    d = np.maximum(scale.max(axis=1), 1e-8) / 127
    d16 = d.astype(np.float16)
    sc = np.clip(np.round(scale / d16.astype(np.float32)[:, None]), 1, 127).astype(np.int8)
    dl = d16.astype(np.float32)[:, None] * sc
    q = (np.clip(np.round(s / dl[:, :, None]), -32, 31) + 32).astype(np.uint8).reshape(-1, 256)
    n = x.shape[0]
    ql = np.zeros((n, 128), dtype=np.uint8)
    qh = np.zeros((n, 64), dtype=np.uint8)
    for h in range(2):  # dequantize_row_q6_K's layout, half h of 128 weights
        w = q[:, 128 * h:128 * h + 128]
        for l in range(32):
            q1, q2, q3, q4 = w[:, l], w[:, l + 32], w[:, l + 64], w[:, l + 96]
            ql[:, 64 * h + l] = (q1 & 15) | ((q3 & 15) << 4)
            ql[:, 64 * h + l + 32] = (q2 & 15) | ((q4 & 15) << 4)
            qh[:, 32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    return np.concatenate([ql, qh, sc.view(np.uint8), f16(d16)], axis=1)


def random_blocks(rows, cols, qtype, rng, d=2e-3):
    """Random bytes with every f16 scale field set to ±d·U(0.5, 1): the dequantize-only types."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = rows * cols // block
    b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    fields = {T.Q2_K: [80, 82], T.Q3_K: [108], T.IQ4_NL: [0], T.IQ4_XS: [0]}[qtype]
    for at in fields:
        b[:, at:at + 2] = f16((d * rng.uniform(0.5, 1.0, size=n) * rng.choice([-1, 1], size=n)).astype(np.float16))
    if qtype == T.Q2_K:  # scales: low nibble the scale, high the minimum; keep the minimums small
        b[:, :16] &= 0x3F
    return b.reshape(rows, -1)


def main(out, small=None):
    """small: also write a one-layer file of the K-quants there (d_ff 256: the fuzz target's seed)."""
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(47)
    rng = np.random.default_rng(47)
    tokens, types, merges = tokenizer()
    V = len(tokens)

    layers, d_ff = (1, 256) if small else (3, 512)
    cfg = LlamaConfig(vocab_size=V, hidden_size=256, intermediate_size=d_ff, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, max_position_embeddings=128, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    redraw(model, g)

    path = small or os.path.join(out, "llama_k.gguf")
    w = llama_writer(path, "ffn test llama k-quants", cfg, tokens, types, merges)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}

    def add(name, arr, qtype):
        rows, cols = arr.shape if arr.ndim == 2 else (1, arr.shape[0])
        if qtype == T.F32:
            w.add_tensor(name, arr)
        elif qtype == T.F16:
            w.add_tensor(name, arr.astype(np.float16))
        elif qtype in (T.Q4_K, T.Q5_K):
            w.add_tensor(name, quantize_k45(arr.reshape(-1, 256), qtype == T.Q5_K).reshape(rows, -1), raw_dtype=qtype)
        elif qtype == T.Q6_K:
            w.add_tensor(name, quantize_k6(arr.reshape(-1, 256)).reshape(rows, -1), raw_dtype=qtype)
        elif qtype in (T.Q2_K, T.Q3_K, T.IQ4_NL, T.IQ4_XS):
            w.add_tensor(name, random_blocks(rows, cols, qtype, rng), raw_dtype=qtype)
        else:  # Q5_0, Q5_1, Q8_0, BF16: gguf's own quantizer
            w.add_tensor(name, quantize(arr, qtype), raw_dtype=qtype)

    layer_types = [
        dict(q=T.Q4_K, k=T.Q5_K, v=T.Q6_K, o=T.Q4_K, gate=T.Q5_K, up=T.Q4_K, down=T.Q6_K),
        dict(q=T.F16, k=T.F16, v=T.F16, o=T.IQ4_XS, gate=T.BF16, up=T.BF16, down=T.Q3_K),
        dict(q=T.Q5_0, k=T.Q5_1, v=T.IQ4_NL, o=T.Q2_K, gate=T.Q5_0, up=T.Q5_1, down=T.Q8_0),
    ]
    add("token_embd.weight", sd["model.embed_tokens.weight"], T.Q6_K)
    add("output_norm.weight", sd["model.norm.weight"], T.F32)
    for l, lt in enumerate(layer_types[:cfg.num_hidden_layers]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        add(b + "attn_norm.weight", sd[p + "input_layernorm.weight"], T.F32)
        add(b + "attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads), lt["q"])
        add(b + "attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads), lt["k"])
        add(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"], lt["v"])
        add(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"], lt["o"])
        add(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], T.F32)
        add(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"], lt["gate"])
        add(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"], lt["up"])
        add(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"], lt["down"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if small:
        print(f"{path}: {os.path.getsize(path)} bytes")
        return

    # The oracle: what transformers makes of the file.
    hf = AutoModelForCausalLM.from_pretrained(out, gguf_file="llama_k.gguf", torch_dtype=torch.float32).eval()
    hf.lm_head.weight = hf.model.embed_tokens.weight  # 4.46.3 leaves a tied GGUF head untied
    # The K-quantizer above is close to the weights it was given (a check of the packing, not a test of ffn).
    deq = hf.model.layers[0].mlp.down_proj.weight.detach().numpy()
    ref = sd["model.layers.0.mlp.down_proj.weight"]
    rel = float(np.abs(deq - ref).max() / np.abs(ref).max())
    assert rel < 0.1, f"Q6_K packing: relative error {rel}"
    deq = hf.model.layers[0].self_attn.o_proj.weight.detach().numpy()
    ref = sd["model.layers.0.self_attn.o_proj.weight"]
    rel4 = float(np.abs(deq - ref).max() / np.abs(ref).max())
    assert rel4 < 0.2, f"Q4_K packing: relative error {rel4}"
    cases = {"prompts": [], "logits": []}
    for n in (1, 3, 17, 40):
        ids = torch.randint(0, V, (1, n), generator=g)
        with torch.no_grad():
            cases["logits"].append(hf(ids).logits[0].float().numpy().round(6).tolist())
        cases["prompts"].append(ids[0].tolist())
    with open(os.path.join(out, "llama_k.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)
    print(f"{path}: {os.path.getsize(path)} bytes; Q6_K, Q4_K packing error {rel:.3f}, {rel4:.3f} of the largest weight")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/gguf"
    main(out)
    main(out, small=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus", "gguf",
                                 "llama_k.gguf"))
