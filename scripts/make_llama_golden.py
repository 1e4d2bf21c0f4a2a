#!/usr/bin/env python3
"""Writes random-weight LLaMA checkpoints (LlamaForCausalLM, saved by
transformers) with small byte-level BPE tokenizers, and what transformers
makes of them, for tests/models/test_causal_lm.cpp and the generate/tokenize
command tests.

Run with the project's virtual environment (transformers 4.46.3 and
tokenizers 0.20.3, the versions scripts/setup.sh pins, on Debian's torch):
    .venv/bin/python scripts/make_llama_golden.py tests/data/llama

For each model NAME it writes NAME/ (config.json, generation_config.json,
model.safetensors: save_pretrained; tokenizer.json: a byte-level BPE trained
here by `tokenizers` on TEXT, special tokens <|endoftext|> <|im_start|>
<|im_end|>) and, in cases.json, per model: texts with their ids
(add_special_tokens=False), prompt id lists of 1 to 150 tokens, the greedy
continuation of each (generate, do_sample=False, up to and including EOS),
and in cases.safetensors the float32 logits after every prompt position
("NAME.K" for prompt K). The models cover GQA ratios 1, 2 and 3, tied and
untied heads, odd sizes and both pre-tokenizers SmolLM2 uses (ByteLevel's
GPT-2 regex alone, and Digits then ByteLevel).

Weights are re-drawn with larger scales than transformers' init (N(0, 0.02)
gives nearly flat logits, where greedy steps would be near ties): linear
weights U(-2/sqrt(fan_in), 2/sqrt(fan_in)) (q_proj and k_proj 4x: peaked
attention), embeddings N(0, 1), RMSNorm gammas N(0, 1) (random signs:
with tied embeddings and gammas near 1 every token's logit favours the token
itself, and greedy repeats one token). The smallest
gap between the two highest logits over every greedy step is printed: a
difference at a step with a gap below 1e-4 would be a genuine tie.
"""
import json
import math
import os
import sys

import torch
import transformers.generation.utils as gu

# Debian's torch 1.13 cannot import torch.distributed.fsdp on Python 3.11;
# generate only asks whether the model is FSDP-managed (it is not).
gu.is_fsdp_managed_module = lambda module: False
from safetensors.torch import save_file  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

TEXT = [
    "The feed-forward network is applied to each position separately and identically.",
    "It consists of two linear transformations with a ReLU activation in between.",
    "While the linear transformations are the same across different positions, they use different parameters.",
    "Another way of describing this is as two convolutions with kernel size 1.",
    "The dimensionality of input and output is 512, and the inner-layer has dimensionality 2048.",
    "def forward(self, x):\n    return self.w2(F.silu(self.w1(x)) * self.w3(x))\n",
    "Numbers: 3.14159, 2718, 1e-5, 100000; dates 2026-11-25.",
    "Le réseau est appliqué à chaque position. Größe, naïve café, 東京, Привет мир!",
    "Tabs\tand  double  spaces   and\n\nnewlines.",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

MODELS = {
    # name: (LlamaConfig fields, pre-tokenizer, tokenizer vocabulary size)
    "gqa3_tied": (dict(hidden_size=60, intermediate_size=100, num_hidden_layers=2, num_attention_heads=6,
                       num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       max_position_embeddings=256), "digits_bytelevel", 330),
    "gqa2_untied": (dict(hidden_size=64, intermediate_size=88, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         max_position_embeddings=256), "bytelevel", 300),
    "mha_odd": (dict(hidden_size=36, intermediate_size=50, num_hidden_layers=2, num_attention_heads=3,
                     num_key_value_heads=3, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                     max_position_embeddings=256), "bytelevel", 290),
}
PROMPT_LENGTHS = [1, 2, 7, 33, 150]
NEW_TOKENS = 16


def make_tokenizer(kind, vocab):
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if kind == "digits_bytelevel" else byte_level)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXT * 4, trainer=trainer)
    return tok


def redraw(model, g):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                bound = 2.0 / math.sqrt(p.shape[1]) * (4.0 if ("q_proj" in name or "k_proj" in name) else 1.0)
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)


def main(out):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(20261125)
    cases, tensors = {}, {}
    smallest_gap = math.inf
    for name, (fields, kind, vocab) in MODELS.items():
        tok = make_tokenizer(kind, vocab)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>")
        fast.save_pretrained(d)
        for extra in ("tokenizer_config.json", "special_tokens_map.json"):
            os.remove(os.path.join(d, extra))  # only tokenizer.json is read
        cfg = LlamaConfig(vocab_size=tok.get_vocab_size() + 3, bos_token_id=1, eos_token_id=2,
                          attention_bias=False, mlp_bias=False, hidden_act="silu", **fields)
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).eval()
        redraw(model, g)
        if cfg.tie_word_embeddings:
            model.tie_weights()
        model.save_pretrained(d, safe_serialization=True)
        texts = TEXT + ["<|im_start|>user\nhi there<|im_end|>\n", "   leading and trailing   ", "", "emoji 🙂🚀 ok"]
        entry = {"texts": texts, "text_ids": [fast(t, add_special_tokens=False)["input_ids"] for t in texts],
                 "prompts": [], "greedy": []}
        for k, n in enumerate(PROMPT_LENGTHS):
            ids = torch.randint(0, cfg.vocab_size, (1, n), generator=g)
            with torch.no_grad():
                logits = model(ids).logits[0].float()
                outs = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=NEW_TOKENS, eos_token_id=2, pad_token_id=0,
                                      output_scores=True, return_dict_in_generate=True)
            new = outs.sequences[0, n:].tolist()
            for s in outs.scores:
                top = torch.topk(s[0].double(), 2).values
                smallest_gap = min(smallest_gap, float(top[0] - top[1]))
            entry["prompts"].append(ids[0].tolist())
            entry["greedy"].append(new)
            tensors[f"{name}.{k}"] = logits.contiguous()
        cases[name] = entry
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"models": cases, "new_tokens": NEW_TOKENS}, f, ensure_ascii=False)
    save_file(tensors, os.path.join(out, "cases.safetensors"))
    print(f"smallest top-2 logit gap over the greedy steps: {smallest_gap:.3g}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/llama")
