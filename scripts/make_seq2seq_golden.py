#!/usr/bin/env python3
"""Writes a random-weight MarianMT checkpoint and transformers' training loss
and gradients on a batch, for tests/train/test_seq2seq.cpp.

Run with the project's virtual environment (transformers 4.46.3 on Debian's torch):
    .venv/bin/python scripts/make_seq2seq_golden.py tests/data/seq2seq

Writes DIR/model (save_pretrained: config.json, generation_config.json,
model.safetensors), DIR/grads.safetensors (float32 of the float64 gradients
under the parameters' names; model.shared.weight holds the tied embeddings'
whole gradient: both lookups, with nn.Embedding's padding_idx, and the output
projection) and DIR/cases.json (the batch, the loss with label_smoothing 0.1
and the plain cross-entropy). The loss is transformers' own: the model's
logits for labels padded with -100 (decoder inputs shift_tokens_right of the
labels, as MarianMTModel does) under nn.CrossEntropyLoss(label_smoothing=0.1),
all in float64 from the float32 weights saved. Weights are re-drawn larger
than transformers' init (as scripts/make_marian_golden.py), with a nonzero
final_logits_bias, so that every gradient is far from zero.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import MarianConfig, MarianMTModel


def randomize(model, g):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias") or name == "final_logits_bias":
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "embed_positions" in name:
                continue
            elif p.dim() == 2 and "shared" not in name and "embed_tokens" not in name and "lm_head" not in name:
                bound = 2.0 / p.shape[1] ** 0.5
                p.copy_((2 * torch.rand(p.shape, generator=g) - 1) * bound)
        model.model.shared.weight.copy_(0.5 * torch.randn(model.model.shared.weight.shape, generator=g))
        model.final_logits_bias.copy_(0.3 * torch.randn(model.final_logits_bias.shape, generator=g))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/seq2seq"
    os.makedirs(out, exist_ok=True)
    V = 23
    pad, eos = V - 1, 0
    cfg = MarianConfig(vocab_size=V, d_model=12, encoder_layers=2, decoder_layers=1, encoder_attention_heads=3,
                       decoder_attention_heads=3, encoder_ffn_dim=20, decoder_ffn_dim=20, max_position_embeddings=32,
                       activation_function="swish", scale_embedding=True, pad_token_id=pad, eos_token_id=eos,
                       decoder_start_token_id=pad, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    torch.manual_seed(0)
    model = MarianMTModel(cfg)
    randomize(model, torch.Generator().manual_seed(5))
    model.save_pretrained(os.path.join(out, "model"))  # float32
    torch.set_default_dtype(torch.float64)  # masks and positions in float64 too
    model = MarianMTModel.from_pretrained(os.path.join(out, "model"), torch_dtype=torch.float64)
    model.train()  # dropout is 0: the same as eval

    g = torch.Generator().manual_seed(9)
    def seq(n):  # ids of 1..V-2 (no pad, no EOS inside), EOS last
        return [int(x) for x in torch.randint(1, V - 1, (n - 1,), generator=g)] + [eos]
    sources = [seq(n) for n in (7, 1, 9, 4)]
    targets = [seq(n) for n in (5, 3, 1, 8)]
    S, T = max(map(len, sources)), max(map(len, targets))
    input_ids = torch.tensor([s + [pad] * (S - len(s)) for s in sources])
    attention_mask = torch.tensor([[1] * len(s) + [0] * (S - len(s)) for s in sources])
    labels = torch.tensor([t + [-100] * (T - len(t)) for t in targets])
    logits = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100,
                                            label_smoothing=0.1)
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
    loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is None or name == "final_logits_bias":
            continue
        grads[name] = p.grad.detach().float().contiguous()
    save_file(grads, os.path.join(out, "grads.safetensors"))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({"sources": sources, "targets": targets, "label_smoothing": 0.1, "loss": loss.item(),
                   "nll": nll.item()}, f, indent=1)
    print(f"loss {loss.item():.6f}, cross-entropy {nll.item():.6f}, {len(grads)} gradients: {sorted(grads)[:4]} ...")


if __name__ == "__main__":
    main()
