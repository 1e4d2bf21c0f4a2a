#!/usr/bin/env python3
"""Qwen3's oracle (issue 48): random-weight Qwen3ForCausalLM models saved as
Hugging Face directories and as GGUF files (as llama.cpp's converter writes
them), with transformers' logits and greedy continuations, for
tests/models/test_families.cpp.

transformers has Qwen3 from 4.51, which needs torch >= 2; Debian's torch is
1.13. So this runs in a developer-only virtual environment, never in setup or
CI (the files it writes are committed):
    /usr/bin/python3 -m venv ~/.cache/ffn/devvenv/venv
    ~/.cache/ffn/devvenv/venv/bin/pip install torch==2.4.1 transformers==4.51.3 tokenizers==0.21.1 \\
        huggingface-hub==0.30.2 safetensors==0.5.3 gguf==0.10.0 sentencepiece==0.2.0 numpy==1.26.4
    ~/.cache/ffn/devvenv/venv/bin/python scripts/make_qwen3_golden.py tests/data/families

Writes NAME/ and NAME.gguf for each model, and qwen3_cases.json and
qwen3_cases.safetensors (the layout of make_family_golden.py's cases, whose
weight re-draw and GGUF writer it reuses).
"""
import json
import math
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
import make_family_golden as fam  # noqa: E402

MODELS = {
    # GQA 2, head_dim 16 ≠ 48 / 4 (as Qwen3's releases: 128 ≠ hidden / heads), tied.
    "qwen3_gqa2": dict(hidden_size=48, intermediate_size=70, num_hidden_layers=3, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=True, max_position_embeddings=128, vocab_size=201),
    # GQA 3, untied, an odd d_ff.
    "qwen3_gqa3_untied": dict(hidden_size=36, intermediate_size=59, num_hidden_layers=2, num_attention_heads=6,
                              num_key_value_heads=2, head_dim=8, rope_theta=10000.0, rms_norm_eps=1e-6,
                              tie_word_embeddings=False, max_position_embeddings=128, vocab_size=193),
}


def main(out):
    g = torch.Generator().manual_seed(20261127)
    cases, tensors = {}, {}
    smallest_gap = math.inf
    for name, fields in MODELS.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        cfg = Qwen3Config(bos_token_id=1, eos_token_id=2, hidden_act="silu", attention_bias=False,
                          use_sliding_window=False, **fields)
        torch.manual_seed(0)
        cfg._attn_implementation = "eager"
        model = Qwen3ForCausalLM(cfg).eval()
        fam.redraw(model, g)
        if cfg.tie_word_embeddings:
            model.tie_weights()
        model.save_pretrained(d, safe_serialization=True)
        fam.write_gguf(model, cfg, os.path.join(out, name + ".gguf"), "qwen3")
        entry = {"prompts": [], "greedy": []}
        for k, n in enumerate(fam.PROMPT_LENGTHS):
            ids = torch.randint(0, cfg.vocab_size, (1, n), generator=g)
            with torch.no_grad():
                logits = model(ids, use_cache=False).logits[0].float()
                outs = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=fam.NEW_TOKENS, eos_token_id=2, pad_token_id=0,
                                      output_scores=True, return_dict_in_generate=True)
            for s in outs.scores:
                top = torch.topk(s[0].double(), 2).values
                smallest_gap = min(smallest_gap, float(top[0] - top[1]))
            entry["prompts"].append(ids[0].tolist())
            entry["greedy"].append(outs.sequences[0, n:].tolist())
            tensors[f"{name}.{k}"] = logits.contiguous()
        cases[name] = entry
    with open(os.path.join(out, "qwen3_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"models": cases, "new_tokens": fam.NEW_TOKENS}, f)
    save_file(tensors, os.path.join(out, "qwen3_cases.safetensors"))
    print(f"smallest top-2 logit gap over the greedy steps: {smallest_gap:.3g}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/families")
