#!/usr/bin/env python3
"""Writes a MarianMT directory with a tokenizer (SentencePiece models trained
with the sentencepiece library on generated text) and what transformers'
MarianTokenizer and generate make of a set of texts, for
tests/models/test_translation.cpp and the translate CLI test.

    .venv/bin/python scripts/make_marian_text_golden.py tests/data/marian_text

The text: generated English and French-like sentences (accents, digits,
punctuation). source.spm and target.spm are unigram models of 150 pieces,
trained on the English and the French side; vocab.json maps the union of
their pieces (</s> 0, <unk> 1, the pieces in order, <pad> last), as the
opus-mt conversions do. The model is random (scripts/make_marian_golden.py's
randomize) with that vocabulary. cases.json holds, per test text (accents,
punctuation, numbers, characters the models never saw, a language code,
special tokens in the text): MarianTokenizer's ids; decode cases; and the
greedy and beam translations as ids and as text (batch_decode,
skip_special_tokens=True).
"""
import json
import os
import random
import sys
import tempfile

import sentencepiece as spm
import torch
import transformers.generation.utils as gu

gu.is_fsdp_managed_module = lambda module: False  # Debian's torch 1.13: see make_marian_golden.py
from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_marian_golden import randomize, strip  # noqa: E402

EN = "the a cat dog house garden is was small big red green blue very old new and or but with".split()
FR = "le la un une chat chien maison jardin est était petit grand rouge vert bleu très vieux nouveau et ou mais " \
     "avec été où à côté élève français garçon Noël".split()


def sentences(words, rng, n):
    out = []
    for _ in range(n):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))
        if rng.random() < 0.4:
            s += f" {rng.randint(0, 2000)}"
        s = s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",", ";", ":"])
        out.append(s)
    return out


def train(lines, prefix):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines))
    spm.SentencePieceTrainer.train(input=f.name, model_prefix=prefix, vocab_size=150, model_type="unigram",
                                   character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2)
    os.unlink(f.name)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/marian_text"
    os.makedirs(out, exist_ok=True)
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        train(sentences(EN, rng, 3000), os.path.join(tmp, "source"))
        train(sentences(FR, rng, 3000), os.path.join(tmp, "target"))
        vocab = {"</s>": 0, "<unk>": 1}
        for side in ("source", "target"):
            sp = spm.SentencePieceProcessor(model_file=os.path.join(tmp, side + ".model"))
            for i in range(sp.get_piece_size()):
                p = sp.id_to_piece(i)
                if p not in vocab and p not in ("<unk>", "<s>", "</s>"):
                    vocab[p] = len(vocab)
        vocab[">>fr<<"] = len(vocab)
        vocab["<pad>"] = len(vocab)
        with open(os.path.join(tmp, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        tok = MarianTokenizer(os.path.join(tmp, "source.model"), os.path.join(tmp, "target.model"),
                              os.path.join(tmp, "vocab.json"), source_lang="en", target_lang="fr")
        tok.save_pretrained(out)
    V = len(vocab)
    cfg = MarianConfig(vocab_size=V, d_model=24, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                       decoder_attention_heads=3, encoder_ffn_dim=40, decoder_ffn_dim=36, max_position_embeddings=80,
                       activation_function="swish", scale_embedding=True, pad_token_id=V - 1, eos_token_id=0,
                       decoder_start_token_id=V - 1, dropout=0.0)
    model = MarianMTModel(cfg)
    randomize(model, torch.Generator().manual_seed(11))
    model.eval()
    model.generation_config.num_beams = 3
    model.generation_config.max_length = 40
    model.generation_config.bad_words_ids = [[V - 1]]
    model.save_pretrained(out)
    tok = MarianTokenizer.from_pretrained(out)
    texts = ["The cat is very small.", "A red house, and a big garden!", "the dog was old 1984?",
             "Élève très vieux à côté du garçon: Noël.", "  spaces   everywhere  ", "",
             "unknown 🙂 characters 漢字 ✓ ß", ">>fr<< the green garden", "a </s> in the text <unk> and <pad>",
             "Numbers 0 12 345 6789 and 3.14, 2,718!", "Tabs\tand\nnewlines"]
    ids = [tok(t)["input_ids"] for t in texts]
    target_texts = ["Le chat est très petit.", "Une maison rouge, et un grand jardin !", "Élève à côté du garçon 1984",
                    "", "  espaces   partout  ", "inconnu 🙂 漢字", "a </s> et <unk> et <pad>", ">>fr<< le jardin"]
    target_ids = [[5, 6, 7, 0], [V - 1, 12, 30, 1, 0, 0], [40, 41, 42], list(range(2, 30))]
    decoded = [tok.decode(t, skip_special_tokens=True) for t in target_ids]
    sources = [i for i in ids if len(i) > 1]
    with torch.no_grad():
        batch = tok([texts[i] for i in range(len(texts)) if len(ids[i]) > 1], return_tensors="pt", padding=True)
        greedy = model.generate(**batch, num_beams=1, do_sample=False)
        beam = model.generate(**batch, do_sample=False)
    start = cfg.decoder_start_token_id
    cases = {
        "texts": texts, "ids": ids, "decode_ids": target_ids, "decoded": decoded,
        "sources": sources,
        "greedy": [strip(r, start, 0, V - 1) for r in greedy.tolist()],
        "beam": [strip(r, start, 0, V - 1) for r in beam.tolist()],
        "greedy_text": tok.batch_decode(greedy, skip_special_tokens=True),
        "beam_text": tok.batch_decode(beam, skip_special_tokens=True),
        "translated_texts": [texts[i] for i in range(len(texts)) if len(ids[i]) > 1],
        # The target side (tokenizer(text_target=...): target.spm), as training labels are made.
        "target_texts": target_texts,
        "target_ids": [tok(text_target=t)["input_ids"] for t in target_texts],
    }
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=0)
    print(f"vocabulary {V}; ids of the texts: {ids}")
    print(f"greedy lengths {[len(g) for g in cases['greedy']]}, beam {[len(b) for b in cases['beam']]}")
    print("greedy text:", cases["greedy_text"][:3])


if __name__ == "__main__":
    main()
