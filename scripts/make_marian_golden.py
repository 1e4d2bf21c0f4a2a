#!/usr/bin/env python3
"""Writes random-weight MarianMT checkpoints and what transformers' generate
makes of them, for tests/models/test_translation.cpp.

Run with the project's virtual environment (transformers 4.46.3, the version
scripts/setup.sh pins, on Debian's torch):
    .venv/bin/python scripts/make_marian_golden.py tests/data/marian

For each model NAME it writes NAME/ (config.json, generation_config.json,
model.safetensors: transformers' save_pretrained) and the cases to
cases.json: per model, source id lists (1-30 tokens, EOS last), the
generated ids after the decoder start token (up to and including EOS) of
greedy search and of beam search (num_beams and max_new_tokens given), and
teacher-forced logits of one source. Every parameter is re-drawn with larger
scales than transformers' init (N(0, 0.02) gives nearly flat logits, where
every step would be a near tie): linear weights U(-2/sqrt(fan_in),
2/sqrt(fan_in)) (q_proj and k_proj 6x that: peaked attention, so outputs depend
on the source and the prefix), embeddings 0.3 N(0, 1), biases 0.5 N(0, 1),
final_logits_bias 0.1 N(0, 1),
LayerNorm gamma N(0, 1) (random signs: with tied embeddings and gamma near 1
every token's logit favours the token itself, and greedy repeats one token),
beta 0.1 N(0, 1), and EOS's final_logits_bias raised by 1.5 so that sequences
end at various lengths. The smallest gap between
the two highest float64 logits over every greedy step is printed: a
difference at a step whose gap is below 1e-4 would be a genuine tie.
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
from transformers import MarianConfig, MarianMTModel  # noqa: E402

MODELS = {
    # name: (config, generation settings)
    "swish_shared": dict(vocab_size=61, d_model=20, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                         decoder_attention_heads=5, encoder_ffn_dim=36, decoder_ffn_dim=28, max_position_embeddings=64,
                         activation_function="swish", scale_embedding=True,
                         gen=dict(num_beams=3, max_length=24, bad_words_ids=[[60]], forced_eos_token_id=0)),
    "gelu_separate": dict(vocab_size=53, decoder_vocab_size=47, share_encoder_decoder_embeddings=False,
                          tie_word_embeddings=False, d_model=18,
                          encoder_layers=1, decoder_layers=3, encoder_attention_heads=3, decoder_attention_heads=2,
                          encoder_ffn_dim=30, decoder_ffn_dim=22, max_position_embeddings=40,
                          activation_function="gelu", scale_embedding=False,
                          eos_bias=0.7,
                          gen=dict(num_beams=2, max_length=30, bad_words_ids=[[46]], forced_eos_token_id=0)),
    "relu_untied": dict(vocab_size=67, d_model=24, encoder_layers=3, decoder_layers=1, encoder_attention_heads=6,
                        decoder_attention_heads=4, encoder_ffn_dim=40, decoder_ffn_dim=40, max_position_embeddings=50,
                        activation_function="relu", scale_embedding=True, tie_word_embeddings=False,
                        gen=dict(num_beams=4, max_length=20, length_penalty=0.6, early_stopping=True,
                                 bad_words_ids=[[66]], forced_eos_token_id=None, renormalize_logits=True,
                                 min_length=4)),
}


EOS_BIAS = float(os.environ.get("EOS_BIAS", "1.5"))
EMBED_SCALE = float(os.environ.get("EMBED_SCALE", "0.3"))
QK_SCALE = float(os.environ.get("QK_SCALE", "6.0"))


def randomize(model, gen, eos_bias=None):
    with torch.no_grad():
        for name, t in model.named_parameters():
            if "embed_positions" in name:  # the sinusoidal table (not saved: computed on load)
                continue
            if "layer_norm" in name:  # gamma of random signs: no token's logit favours itself
                t.copy_(torch.randn(t.shape, generator=gen) if name.endswith("weight") else
                        0.1 * torch.randn(t.shape, generator=gen))
            elif "embed" in name or name.endswith("shared.weight"):
                t.copy_(EMBED_SCALE * torch.randn(t.shape, generator=gen))
            elif t.dim() == 2:
                bound = 2.0 / math.sqrt(t.shape[1])
                if "q_proj" in name or "k_proj" in name:
                    bound *= QK_SCALE  # peaked attention: outputs depend on the source and the prefix
                t.copy_((torch.rand(t.shape, generator=gen) * 2 - 1) * bound)
            else:
                t.copy_(0.5 * torch.randn(t.shape, generator=gen))
        model.final_logits_bias.copy_(0.1 * torch.randn(model.final_logits_bias.shape, generator=gen))
        model.final_logits_bias[0, 0] += EOS_BIAS if eos_bias is None else eos_bias  # sequences end at various lengths


def strip(seq, start, eos, pad):
    """Generated ids after the start token, up to and including the first EOS."""
    out = []
    for t in seq[1:]:
        out.append(t)
        if t == eos:
            break
    while out and out[-1] == pad and eos != pad:
        out.pop()
    return out


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/marian"
    gen = torch.Generator().manual_seed(2026)
    cases = {}
    min_gap = float("inf")
    for name, spec in MODELS.items():
        spec = dict(spec)
        g = spec.pop("gen")
        eos_bias = spec.pop("eos_bias", None)
        V = spec.get("decoder_vocab_size", spec["vocab_size"])
        pad = V - 1
        cfg = MarianConfig(pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, dropout=0.0, **spec)
        model = MarianMTModel(cfg)
        randomize(model, gen, eos_bias)
        model.eval()
        for k, v in g.items():
            setattr(model.generation_config, k, v)
        model.save_pretrained(os.path.join(outdir, name))
        sv = spec["vocab_size"]
        lengths = [1, 2, 5, 9, 13, 17, 23, 30]
        sources = []
        for L in lengths:
            ids = torch.randint(1, sv - 1, (L - 1,), generator=gen).tolist()
            sources.append(ids + [0])
        S = max(lengths)
        src_pad = sv - 1
        input_ids = torch.tensor([s + [src_pad] * (S - len(s)) for s in sources])
        mask = torch.tensor([[1] * len(s) + [0] * (S - len(s)) for s in sources])
        start = cfg.decoder_start_token_id
        with torch.no_grad():
            greedy = model.generate(input_ids, attention_mask=mask, num_beams=1, do_sample=False)
            beam = model.generate(input_ids, attention_mask=mask, do_sample=False)
            short = model.generate(input_ids, attention_mask=mask, num_beams=1, do_sample=False, max_new_tokens=4)
            logits = model(input_ids=input_ids[3:4, :len(sources[3])],
                           decoder_input_ids=torch.tensor([[start] + greedy[3, 1:4].tolist()])).logits[0]
            # float64 top-2 gaps along each greedy path (teacher forcing on the generated ids).
            m64 = MarianMTModel.from_pretrained(os.path.join(outdir, name)).double().eval()
            torch.set_default_dtype(torch.float64)  # transformers builds its masks in the default dtype
            for i, s in enumerate(sources):
                path = strip(greedy[i].tolist(), start, 0, pad)
                lg = m64(input_ids=torch.tensor([s]), decoder_input_ids=torch.tensor([[start] + path[:-1]])).logits[0]
                for bad in g.get("bad_words_ids", []):
                    lg[:, bad[0]] = -float("inf")
                top = torch.topk(lg[:-1] if g.get("forced_eos_token_id") is not None else lg, 2, dim=-1).values
                if top.shape[0]:
                    min_gap = min(min_gap, float((top[:, 0] - top[:, 1]).min()))
            torch.set_default_dtype(torch.float32)
        cases[name] = {
            "sources": sources,
            "greedy": [strip(r, start, 0, pad) for r in greedy.tolist()],
            "beam": [strip(r, start, 0, pad) for r in beam.tolist()],
            "greedy_max_new_tokens_4": [strip(r, start, 0, pad) for r in short.tolist()],
            "logits_source": 3,
            "logits_decoder_input": [start] + greedy[3, 1:4].tolist(),
            "logits": logits.flatten().tolist(),
        }
        print(f"{name}: greedy lengths {[len(r) for r in cases[name]['greedy']]}, "
              f"beam lengths {[len(r) for r in cases[name]['beam']]}")
    with open(os.path.join(outdir, "cases.json"), "w") as f:
        json.dump({"generator": "scripts/make_marian_golden.py, transformers 4.46.3", "models": cases}, f)
    print(f"smallest float64 top-2 logit gap on the greedy paths: {min_gap:.3g}")


if __name__ == "__main__":
    main()
