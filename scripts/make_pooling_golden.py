#!/usr/bin/env python3
"""Golden data for the sentence encoder's pooling, prompts and truncation
(issue 64): a tiny random BERT (d 16, 2 layers, 4 heads, d_ff 24, GELU,
a 120-token uncased WordPiece vocabulary, max_seq_length 12) saved once per
sentence-transformers configuration, with the embeddings
sentence-transformers computes for it.

    .venv/bin/python scripts/make_pooling_golden.py [tests/data/pooling]

Each configuration is a model directory <out>/<name>/ (config.json,
model.safetensors, vocab.txt, tokenizer files, modules.json,
1_Pooling/config.json, sentence_bert_config.json and, where it has
prompts, config_sentence_transformers.json). Its golden.safetensors holds
    default            [N, dim] SentenceTransformer.encode(SENTENCES) (the
                       default prompt, if the model names one)
    prompt.<name>      [N, dim] encode(SENTENCES, prompt_name=<name>), for each prompt
    ids.NNN            [n] sentence NNN's ids with the default prompt, as
                       sentence-transformers tokenizes them (truncated to 12)
and in __metadata__ the sentences (JSON), the pooling modes and the versions.

One thread; float32; eval mode. The script checks that each embedding
agrees with a recomputation from BertModel's last_hidden_state.
"""
import json
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402
import sentence_transformers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402
from sentence_transformers import SentenceTransformer, models  # noqa: E402
from transformers import BertConfig, BertModel, BertTokenizerFast  # noqa: E402

torch.set_num_threads(1)

WORDS = ("the a of to and in is it that for on with as was be by this are or from at an not but have "
         "query passage search find cat dog house tree water fire light dark night day red blue green "
         "run walk read write book page word text model vector number small large fast slow old new "
         "good bad first last one two three four five six seven eight nine ten").split()
SENTENCES = [
    "The cat sat on the red book.",
    "a dog runs fast",
    "Search for the first page of the old book, then read it slowly at night by the fire light.",
    "",
    "one",
    "Nine green trees and ten blue houses by the water, with seven small dogs and eight large cats.",
    "unknownword zzz the model",
]
# name: (pooling modes, normalize, prompts, default prompt name)
CONFIGS = {
    "cls_normalize": (["cls"], True, {"query": "Represent this sentence for searching relevant passages: "}, None),
    "max": (["max"], False, {}, None),
    "mean_sqrt_len": (["mean_sqrt_len_tokens"], False, {}, None),
    "lasttoken_normalize": (["lasttoken"], True, {}, None),
    "cls_mean": (["cls", "mean"], False, {}, None),
    "mean_prompts": (["mean"], True, {"query": "query: ", "passage": "passage: "}, "passage"),
}
MAX_SEQ = 12


def vocabulary():
    """The tiny uncased WordPiece vocabulary (make_cross_encoder_golden.py's too)."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", ":"] + WORDS
    vocab += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz")
    return list(dict.fromkeys(vocab))  # "a" is a word and a letter


def build_base(tmp):
    vocab = vocabulary()
    with open(os.path.join(tmp, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(os.path.join(tmp, "vocab.txt"), do_lower_case=True)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=24, max_position_embeddings=32, type_vocab_size=2, hidden_act="gelu",
                     layer_norm_eps=1e-12)
    torch.manual_seed(64)
    model = BertModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    return model, tok


def reference(model, tok, texts, modes, normalize):
    """The pooling recomputed from BertModel, one text at a time."""
    out = []
    for t in texts:
        enc = tok(t.strip(), truncation=True, max_length=MAX_SEQ, return_tensors="pt")
        with torch.no_grad():
            h = model(**enc).last_hidden_state[0]
        parts = []
        for m in modes:
            parts.append({"cls": h[0], "max": h.max(0)[0], "mean": h.mean(0),
                          "mean_sqrt_len_tokens": h.sum(0) / np.sqrt(h.shape[0]), "lasttoken": h[-1]}[m])
        e = torch.cat(parts)
        if normalize:
            e = torch.nn.functional.normalize(e, dim=0)
        out.append(e.numpy())
    return np.stack(out)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/pooling"
    tmp = os.path.join(out, ".base")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    model, tok = build_base(tmp)
    for name, (modes, normalize, prompts, default) in CONFIGS.items():
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        word = models.Transformer(tmp, max_seq_length=MAX_SEQ)
        kw = {"pooling_mode_" + ("cls_token" if m == "cls" else m if m in ("lasttoken", "mean_sqrt_len_tokens")
                                 else m + "_tokens"): True for m in modes}
        kw.setdefault("pooling_mode_mean_tokens", False)
        pool = models.Pooling(16, **kw)
        mods = [word, pool] + ([models.Normalize()] if normalize else [])
        st = SentenceTransformer(modules=mods, prompts=prompts or None, default_prompt_name=default, device="cpu")
        st.save(d, safe_serialization=True)
        tensors = {}
        emb = st.encode(SENTENCES, convert_to_numpy=True, batch_size=4)
        pre = prompts.get(default, "") if default else ""
        ref = reference(model, tok, [pre + s for s in SENTENCES], modes, normalize)
        assert np.abs(emb - ref).max() < 1e-5, (name, np.abs(emb - ref).max())
        tensors["default"] = emb.astype(np.float32)
        for p in prompts:
            e = st.encode(SENTENCES, prompt_name=p, convert_to_numpy=True, batch_size=4)
            r = reference(model, tok, [prompts[p] + s for s in SENTENCES], modes, normalize)
            assert np.abs(e - r).max() < 1e-5, (name, p)
            tensors["prompt." + p] = e.astype(np.float32)
        for i, s in enumerate(SENTENCES):
            ids = st.tokenize([pre + s])["input_ids"][0].numpy()
            tensors["ids.%03d" % i] = ids.astype(np.float32)
        save_file(tensors, os.path.join(d, "golden.safetensors"), metadata={
            "sentences": json.dumps(SENTENCES), "modes": json.dumps(modes), "normalize": str(normalize),
            "generator": "scripts/make_pooling_golden.py; sentence-transformers %s, transformers %s, torch %s"
                         % (sentence_transformers.__version__, transformers.__version__, torch.__version__)})
        print(name, emb.shape)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
