#!/usr/bin/env python3
"""Golden data for MPNet (issue 64): transformers' MPNetModel under
sentence-transformers, on a tiny random model of odd sizes and, when
scripts/setup.sh installed it, on the real all-mpnet-base-v2.

    .venv/bin/python scripts/make_mpnet_golden.py [tests/data/mpnet]

<out>/tiny/ is a sentence-transformers model directory: a random MPNet
(d 24, 3 heads, 2 layers, d_ff 40, GELU, LayerNorm eps 1e-5, 130 positions
with pad id 1, so 128 usable; 32 relative buckets; every weight, the
relative position bias included, drawn from N(0, 0.5)), an uncased
WordPiece vocabulary with MPNet's special tokens (<s> </s> <pad> <mask>
[UNK]), mean pooling, Normalize, max_seq_length 128. Its golden.safetensors:
    default   [N, 24] SentenceTransformer.encode(SENTENCES), batches of 4
    ids.NNN   [n] sentence NNN's ids as sentence-transformers tokenizes it
    buckets   [2201] MPNetEncoder.relative_position_bucket of the offsets
              -1100 .. 1100 (32 buckets, distance 128), as float
The sentences reach 127 tokens (offsets into the log-spaced buckets), one
is cut at 128, and two hold <pad> and <s> in their text (MPNet's position
ids skip a pad id; a special token in the text is its id).

<out>/all_mpnet_base_v2.safetensors (when ~/.cache/ffn/all-mpnet-base-v2
exists): ids.NNN and embeddings [72, 768] of the 72 texts of
make_minilm_golden.py (the BERT tests' hostile set: empty, CJK, Arabic,
Devanagari, emoji, control characters, long texts cut at 384 tokens), as
sentence-transformers tokenizes and encodes them (batches of 8), and the
model's sha256 in __metadata__.

One thread; float32; eval mode. The script checks each text embedded alone
against the batch (1e-5) and sentence-transformers' ids against the
tokenizer's.
"""
import hashlib
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
from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast  # noqa: E402
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_pooling_golden import WORDS  # noqa: E402

torch.set_num_threads(1)

REAL_DIR = os.path.expanduser("~/.cache/ffn/all-mpnet-base-v2")
MAX_SEQ = 128
LONG = " ".join(WORDS[i % len(WORDS)] for i in range(126))  # 126 words: 128 ids with <s> and </s>
SENTENCES = [
    "The cat sat on the red book.",
    "a dog runs fast",
    "",
    LONG,
    LONG + " and more words past the end",
    "a <pad> in the text, and <s> one <mask> too",
    "<pad><pad> the <pad>",
    "Search for the first page of the old book, then read it slowly at night by the fire light.",
]


def versions():
    return "sentence-transformers %s, transformers %s, torch %s" % (
        sentence_transformers.__version__, transformers.__version__, torch.__version__)


def check_alone(st, texts, emb):
    for i, t in enumerate(texts):
        alone = st.encode([t], convert_to_numpy=True)[0]
        assert np.abs(alone - emb[i]).max() < 1e-5, (i, np.abs(alone - emb[i]).max())


def ids_of(st, texts):
    return [st.tokenize([t])["input_ids"][0].numpy() for t in texts]


def tiny(out):
    d = os.path.join(out, "tiny")
    tmp = os.path.join(out, ".base")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(tmp)
    vocab = ["<s>", "<pad>", "</s>", "<unk>", "[PAD]", "[UNK]", "[CLS]", "[SEP]", ".", ",", ":"] + WORDS
    vocab += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz") + ["<mask>"]
    vocab = list(dict.fromkeys(vocab))
    with open(os.path.join(tmp, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    tok = MPNetTokenizerFast(os.path.join(tmp, "vocab.txt"))
    cfg = MPNetConfig(vocab_size=len(vocab), hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                      intermediate_size=40, max_position_embeddings=MAX_SEQ + 2, relative_attention_num_buckets=32,
                      layer_norm_eps=1e-5, hidden_act="gelu", pad_token_id=1)
    torch.manual_seed(64)
    model = MPNetModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    word = models.Transformer(tmp, max_seq_length=MAX_SEQ)
    st = SentenceTransformer(modules=[word, models.Pooling(24, pooling_mode_mean_tokens=True), models.Normalize()],
                             device="cpu")
    st.save(d, safe_serialization=True)
    shutil.rmtree(tmp)
    emb = st.encode(SENTENCES, convert_to_numpy=True, batch_size=4)
    check_alone(st, SENTENCES, emb)
    tensors = {"default": emb.astype(np.float32)}
    for i, ids in enumerate(ids_of(st, SENTENCES)):
        tensors["ids.%03d" % i] = ids.astype(np.float32)
    assert len(tensors["ids.003"]) == MAX_SEQ and len(tensors["ids.004"]) == MAX_SEQ
    rel = torch.arange(-1100, 1101)
    tensors["buckets"] = MPNetEncoder.relative_position_bucket(rel, num_buckets=32, max_distance=128).numpy().astype(
        np.float32)
    save_file(tensors, os.path.join(d, "golden.safetensors"), metadata={
        "sentences": json.dumps(SENTENCES), "buckets_from": "-1100",
        "generator": "scripts/make_mpnet_golden.py; " + versions()})
    print("tiny", emb.shape)


def real(out):
    if not os.path.isdir(REAL_DIR):
        print("SKIPPED: %s is not installed (scripts/setup.sh)" % REAL_DIR)
        return
    from make_minilm_golden import SENTENCES as HOSTILE  # the BERT tests' 72 texts
    st = SentenceTransformer(REAL_DIR, device="cpu")
    emb = st.encode(HOSTILE, convert_to_numpy=True, batch_size=8)
    check_alone(st, HOSTILE[:8], emb)
    tensors = {"embeddings": emb.astype(np.float32)}
    tok = st.tokenizer
    for i, (t, ids) in enumerate(zip(HOSTILE, ids_of(st, HOSTILE))):
        want = tok(t.strip(), truncation=True, max_length=st.max_seq_length)["input_ids"]
        assert list(ids) == want, i
        tensors["ids.%03d" % i] = ids.astype(np.float32)
    sha = hashlib.sha256(open(os.path.join(REAL_DIR, "model.safetensors"), "rb").read()).hexdigest()
    save_file(tensors, os.path.join(out, "all_mpnet_base_v2.safetensors"), metadata={
        "sentences": json.dumps(HOSTILE), "model": "all-mpnet-base-v2 model.safetensors sha256 " + sha,
        "generator": "scripts/make_mpnet_golden.py; " + versions()})
    print("all-mpnet-base-v2", emb.shape)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/mpnet"
    os.makedirs(out, exist_ok=True)
    tiny(out)
    real(out)


if __name__ == "__main__":
    main()
