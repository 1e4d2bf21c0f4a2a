#!/usr/bin/env python3
"""Quantized GGUF files of the families beside LLaMA (issue 48), for
tests/models/test_families.cpp's native-compute test: random-weight models of
each family (qwen2, qwen3, gemma2, phi3; Mistral's files are llama's) with
sizes that fit ggml's 32-wide blocks, written as llama.cpp's converter writes
them (make_family_golden.write_gguf) with their matrices quantized by gguf-py
as a mixed file is: token_embd Q8_0, attention Q8_0 (Q|K|V of Qwen2 mixing
Q8_0 and Q4_0), FFN Q4_0 and Q5_0. No transformers oracle is needed: the test
compares ffn's native compute with its own float32 compute on the same file
(the K-quant issue's bound).

Run with the project's virtual environment (transformers 4.46.3 builds the
models; Qwen3's class comes from transformers >= 4.51, so it runs there too:
the developer environment of scripts/make_qwen3_golden.py):
    ~/.cache/ffn/devvenv/venv/bin/python scripts/make_family_quant_golden.py tests/data/families
"""
import os
import sys

import torch
from gguf import GGMLQuantizationType as T
from transformers import Gemma2Config, Gemma2ForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers import Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, os.path.dirname(__file__))
import make_family_golden as fam  # noqa: E402

COMMON = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              rms_norm_eps=1e-6, max_position_embeddings=128, vocab_size=160, bos_token_id=1, eos_token_id=2)
MODELS = {
    "qwen2_q": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=True, use_sliding_window=False, hidden_act="silu")),
    "qwen3_q": (Qwen3Config, Qwen3ForCausalLM, dict(head_dim=32, tie_word_embeddings=False, use_sliding_window=False,
                                                    hidden_act="silu")),
    "gemma2_q": (Gemma2Config, Gemma2ForCausalLM, dict(head_dim=16, query_pre_attn_scalar=16,
                                                       attn_logit_softcapping=20.0, final_logit_softcapping=30.0,
                                                       sliding_window=4, hidden_activation="gelu_pytorch_tanh",
                                                       tie_word_embeddings=True)),
    "phi3_q": (Phi3Config, Phi3ForCausalLM, dict(tie_word_embeddings=False, sliding_window=6, hidden_act="silu",
                                                 original_max_position_embeddings=128, pad_token_id=0)),
}


def qtype(name):
    if name == "token_embd.weight" or name == "output.weight" or ".attn_q." in name or ".attn_output." in name:
        return T.Q8_0
    if ".attn_k." in name or ".attn_qkv." in name:
        return T.Q8_0
    if ".attn_v." in name:
        return T.Q4_0
    if ".ffn_down." in name:
        return T.Q5_0
    return T.Q4_0  # ffn_gate, ffn_up (Phi-3's gate|up)


def main(out):
    g = torch.Generator().manual_seed(20261128)
    for name, (config_class, model_class, fields) in MODELS.items():
        cfg = config_class(**COMMON, **fields)
        cfg._attn_implementation = "eager"
        torch.manual_seed(0)
        model = model_class(cfg).eval()
        fam.redraw(model, g)
        if cfg.tie_word_embeddings:
            model.tie_weights()
        arch = name[:-2]
        fam.write_gguf(model, cfg, os.path.join(out, name + ".gguf"), arch, quant=qtype)
        print(name, os.path.getsize(os.path.join(out, name + ".gguf")))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/families")
