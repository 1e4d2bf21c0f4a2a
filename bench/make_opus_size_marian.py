#!/usr/bin/env python3
"""A random MarianMT model of opus-mt-en-fr's size (6 + 6 layers, d_model 512,
8 heads, d_ff 2048, vocabulary 59,514, swish, scaled embeddings) for the
translation benchmark (bench/translate_peers.py), made by transformers and
saved with its tokenizer files (the SentencePiece models of
tests/data/marian_text and a vocab.json of the full size, which CTranslate2's
converter reads). EOS's final_logits_bias is -1e4, so every engine generates
exactly the number of tokens asked for.

    .venv/bin/python bench/make_opus_size_marian.py DIR
"""
import json
import os
import shutil
import sys

import torch
from transformers import MarianConfig, MarianMTModel

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    out = sys.argv[1]
    V = 59514
    torch.manual_seed(0)
    cfg = MarianConfig(vocab_size=V, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                       decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                       max_position_embeddings=512, activation_function="swish", scale_embedding=True,
                       pad_token_id=V - 1, eos_token_id=0, decoder_start_token_id=V - 1, dropout=0.0,
                       forced_eos_token_id=None)
    model = MarianMTModel(cfg).eval()
    with torch.no_grad():
        model.final_logits_bias[0, 0] = -1e4  # never EOS: fixed-length outputs
    model.generation_config.num_beams = 4
    model.generation_config.max_length = 512
    model.generation_config.bad_words_ids = [[V - 1]]
    model.generation_config.forced_eos_token_id = None
    model.save_pretrained(out)
    src = os.path.join(HERE, "..", "tests", "data", "marian_text")
    for f in ("source.spm", "target.spm"):
        shutil.copy(os.path.join(src, f), out)
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(2, V - 1):
        vocab[f"p{i}"] = i
    vocab["<pad>"] = V - 1
    with open(os.path.join(out, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
