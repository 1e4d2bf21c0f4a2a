#!/usr/bin/env python3
"""Golden data for XLM-RoBERTa (issue 64): transformers' XLMRobertaModel
under sentence-transformers on a tiny random model with a SentencePiece
Unigram vocabulary trained here on multilingual text.

    .venv/bin/python scripts/make_xlmr_golden.py [tests/data/xlmr]

<out>/tiny/ is a sentence-transformers model directory: sentencepiece.bpe.model
(Unigram, 600 pieces, nmt_nfkc, character coverage 0.995 so that rare
characters are unknown), a random XLM-R (d 20, 4 heads, 2 layers, d_ff 36,
GELU, 66 positions with pad id 1, so 64 usable, one token type; every weight
from N(0, 0.5)), mean pooling, Normalize, max_seq_length 64. The tokenizer
is transformers' XLMRobertaTokenizer (the SentencePiece one: the fast one
needs protobuf to convert it). Its golden.safetensors:
    default     [N, 20] SentenceTransformer.encode(SENTENCES), batches of 4
    ids.NNN     [n] sentence NNN's ids as sentence-transformers tokenizes it
    hostile.NNN [n] ids of the BERT tests' 72 hostile texts (make_minilm_golden.py),
                as sentence-transformers tokenizes them (cut at 64)
    pair.NNN    [n] tokenizer(a, b, truncation="longest_first", max_length=24)
                of PAIRS[NNN], as CrossEncoder tokenizes a pair

<out>/bert_body/ is paraphrase-multilingual-MiniLM's shape: a random BERT
(BertModel: positions from 0, two token types, 7 embedding rows past the
tokenizer's ids) with the same XLM-R tokenizer (tokenizer_class
XLMRobertaTokenizer); its golden.safetensors holds `default` for SENTENCES.

One thread; float32; eval mode. The script checks each text embedded alone
against the batch (1e-5).
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
import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402
from sentence_transformers import SentenceTransformer, models  # noqa: E402
from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_minilm_golden import SENTENCES as HOSTILE  # noqa: E402
from make_pooling_golden import WORDS  # noqa: E402

torch.set_num_threads(1)

MAX_SEQ = 64
CORPUS = [
    "The cat sat on the red book by the water.",
    "Le chat est assis sur le livre rouge près de l'eau.",
    "Die Katze sitzt auf dem roten Buch am Wasser.",
    "El gato se sentó en el libro rojo junto al agua.",
    "猫は水のそばの赤い本の上に座った。",
    "猫坐在水边的红色书上。",
    "고양이는 물가의 빨간 책 위에 앉았다.",
    "القطة جلست على الكتاب الأحمر بجانب الماء.",
    "बिल्ली पानी के पास लाल किताब पर बैठी।",
    "Кошка сидела на красной книге у воды.",
    "Η γάτα κάθισε στο κόκκινο βιβλίο δίπλα στο νερό.",
    "שלום עולם, החתול ישב על הספר האדום.",
] + [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12)) for i in range(60)]
SENTENCES = [
    "The cat sat on the red book.",
    "Le chat est assis sur le livre rouge.",
    "猫は水のそばの赤い本の上に座った。",
    "القطة جلست على الكتاب الأحمر",
    "बिल्ली पानी के पास लाल किताब पर बैठी।",
    "",
    "   spaces around   ",
    "a <mask> word, and <s> one </s> <pad> <unk> too",
    "emoji 👋🏽 and rare ☃ characters ẞ ﬁ",
    " ".join(WORDS[i % len(WORDS)] for i in range(80)),
]
PAIRS = [
    ("where is the cat", "The cat sat on the red book by the water."),
    ("猫はどこ", "猫は水のそばの赤い本の上に座った。"),
    (" ".join(WORDS[:30]), "short"),
    ("short", " ".join(WORDS[:30])),
    (" ".join(WORDS[:20]), " ".join(WORDS[20:45])),
    ("", "an empty query <mask>"),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/xlmr"
    d = os.path.join(out, "tiny")
    tmp = os.path.join(out, ".base")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(tmp)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS * 3), model_prefix=os.path.join(tmp, "spm"), model_type="unigram",
        vocab_size=600, character_coverage=0.995, hard_vocab_limit=False, num_threads=1, minloglevel=2)
    os.rename(os.path.join(tmp, "spm.model"), os.path.join(tmp, "sentencepiece.bpe.model"))
    tok = XLMRobertaTokenizer(os.path.join(tmp, "sentencepiece.bpe.model"))
    cfg = XLMRobertaConfig(vocab_size=len(tok), hidden_size=20, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=36, max_position_embeddings=MAX_SEQ + 2, type_vocab_size=1,
                           layer_norm_eps=1e-5, hidden_act="gelu", pad_token_id=1)
    torch.manual_seed(64)
    model = XLMRobertaModel(cfg, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    word = models.Transformer(tmp, max_seq_length=MAX_SEQ, tokenizer_args={"use_fast": False})
    assert not word.tokenizer.is_fast
    st = SentenceTransformer(modules=[word, models.Pooling(20, pooling_mode_mean_tokens=True), models.Normalize()],
                             device="cpu")
    st.save(d, safe_serialization=True)
    for f in os.listdir(d):  # the fast tokenizer's file, if any was written, is not what was run
        assert f != "tokenizer.json", "a tokenizer.json was saved"
    # paraphrase-multilingual-MiniLM's shape: a BERT body with the XLM-R tokenizer.
    bert_dir = os.path.join(out, "bert_body")
    shutil.rmtree(bert_dir, ignore_errors=True)
    bcfg = BertConfig(vocab_size=len(tok) + 7, hidden_size=20, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=36, max_position_embeddings=MAX_SEQ, type_vocab_size=2, hidden_act="gelu",
                      layer_norm_eps=1e-12, pad_token_id=1)
    bert = BertModel(bcfg, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in bert.parameters():
            p.normal_(0.0, 0.5)
    bert.save_pretrained(tmp, safe_serialization=True)
    bword = models.Transformer(tmp, max_seq_length=MAX_SEQ, tokenizer_args={"use_fast": False})
    bst = SentenceTransformer(modules=[bword, models.Pooling(20, pooling_mode_mean_tokens=True), models.Normalize()],
                              device="cpu")
    bst.save(bert_dir, safe_serialization=True)
    bemb = bst.encode(SENTENCES, convert_to_numpy=True, batch_size=4)
    save_file({"default": bemb.astype(np.float32)}, os.path.join(bert_dir, "golden.safetensors"), metadata={
        "sentences": json.dumps(SENTENCES), "generator": "scripts/make_xlmr_golden.py"})
    shutil.rmtree(tmp)
    emb = st.encode(SENTENCES, convert_to_numpy=True, batch_size=4)
    for i, t in enumerate(SENTENCES):
        alone = st.encode([t], convert_to_numpy=True)[0]
        assert np.abs(alone - emb[i]).max() < 1e-5, i
    tensors = {"default": emb.astype(np.float32)}
    for i, t in enumerate(SENTENCES):
        tensors["ids.%03d" % i] = st.tokenize([t])["input_ids"][0].numpy().astype(np.float32)
    assert len(tensors["ids.009"]) == MAX_SEQ
    for i, t in enumerate(HOSTILE):
        tensors["hostile.%03d" % i] = st.tokenize([t])["input_ids"][0].numpy().astype(np.float32)
    for i, (a, b) in enumerate(PAIRS):
        ids = tok(a, b, truncation="longest_first", max_length=24)["input_ids"]
        tensors["pair.%03d" % i] = np.array(ids, dtype=np.float32)
    save_file(tensors, os.path.join(d, "golden.safetensors"), metadata={
        "sentences": json.dumps(SENTENCES), "hostile": json.dumps(HOSTILE), "pairs": json.dumps(PAIRS),
        "generator": "scripts/make_xlmr_golden.py; sentence-transformers %s, transformers %s, torch %s, "
                     "sentencepiece %s" % (sentence_transformers.__version__, transformers.__version__,
                                           torch.__version__, spm.__version__)})
    unk = sum(int((v == 3).sum()) for k, v in tensors.items() if k.startswith(("ids.", "hostile.")))
    print("tiny", emb.shape, "vocab", len(tok), "unknown ids", unk)


if __name__ == "__main__":
    main()
