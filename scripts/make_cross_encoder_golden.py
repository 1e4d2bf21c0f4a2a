#!/usr/bin/env python3
"""Golden data for cross-encoder rerankers (issue 64): tiny random
BertForSequenceClassification models (d 16, 2 layers, 4 heads, d_ff 24,
a 120-token uncased vocabulary, model_max_length 16), each with the scores
sentence-transformers' CrossEncoder.predict gives for PAIRS.

    .venv/bin/python scripts/make_cross_encoder_golden.py [tests/data/cross_encoder]

<out>/<name>/ is the model directory (save_pretrained of the model and the
tokenizer) plus golden.safetensors:
    scores        [P, labels] CrossEncoder(dir).predict(PAIRS) (one label: as [P, 1])
    ids.NNN       [n] pair NNN's ids from the fast tokenizer, truncation="longest_first"
    types.NNN     [n] their token_type_ids
and __metadata__ pairs (JSON), the activation, the versions.

Models: "logits" (one label, sbert_ce_default_activation_function Identity,
as cross-encoder/ms-marco-MiniLM-L-6-v2), "sigmoid" (one label, no
activation named: sentence-transformers' default, sigmoid) and "three"
(three labels: identity); and "xlmr" (XLMRobertaForSequenceClassification,
as BAAI/bge-reranker-base: the tiny SentencePiece vocabulary of
tests/data/xlmr/tiny, pairs <s> a </s></s> b </s>, one token type,
RobertaClassificationHead, one label, sigmoid by default; transformers'
SentencePiece XLMRobertaTokenizer). One thread, float32, eval mode; the script checks
each score against a recomputation from BertModel and the head.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The environment (offline, one thread), the libraries and the tiny vocabulary of the pooling goldens.
from make_pooling_golden import np, sentence_transformers, torch, transformers, save_file, vocabulary  # noqa: E402
from sentence_transformers import CrossEncoder  # noqa: E402
from transformers import (BertConfig, BertForSequenceClassification, BertTokenizerFast,  # noqa: E402
                          XLMRobertaConfig, XLMRobertaForSequenceClassification, XLMRobertaTokenizer)

PAIRS = [
    ["where is the cat", "The cat sat on the red book."],
    ["where is the cat", "a dog runs fast"],
    ["red book", "Search for the first page of the old book, then read it slowly at night by the fire light."],
    ["one two three four five six seven eight nine ten one two", "one two three four five six seven eight nine"],
    ["a very long query with many words about the old house by the water at night", "short"],
    ["", "empty query"],
    ["x", ""],
]
MODELS = {"logits": (1, "torch.nn.modules.linear.Identity"), "sigmoid": (1, None), "three": (3, None)}
MAX = 16


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/cross_encoder"
    vocab = vocabulary()
    for name, (labels, act) in MODELS.items():
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        with open(os.path.join(d, "vocab.txt"), "w") as f:
            f.write("\n".join(vocab) + "\n")
        tok = BertTokenizerFast(os.path.join(d, "vocab.txt"), do_lower_case=True, model_max_length=MAX)
        cfg = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=24, max_position_embeddings=32, type_vocab_size=2, hidden_act="gelu",
                         layer_norm_eps=1e-12, num_labels=labels, architectures=["BertForSequenceClassification"])
        if act:
            cfg.sbert_ce_default_activation_function = act
        torch.manual_seed(65 + labels + (act is None))
        model = BertForSequenceClassification(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.5)
            for p in model.bert.pooler.parameters():  # tanh far from saturation: scores that differ
                p.normal_(0.0, 0.15)
        model.save_pretrained(d, safe_serialization=True)
        tok.save_pretrained(d)
        ce = CrossEncoder(d, device="cpu")
        scores = np.asarray(ce.predict(PAIRS, batch_size=3), dtype=np.float32).reshape(len(PAIRS), labels)
        tensors = {"scores": scores}
        for i, (a, b) in enumerate(PAIRS):
            # as CrossEncoder tokenizes: a batch of pairs (a lone call drops an empty second text)
            enc = tok([a], [b], truncation="longest_first", max_length=MAX, return_tensors="pt")
            with torch.no_grad():
                logits = model(**enc).logits[0]
            want = torch.sigmoid(logits) if (act is None and labels == 1) else logits
            assert np.abs(want.numpy() - scores[i]).max() < 1e-5, (name, i)
            tensors["ids.%03d" % i] = enc["input_ids"][0].numpy().astype(np.float32)
            tensors["types.%03d" % i] = enc["token_type_ids"][0].numpy().astype(np.float32)
        save_file(tensors, os.path.join(d, "golden.safetensors"), metadata={
            "pairs": json.dumps(PAIRS), "activation": str(act),
            "generator": "scripts/make_cross_encoder_golden.py; sentence-transformers %s, transformers %s, torch %s"
                         % (sentence_transformers.__version__, transformers.__version__, torch.__version__)})
        print(name, scores.ravel()[:4])
    xlmr(out)


def xlmr(out):
    d = os.path.join(out, "xlmr")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    spm_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "xlmr", "tiny",
                            "sentencepiece.bpe.model")
    tok = XLMRobertaTokenizer(spm_file, model_max_length=MAX)
    cfg = XLMRobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=24, max_position_embeddings=MAX + 2, type_vocab_size=1, hidden_act="gelu",
                           layer_norm_eps=1e-5, pad_token_id=1, num_labels=1,
                           architectures=["XLMRobertaForSequenceClassification"])
    torch.manual_seed(68)
    model = XLMRobertaForSequenceClassification(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
        for p in model.classifier.dense.parameters():  # tanh far from saturation
            p.normal_(0.0, 0.15)
    model.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    ce = CrossEncoder(d, device="cpu", tokenizer_args={"use_fast": False})
    assert not ce.tokenizer.is_fast
    scores = np.asarray(ce.predict(PAIRS, batch_size=3), dtype=np.float32).reshape(len(PAIRS), 1)
    tensors = {"scores": scores}
    for i, (a, b) in enumerate(PAIRS):
        enc = tok([a], [b], truncation="longest_first", max_length=MAX, return_tensors="pt")
        with torch.no_grad():
            want = torch.sigmoid(model(**enc).logits[0])
        assert np.abs(want.numpy() - scores[i]).max() < 1e-5, ("xlmr", i)
        tensors["ids.%03d" % i] = enc["input_ids"][0].numpy().astype(np.float32)
        tensors["types.%03d" % i] = np.zeros(enc["input_ids"].shape[1], dtype=np.float32)
    save_file(tensors, os.path.join(d, "golden.safetensors"), metadata={
        "pairs": json.dumps(PAIRS), "activation": "None",
        "generator": "scripts/make_cross_encoder_golden.py; sentence-transformers %s, transformers %s, torch %s"
                     % (sentence_transformers.__version__, transformers.__version__, torch.__version__)})
    print("xlmr", scores.ravel()[:4])


if __name__ == "__main__":
    main()
