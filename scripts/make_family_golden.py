#!/usr/bin/env python3
"""Writes random-weight causal LMs of the families beside LLaMA (saved by
transformers as Hugging Face directories) and what transformers makes of
them, for tests/models/test_families.cpp: each family is a StackSpec and a
name table in ffn (src/models/arch_*.cpp), and this is its oracle.

Run with the project's virtual environment (transformers 4.46.3 on Debian's
torch 1.13, as scripts/setup.sh pins):
    .venv/bin/python scripts/make_family_golden.py tests/data/families

For each model NAME it writes NAME/ (config.json, model.safetensors:
save_pretrained; no tokenizer: the tests give ids; llama3_rope, the qwen2
models, gemma2_gguf and phi3 also as NAME.gguf, as llama.cpp's converter writes
them) and, in cases.json, prompt
id lists and the greedy continuation of each (generate, do_sample=False, up
to and including EOS); in cases.safetensors the float32 logits after every
prompt position ("NAME.K" for prompt K). Weights are re-drawn with larger
scales than transformers' init, as scripts/make_llama_golden.py does (its
docstring says why); biases N(0, 0.5), so that a missing or misplaced bias
moves the logits by O(1). The smallest top-2 logit gap over the greedy steps
is printed (a gap below 1e-4 would be a genuine tie).
"""
import json
import math
import os
import sys

import torch
import transformers.generation.utils as gu

gu.is_fsdp_managed_module = lambda module: False  # torch 1.13 lacks fsdp on Python 3.11 (see make_llama_golden.py)
from safetensors.torch import save_file  # noqa: E402
from transformers import (Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM,  # noqa: E402
                          MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

MODELS = {
    # name: (config class, model class, fields): odd sizes, GQA 2 and 3, tied and untied heads.
    "llama_bias": (LlamaConfig, LlamaForCausalLM,
                   dict(hidden_size=56, intermediate_size=90, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                        attention_bias=True, mlp_bias=False, max_position_embeddings=128, vocab_size=211)),
    "qwen2_gqa3": (Qwen2Config, Qwen2ForCausalLM,
                   dict(hidden_size=48, intermediate_size=70, num_hidden_layers=3, num_attention_heads=6,
                        num_key_value_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                        use_sliding_window=False, max_position_embeddings=128, vocab_size=203)),
    "qwen2_mha": (Qwen2Config, Qwen2ForCausalLM,
                  dict(hidden_size=40, intermediate_size=56, num_hidden_layers=2, num_attention_heads=5,
                       num_key_value_heads=5, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                       use_sliding_window=False, max_position_embeddings=128, vocab_size=190)),
    # A window of 5 keys, shorter than the prompts of 6 and 41 tokens and the continuations.
    "mistral_window": (MistralConfig, MistralForCausalLM,
                       dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=1, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                            sliding_window=5, max_position_embeddings=128, vocab_size=197)),
    # Llama 3.1's rotary scaling with an original context of 64 positions, so that head_dim 16's
    # wavelengths fall in all three bands (kept, interpolated, divided by the factor).
    "llama3_rope": (LlamaConfig, LlamaForCausalLM,
                    dict(hidden_size=64, intermediate_size=72, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                         max_position_embeddings=256, vocab_size=205)),
    # Gemma 2: (1 + w) norms before and after each sublayer, GELU-tanh gating, the embedding × √d,
    # query_pre_attn_scalar, attention and final soft-caps (small enough to bend these logits), a
    # window of 5 on the even layers, head_dim 16 ≠ 48 / 4, tied head.
    "gemma2": (Gemma2Config, Gemma2ForCausalLM,
               dict(hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=20, rope_theta=10000.0,
                    rms_norm_eps=1e-6, attn_logit_softcapping=4.0, final_logit_softcapping=6.0, sliding_window=5,
                    hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, max_position_embeddings=128,
                    vocab_size=199)),
    # Gemma 2 as a GGUF holds it: llama.cpp's converter writes no query_pre_attn_scalar (its graph
    # takes head_dim, or d_model / heads for the 46-layer 27B), so here it is head_dim; GQA 3, an
    # odd d_ff, a window of 4 on the even layers (0, 2).
    "gemma2_gguf": (Gemma2Config, Gemma2ForCausalLM,
                    dict(hidden_size=42, intermediate_size=66, num_hidden_layers=3, num_attention_heads=3,
                         num_key_value_heads=1, head_dim=12, query_pre_attn_scalar=12, rope_theta=10000.0,
                         rms_norm_eps=1e-6, attn_logit_softcapping=5.0, final_logit_softcapping=7.0,
                         sliding_window=4, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                         max_position_embeddings=128, vocab_size=187)),
    # Phi-3: W_Q|W_K|W_V and W_gate|W_up fused, GQA 2, untied, a window of 5 keys on every layer.
    "phi3": (Phi3Config, Phi3ForCausalLM,
             dict(hidden_size=48, intermediate_size=70, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  sliding_window=5, max_position_embeddings=128, original_max_position_embeddings=128,
                  pad_token_id=0, vocab_size=190)),
    # Phi-3's longrope (the 128k and Phi-3.5 models): per-frequency factors, short below an original
    # context of 32 positions and long past it (the 41-token prompt), cos and sin scaled by
    # √(1 + ln(256 / 32) / ln 32). MHA, head_dim 12 (6 factors each).
    "phi3_longrope": (Phi3Config, Phi3ForCausalLM,
                      dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=4, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                           sliding_window=None, max_position_embeddings=256, original_max_position_embeddings=32,
                           rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                                         "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]},
                           pad_token_id=0, vocab_size=181)),
}
PROMPT_LENGTHS = [1, 6, 41]
NEW_TOKENS = 12


def redraw(model, g):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name or "embed_tokens" in name:  # Gemma: γ = 1 + w
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            else:
                bound = 2.0 / math.sqrt(p.shape[1]) * (4.0 if ("q_proj" in name or "k_proj" in name) else 1.0)
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)


def permute(w, n_head):  # convert_hf_to_gguf.LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, cfg, path, arch, eot=None, quant=None):
    """The model as llama.cpp's converter writes it (float32 tensors, no tokenizer). gemma2: its
    norms as 1 + w (Gemma2Model.modify_tensors), head_dim as key and value length, the soft-caps and
    the window; its own norm names after the sublayers; no output.weight. llama: W_Q's and
    W_K's rows in its rotary order, and a Llama 3 rule as rope_freqs.weight, one factor per
    frequency (convert_hf_to_gguf.LlamaModel.generate_extra_tensors). qwen2: rows as they are
    (Qwen2Model does not permute; llama.cpp's qwen2 graph uses NeoX rotary order), Q|K|V biases.
    BOS and EOS ids as the converter writes them; eot: tokenizer.ggml.eot_token_id too.
    quant: GGUF tensor name → ggml type for the 2-D weights (gguf-py's quantizer), else float32."""
    import gguf
    import numpy as np
    w = gguf.GGUFWriter(path, arch)
    add_tensor = w.add_tensor

    def add(name, arr):
        qtype = quant(name) if quant and arr.ndim == 2 else None
        if qtype is None:
            add_tensor(name, arr)
        else:
            from gguf.quants import quantize
            add_tensor(name, quantize(arr, qtype), raw_dtype=qtype)
    w.add_tensor = add
    dim = cfg.hidden_size // cfg.num_attention_heads
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if arch == "llama":
        w.add_rope_dimension_count(dim)
    if arch in ("gemma2", "qwen3"):
        dim = cfg.head_dim
        w.add_key_length(dim)
        w.add_value_length(dim)
    if arch == "phi3":
        w.add_rope_dimension_count(dim)
        w.add_rope_scaling_orig_ctx_len(cfg.original_max_position_embeddings)
        w.add_sliding_window(cfg.sliding_window or 0)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)
        w.add_sliding_window(cfg.sliding_window)
    w.add_vocab_size(cfg.vocab_size)
    w.add_bos_token_id(cfg.bos_token_id)
    w.add_eos_token_id(cfg.eos_token_id)
    if eot is not None:
        w.add_eot_token_id(eot)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    if arch == "gemma2":
        sd = {k: v + 1 if k.endswith("norm.weight") else v for k, v in sd.items()}
    rs = getattr(cfg, "rope_scaling", None)
    if rs and arch == "phi3":  # Phi3MiniModel.generate_extra_tensors
        scale = cfg.max_position_embeddings / cfg.original_max_position_embeddings
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(cfg.original_max_position_embeddings))
                                        if scale > 1.0 else 1.0)
        w.add_tensor("rope_factors_long.weight", np.array(rs["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rs["short_factor"], dtype=np.float32))
    elif rs:
        freqs = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        factor, low, high, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
            rs["original_max_position_embeddings"]
        factors = []
        for freq in freqs:
            wavelen = 2 * math.pi / freq
            if wavelen < old / high:
                factors.append(1)
            elif wavelen > old / low:
                factors.append(factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                factors.append(1 / ((1 - smooth) / factor + smooth))
        w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))
    rotary = permute if arch == "llama" else (lambda t, n: t)  # qwen2, qwen3, gemma2: NeoX order as stored
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        w.add_tensor("output.weight", sd["lm_head.weight"])
    for l in range(cfg.num_hidden_layers):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        w.add_tensor(b + "attn_norm.weight", sd[p + "input_layernorm.weight"])
        if arch == "phi3":  # fused, as Phi3MiniModel writes them (gate|up as ffn_up)
            w.add_tensor(b + "attn_qkv.weight", sd[p + "self_attn.qkv_proj.weight"])
            w.add_tensor(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
            w.add_tensor(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
            w.add_tensor(b + "ffn_up.weight", sd[p + "mlp.gate_up_proj.weight"])
            w.add_tensor(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])
            continue
        w.add_tensor(b + "attn_q.weight", rotary(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads))
        w.add_tensor(b + "attn_k.weight", rotary(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads))
        w.add_tensor(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        if p + "self_attn.q_norm.weight" in sd:  # Qwen3
            w.add_tensor(b + "attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"])
            w.add_tensor(b + "attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"])
        if arch == "qwen2":
            w.add_tensor(b + "attn_q.bias", sd[p + "self_attn.q_proj.bias"])
            w.add_tensor(b + "attn_k.bias", sd[p + "self_attn.k_proj.bias"])
            w.add_tensor(b + "attn_v.bias", sd[p + "self_attn.v_proj.bias"])
        w.add_tensor(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        if arch == "gemma2":
            w.add_tensor(b + "post_attention_norm.weight", sd[p + "post_attention_layernorm.weight"])
            w.add_tensor(b + "ffn_norm.weight", sd[p + "pre_feedforward_layernorm.weight"])
            w.add_tensor(b + "post_ffw_norm.weight", sd[p + "post_feedforward_layernorm.weight"])
        else:
            w.add_tensor(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(out):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(20261208)
    cases, tensors = {}, {}
    smallest_gap = math.inf
    for name, (config_class, model_class, fields) in MODELS.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        extra = {} if config_class is Gemma2Config else {"hidden_act": "silu"}
        cfg = config_class(bos_token_id=1, eos_token_id=2, **extra, **fields)
        torch.manual_seed(0)
        cfg._attn_implementation = "eager"  # the masks as written in the modeling file
        model = model_class(cfg).eval()
        redraw(model, g)
        if cfg.tie_word_embeddings:
            model.tie_weights()
        model.save_pretrained(d, safe_serialization=True)
        entry = {"prompts": [], "greedy": []}
        for k, n in enumerate(PROMPT_LENGTHS):
            ids = torch.randint(0, cfg.vocab_size, (1, n), generator=g)
            with torch.no_grad():
                logits = model(ids, use_cache=False).logits[0].float()
                if config_class is Gemma2Config:
                    # generate() builds Gemma 2's HybridCache with torch._dynamo (torch >= 2): greedy by
                    # hand instead, the whole sequence through the model at each step (no cache).
                    seq, scores = ids, []
                    for _ in range(NEW_TOKENS):
                        last = model(seq, use_cache=False).logits[0, -1].float()
                        scores.append(last[None])
                        seq = torch.cat([seq, last.argmax().view(1, 1)], dim=1)
                        if int(seq[0, -1]) == 2:
                            break
                else:
                    outs = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                          max_new_tokens=NEW_TOKENS, eos_token_id=2, pad_token_id=0,
                                          output_scores=True, return_dict_in_generate=True)
                    seq, scores = outs.sequences, outs.scores
            for s in scores:
                top = torch.topk(s[0].double(), 2).values
                smallest_gap = min(smallest_gap, float(top[0] - top[1]))
            entry["prompts"].append(ids[0].tolist())
            entry["greedy"].append(seq[0, n:].tolist())
            tensors[f"{name}.{k}"] = logits.contiguous()
        cases[name] = entry
        if name == "llama3_rope":
            write_gguf(model, cfg, os.path.join(out, name + ".gguf"), "llama")
        if name.startswith("qwen2"):
            # qwen2_mha: an end-of-turn id, the 4th token of prompt 2's continuation (first seen there).
            eot = None
            if name == "qwen2_mha":
                cont = entry["greedy"][2]
                eot = next(t for i, t in enumerate(cont) if i >= 3 and t not in cont[:i] and t != 2)
            write_gguf(model, cfg, os.path.join(out, name + ".gguf"), "qwen2", eot)
        if name in ("gemma2_gguf", "phi3", "phi3_longrope"):
            write_gguf(model, cfg, os.path.join(out, name + ".gguf"), name.split("_")[0])
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"models": cases, "new_tokens": NEW_TOKENS}, f)
    save_file(tensors, os.path.join(out, "cases.safetensors"))
    print(f"smallest top-2 logit gap over the greedy steps: {smallest_gap:.3g}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/families")
