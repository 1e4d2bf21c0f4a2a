#!/usr/bin/env python3
"""Golden data for ModernBERT (issue 64): transformers' ModernBertModel under
sentence-transformers, on tiny random models of odd sizes with a byte-level
BPE tokenizer trained here in ModernBERT's tokenizer.json form.

transformers has ModernBERT from 4.48, and its code needs torch >= 2 (a
LayerNorm without bias, torch.compile at import); Debian's torch is 1.13. So
this runs in the developer-only virtual environment of
scripts/make_qwen3_golden.py, never in setup or CI (the files it writes are
committed):
    ~/.cache/ffn/devvenv/venv/bin/pip install sentence-transformers==3.4.1
    ~/.cache/ffn/devvenv/venv/bin/python scripts/make_modernbert_golden.py [tests/data/modernbert]

The tokenizer (tokenizer.json, PreTrainedTokenizerFast) has ModernBERT's
form: NFC, ByteLevel pre-tokenizer without a prefix space, BPE trained on
multilingual text (420 ids), then [UNK] [CLS] [SEP] [PAD] [MASK] as added
special tokens ([MASK] with lstrip), a TemplateProcessing post-processor
[CLS] $A [SEP] (pairs [CLS] $A [SEP] $B [SEP]), no token types.

<out>/tiny/: d 36, 3 heads, 4 layers (global attention on layers 0 and 3,
a local window of 8 on 1 and 2: keys within 4 positions), d_ff 53, GELU
gating, LayerNorm without bias (eps 1e-5), no biases, RoPE θ 160000 global
and 10000 local, 64 positions, vocab_size 3 past the tokenizer's ids; mean
pooling, Normalize, max_seq_length 64, prompts query/document (as
modernbert-embed's "search_query: " / "search_document: ").
<out>/biased/: d 40, 5 heads, 3 layers (global every 2, window 6: 3 each
side, one θ for all layers), d_ff 31, every bias and LayerNorm β on; CLS
pooling, no normalization.

<out>/reranker/: ModernBertForSequenceClassification (gte-reranker-modernbert's
kind): d 30, 3 heads, 3 layers, d_ff 37, mean pooling of the rows
(classifier_pooling), the head's dense layer with a bias, GELU, its
LayerNorm, one label (sigmoid, sentence-transformers' default); the
tokenizer with model_max_length 24. Its golden.safetensors: scores [P, 1]
CrossEncoder(dir).predict(PAIRS), ids.NNN the fast tokenizer's pair ids
(longest first).

Each embedding model's golden.safetensors:
    default     [N, d] SentenceTransformer.encode(SENTENCES), batches of 3
    query       [N, d] the same with prompt_name="query" (tiny only)
    ids.NNN     [n] sentence NNN's ids as sentence-transformers tokenizes it
    hostile.NNN [n] ids of the BERT tests' 72 hostile texts (make_minilm_golden.py), cut at 64
Attention: transformers' eager implementation (the plain formula); the
script checks SDPA's embeddings against it (1e-5) and each text embedded
alone against the batch (1e-5). Every weight is drawn from N(0, 0.3), the
LayerNorm γ from N(1, 0.3). One thread; float32; eval mode.
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
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402
from sentence_transformers import SentenceTransformer, models  # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers  # noqa: E402
from sentence_transformers import CrossEncoder  # noqa: E402
from transformers import (ModernBertConfig, ModernBertForSequenceClassification, ModernBertModel,  # noqa: E402
                          PreTrainedTokenizerFast)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_minilm_golden import SENTENCES as HOSTILE  # noqa: E402
from make_pooling_golden import WORDS  # noqa: E402
from make_xlmr_golden import CORPUS  # noqa: E402

torch.set_num_threads(1)

MAX_SEQ = 64
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
SENTENCES = [
    "The cat sat on the red book.",
    "Le chat est assis sur le livre rouge près de l'eau.",
    "猫は水のそばの赤い本の上に座った。",
    "القطة جلست على الكتاب الأحمر",
    "",
    "a [MASK] word, and [CLS] one [SEP] [PAD] too",
    "emoji 👋🏽 and rare ☃ characters ẞ ﬁ  two  spaces\tand a tab",
    " ".join(WORDS[i % len(WORDS)] for i in range(30)),
    " ".join(WORDS[(i * 3) % len(WORDS)] for i in range(90)),
]


def randomized(make, seed):
    """make() with every weight from N(0, 0.3), the LayerNorms' γ from N(1, 0.3) (torch seeded before make); eval mode."""
    torch.manual_seed(seed)
    model = make()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n and n.endswith("weight"):
                p.normal_(1.0, 0.3)
            else:
                p.normal_(0.0, 0.3)
    return model.eval()


def tokenizer(tmp):
    tok = Tokenizer(tokenizers.models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 2, trainer)
    tok.add_special_tokens([AddedToken(s, lstrip=(s == "[MASK]"), normalized=False) for s in SPECIALS])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]",
                                   model_input_names=["input_ids", "attention_mask"])
    fast.save_pretrained(tmp)
    return fast


def build(out, name, tok, cfg_args, pooling, normalize, prompts=None):
    d = os.path.join(out, name)
    tmp = os.path.join(out, ".base")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(tmp)
    tok.save_pretrained(tmp)
    cfg = ModernBertConfig(vocab_size=len(tok) + 3, max_position_embeddings=MAX_SEQ, norm_eps=1e-5,
                           hidden_activation="gelu", pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id,
                           sep_token_id=tok.sep_token_id, bos_token_id=tok.cls_token_id,
                           eos_token_id=tok.sep_token_id, reference_compile=False, **cfg_args)
    model = randomized(lambda: ModernBertModel(cfg), 64)
    model.save_pretrained(tmp, safe_serialization=True)
    h = cfg.hidden_size
    word = models.Transformer(tmp, max_seq_length=MAX_SEQ, model_args={"attn_implementation": "eager"})
    assert word.auto_model.config._attn_implementation == "eager"
    mods = [word, models.Pooling(h, pooling_mode=pooling)] + ([models.Normalize()] if normalize else [])
    st = SentenceTransformer(modules=mods, device="cpu", prompts=prompts)
    st.save(d, safe_serialization=True)
    shutil.rmtree(tmp)
    emb = st.encode(SENTENCES, convert_to_numpy=True, batch_size=3)
    for i, t in enumerate(SENTENCES):
        alone = st.encode([t], convert_to_numpy=True)[0]
        assert np.abs(alone - emb[i]).max() < 1e-5, (name, i)
    word.auto_model.config._attn_implementation = "sdpa"
    sdpa = st.encode(SENTENCES, convert_to_numpy=True, batch_size=3)
    assert np.abs(sdpa - emb).max() < 1e-5, (name, np.abs(sdpa - emb).max())
    word.auto_model.config._attn_implementation = "eager"
    tensors = {"default": emb.astype(np.float32)}
    if prompts:
        tensors["query"] = st.encode(SENTENCES, convert_to_numpy=True, batch_size=3,
                                     prompt_name="query").astype(np.float32)
    for i, t in enumerate(SENTENCES):
        tensors["ids.%03d" % i] = st.tokenize([t])["input_ids"][0].numpy().astype(np.float32)
    assert len(tensors["ids.008"]) == MAX_SEQ, len(tensors["ids.008"])
    for i, t in enumerate(HOSTILE):
        ids = st.tokenize([t])["input_ids"][0].numpy()
        assert list(ids) == tok(t.strip(), truncation=True, max_length=MAX_SEQ)["input_ids"], i
        tensors["hostile.%03d" % i] = ids.astype(np.float32)
    save_file(tensors, os.path.join(d, "golden.safetensors"), metadata={
        "sentences": json.dumps(SENTENCES), "hostile": json.dumps(HOSTILE),
        "generator": "scripts/make_modernbert_golden.py; sentence-transformers %s, transformers %s, torch %s, "
                     "tokenizers %s" % (sentence_transformers.__version__, transformers.__version__,
                                        torch.__version__, tokenizers.__version__)})
    print(name, emb.shape, "vocab", len(tok))


PAIRS = [
    ["where is the cat", "The cat sat on the red book."],
    ["where is the cat", "a dog runs fast"],
    ["猫はどこ", "猫は水のそばの赤い本の上に座った。"],
    [" ".join(WORDS[:30]), "short"],
    ["short", " ".join(WORDS[:30])],
    ["", "an empty query [MASK]"],
]


def reranker(out, tok):
    d = os.path.join(out, "reranker")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tok.model_max_length = 24
    cfg = ModernBertConfig(vocab_size=len(tok) + 3, hidden_size=30, num_attention_heads=3, intermediate_size=37,
                           num_hidden_layers=3, global_attn_every_n_layers=3, local_attention=8,
                           max_position_embeddings=MAX_SEQ, norm_eps=1e-5, hidden_activation="gelu",
                           classifier_pooling="mean", classifier_bias=True, classifier_activation="gelu",
                           num_labels=1, pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id,
                           sep_token_id=tok.sep_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
                           reference_compile=False)
    model = randomized(lambda: ModernBertForSequenceClassification(cfg), 67)
    model.config._attn_implementation = "eager"
    model.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    ce = CrossEncoder(d, device="cpu", automodel_args={"attn_implementation": "eager"})
    assert ce.model.config._attn_implementation == "eager"
    scores = np.asarray(ce.predict(PAIRS), dtype=np.float32).reshape(len(PAIRS), 1)
    tensors = {"scores": scores}
    for i, (a, b) in enumerate(PAIRS):
        tensors["ids.%03d" % i] = np.array(tok(a, b, truncation="longest_first", max_length=24)["input_ids"],
                                           dtype=np.float32)
    save_file(tensors, os.path.join(d, "golden.safetensors"), metadata={
        "pairs": json.dumps(PAIRS), "generator": "scripts/make_modernbert_golden.py; sentence-transformers %s, "
        "transformers %s, torch %s" % (sentence_transformers.__version__, transformers.__version__, torch.__version__)})
    tok.model_max_length = MAX_SEQ
    print("reranker", scores.ravel())


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/modernbert"
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, ".tok")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tok = tokenizer(tmp)
    shutil.rmtree(tmp)
    build(out, "tiny", tok, dict(hidden_size=36, num_attention_heads=3, intermediate_size=53, num_hidden_layers=4,
                                 global_attn_every_n_layers=3, local_attention=8, global_rope_theta=160000.0,
                                 local_rope_theta=10000.0, norm_bias=False, attention_bias=False, mlp_bias=False),
          "mean", True, prompts={"query": "search_query: ", "document": "search_document: "})
    build(out, "biased", tok, dict(hidden_size=40, num_attention_heads=5, intermediate_size=31, num_hidden_layers=3,
                                   global_attn_every_n_layers=2, local_attention=6, global_rope_theta=10000.0,
                                   local_rope_theta=None, norm_bias=True, attention_bias=True, mlp_bias=True),
          "cls", False)
    reranker(out, tok)


if __name__ == "__main__":
    main()
