#!/usr/bin/env python3
"""Writes a small quantized LLaMA GGUF file as llama.cpp's converter lays
one out, and what transformers 4.46.3 makes of it, for
tests/models/test_causal_lm.cpp:

    .venv/bin/python scripts/make_llama_gguf_golden.py tests/data/gguf

llama_q.gguf: a random-weight LlamaForCausalLM (vocabulary 300 from a
byte-level BPE trained here, d_model 64, 4 query heads sharing 2 key/value
heads, d_ff 96, 2 layers, tied embeddings, θ 100000) with W_Q and W_K rows in
llama.cpp's rotary order (convert_hf_to_gguf's permute), written with the
`gguf` package (0.10.0) in several block types so that every native path is
taken: token_embd Q8_0 (the tied head and the embedding rows), attn_q,
attn_k, attn_output, ffn_gate, ffn_up Q4_1, attn_v Q4_0 (so the Q|K|V stack
mixes types: one product of two native parts), ffn_down Q4_0 in layer 0 and Q8_0
in layer 1, norms F32; tokenizer.ggml.* (model gpt2, tokens, token types,
merges, BOS/EOS) and a ChatML chat template with a default system message.

llama_q.json: texts and the ids transformers' tokenizer (built from the GGUF)
gives them (add_special_tokens=False); prompt id lists of 1 to 40 tokens, the
float32 logits of transformers' model from the GGUF after every position
(its loader dequantizes with gguf-py; its tied head is left untied by
4.46.3, so the embedding is copied into it here), and its greedy
continuations of 12 tokens.
"""
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
import transformers.generation.utils as gu

gu.is_fsdp_managed_module = lambda module: False  # Debian's torch 1.13: see make_marian_golden.py
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.quants import quantize  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_golden import redraw  # noqa: E402

TEXT = [
    "The feed-forward network is applied to each position separately and identically.",
    "It consists of two linear transformations with a ReLU activation in between.",
    "def forward(self, x):\n    return self.w2(F.silu(self.w1(x)) * self.w3(x))\n",
    "Numbers: 3.14159, 2718, 1e-5; Größe, café, 東京!",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            "{{ '<|im_start|>system\nYou are a tiny test model<|im_end|>\n' }}{% endif %}"
            "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def permute(w, n_head):  # convert_hf_to_gguf.LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer():
    """A byte-level BPE trained on TEXT, as a GGUF holds it: tokens (with 3
    unused ids past the tokenizer's, as real models have), token types, merges."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=297, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXT * 4, trainer=trainer)
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    tokens += [f"<unused{i}>" for i in range(3)]
    types = [3 if t in SPECIALS else (4 if t.startswith("<unused") else 1) for t in tokens]
    return tokens, types, merges


def llama_writer(path, name, cfg, tokens, types, merges):
    """A GGUFWriter with llama.cpp's llama.* metadata for cfg and the tokenizer (BOS 1, EOS 2)."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    return w


def main(out):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(33)
    tokens, types, merges = tokenizer()
    V = len(tokens)

    cfg = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                      max_position_embeddings=128, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    redraw(model, g)  # make_llama_golden.py's scales

    path = os.path.join(out, "llama_q.gguf")
    w = llama_writer(path, "ffn test llama", cfg, tokens, types, merges)
    w.add_chat_template(TEMPLATE)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}

    def add(name, arr, qtype):
        if qtype == T.F32:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, quantize(arr, qtype), raw_dtype=qtype)

    add("token_embd.weight", sd["model.embed_tokens.weight"], T.Q8_0)
    add("output_norm.weight", sd["model.norm.weight"], T.F32)
    for l in range(cfg.num_hidden_layers):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        add(b + "attn_norm.weight", sd[p + "input_layernorm.weight"], T.F32)
        add(b + "attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads), T.Q4_1)
        add(b + "attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads), T.Q4_1)
        add(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"], T.Q4_0)
        add(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"], T.Q4_1)
        add(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], T.F32)
        add(b + "ffn_gate.weight", sd[p + "mlp.gate_proj.weight"], T.Q4_1)
        add(b + "ffn_up.weight", sd[p + "mlp.up_proj.weight"], T.Q4_1)
        add(b + "ffn_down.weight", sd[p + "mlp.down_proj.weight"], T.Q4_0 if l == 0 else T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # The oracle: what transformers makes of the file.
    htok = AutoTokenizer.from_pretrained(out, gguf_file="llama_q.gguf")
    hf = AutoModelForCausalLM.from_pretrained(out, gguf_file="llama_q.gguf", torch_dtype=torch.float32).eval()
    hf.lm_head.weight = hf.model.embed_tokens.weight  # 4.46.3 leaves a tied GGUF head untied
    texts = TEXT + ["<|im_start|>user\nhi<|im_end|>", "  spaces   and\ttabs ", "emoji 🙂 ok", ""]
    cases = {"texts": texts, "text_ids": [htok(t, add_special_tokens=False)["input_ids"] for t in texts],
             "chat_ids": htok.apply_chat_template([{"role": "user", "content": "hi there"}], add_generation_prompt=True),
             "prompts": [], "logits": [], "greedy": []}
    smallest = math.inf
    for n in (1, 3, 17, 40):
        ids = torch.randint(0, V, (1, n), generator=g)
        with torch.no_grad():
            cases["logits"].append(hf(ids).logits[0].float().numpy().round(6).tolist())
            o = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12,
                            eos_token_id=2, pad_token_id=0, output_scores=True, return_dict_in_generate=True)
        for s in o.scores:
            top = torch.topk(s[0].double(), 2).values
            smallest = min(smallest, float(top[0] - top[1]))
        cases["prompts"].append(ids[0].tolist())
        cases["greedy"].append(o.sequences[0, n:].tolist())
    with open(os.path.join(out, "llama_q.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)
    print(f"{path}: {os.path.getsize(path)} bytes; smallest top-2 logit gap over the greedy steps: {smallest:.3g}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gguf")
