"""ffn.SentenceEncoder against the committed Hugging Face reference
(tests/data/minilm_golden.safetensors, scripts/make_minilm_golden.py) on the
installed all-MiniLM-L6-v2; skipped, saying why, where it is not installed."""
import json
import os
import pathlib
import shutil
import warnings

import numpy as np
import pytest

import ffn

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "minilm_golden.safetensors"
MODEL = os.environ.get("FFN_MODEL_DIR") or os.path.expanduser("~/.cache/ffn/all-MiniLM-L6-v2")
needs_model = pytest.mark.skipif(not os.path.isfile(os.path.join(MODEL, "model.safetensors")),
                                 reason=f"all-MiniLM-L6-v2 is not installed at {MODEL} (scripts/setup.sh installs it)")


def golden():
    tensors = ffn._ffn._read_safetensors(str(GOLDEN))
    with open(GOLDEN, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(f.read(n))["__metadata__"]
    return tensors, json.loads(meta["sentences"])


@needs_model
def test_tokens_and_embeddings_match_sentence_transformers():
    tensors, sentences = golden()
    enc = ffn.SentenceEncoder.load()
    for i, s in enumerate(sentences):
        assert enc.tokenize(s) == [int(v) for v in tensors[f"ids.{i:03d}"]], s
    e = enc.embed(sentences, batch=8, threads=2)
    want = tensors["embeddings"]
    assert e.shape == want.shape and e.dtype == np.float32
    cos = np.sum(e * want, axis=1) / np.linalg.norm(e, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.99999
    assert np.abs(e - want).max() <= 1e-5
    one = enc.embed(sentences[0])
    assert one.shape == (enc.dim,) and np.array_equal(one, e[0])


@needs_model
def test_bad_input_is_a_clear_error():
    enc = ffn.SentenceEncoder.load()
    with pytest.raises(ffn.Error, match="max_tokens|--max-tokens"):
        ffn.SentenceEncoder.load(max_tokens=513)
    with pytest.raises(ffn.Error, match="batch"):
        enc.embed(["a"], batch=0)
    with pytest.raises(TypeError):
        enc.embed(3)


def test_a_missing_model_directory_is_named(tmp_path):
    with pytest.raises(ffn.Error, match="not a model directory"):
        ffn.SentenceEncoder.load(str(tmp_path / "none"))


@needs_model
def test_int8_keeps_outlier_channels_and_meets_the_target():
    tensors, sentences = golden()
    want = tensors["embeddings"]
    enc = ffn.SentenceEncoder.load(dtype="int8")
    plain = ffn.SentenceEncoder.load(dtype="int8", int8_outliers=False)
    assert all(99 in c for c in enc.fp32_input_channels)
    assert all(c == [] for c in plain.fp32_input_channels)
    cos = lambda e: np.sum(e * want, axis=1) / np.linalg.norm(e, axis=1) / np.linalg.norm(want, axis=1)
    assert cos(enc.embed(sentences, threads=2)).min() >= 0.999  # the int8 target
    assert cos(plain.embed(sentences, threads=2)).min() < 0.999  # what it fixes
    # int8_attention=False: the FFN sublayers only (the attention's projections stay fp32)
    ffn_only = ffn.SentenceEncoder.load(dtype="int8", int8_attention=False).embed(sentences, threads=2)
    assert cos(ffn_only).min() >= 0.999
    assert not np.array_equal(ffn_only, enc.embed(sentences, threads=2))
    # layers: only those take int8 (the others float32, no channels); a threshold above every |x| / rms: none kept
    one = ffn.SentenceEncoder.load(dtype="int8", layers=[2])
    assert [bool(c) for c in one.fp32_input_channels] == [i == 2 for i in range(len(enc.fp32_input_channels))]
    assert one.fp32_input_channels[2] == enc.fp32_input_channels[2]
    assert cos(one.embed(sentences, threads=2)).min() > cos(enc.embed(sentences, threads=2)).min()
    none = ffn.SentenceEncoder.load(dtype="int8", outlier_threshold=1e9)
    assert all(c == [] for c in none.fp32_input_channels)
    with pytest.raises(ffn.Error, match="layer 99 does not exist"):
        ffn.SentenceEncoder.load(dtype="int8", layers=[99])


def copy_model(tmp_path, name):
    """A copy of the installed model's directory, model.safetensors linked."""
    d = tmp_path / name
    shutil.copytree(MODEL, d, ignore=shutil.ignore_patterns("model.safetensors"))
    (d / "model.safetensors").symlink_to(os.path.join(os.path.abspath(MODEL), "model.safetensors"))
    return d


@needs_model
def test_what_the_model_files_leave_unsaid_is_a_warning(tmp_path):
    """Issue 31, item 8: each note of SentenceEncoder.load_notes is a
    UserWarning at the caller's line; the installed model has none."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ffn.SentenceEncoder.load().load_notes == []
    layers = copy_model(tmp_path, "layers")
    cfg = json.loads((layers / "config.json").read_text())
    cfg["num_hidden_layers"] = 4
    (layers / "config.json").write_text(json.dumps(cfg))
    pooling = copy_model(tmp_path, "pooling")
    shutil.rmtree(pooling / "1_Pooling")
    cases = {layers: f"{layers / 'config.json'}: num_hidden_layers is 4, but {layers / 'model.safetensors'} holds "
                     "6 layers; the tensors of layers 4..5 are not used",
             pooling: f"{pooling / '1_Pooling' / 'config.json'}: not found; assumed mean pooling"}
    for d, want in cases.items():
        with pytest.warns(UserWarning) as w:
            enc = ffn.SentenceEncoder.load(str(d))
        assert [str(x.message) for x in w] == [want] == enc.load_notes
        assert w[0].filename == __file__  # the caller's line, as warnings.warn(..., stacklevel=2)


def test_a_pytorch_model_bin_is_named_not_read(tmp_path):
    """Issue 31, item 8: a directory with pytorch_model.bin and no
    model.safetensors is refused in one line that says how to convert it."""
    config = {"model_type": "bert", "hidden_act": "gelu", "hidden_size": 8, "num_attention_heads": 2,
              "intermediate_size": 16, "num_hidden_layers": 1, "max_position_embeddings": 16, "vocab_size": 5}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK\x03\x04 never read")
    with pytest.raises(ffn.Error) as e:
        ffn.SentenceEncoder.load(str(tmp_path))
    m = str(e.value)
    assert m.startswith(f"{tmp_path / 'model.safetensors'}: not found; {tmp_path / 'pytorch_model.bin'} is a "
                        "PyTorch checkpoint, which ffn does not read"), m
    assert (f"AutoModel.from_pretrained('{tmp_path}').save_pretrained('{tmp_path}', safe_serialization=True)"
            in m and "\n" not in m), m


POOLING = pathlib.Path(__file__).resolve().parents[1] / "data" / "pooling"


def test_prompts_pooling_and_truncation_are_sentence_transformers():
    """The tiny models of tests/data/pooling (scripts/make_pooling_golden.py):
    every pooling mode and prompt against sentence-transformers' embeddings."""
    for d in sorted(p for p in POOLING.iterdir() if p.is_dir()):
        tensors = ffn._ffn._read_safetensors(str(d / "golden.safetensors"))
        with open(d / "golden.safetensors", "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            sentences = json.loads(json.loads(f.read(n))["__metadata__"]["sentences"])
        enc = ffn.SentenceEncoder.load(str(d))
        assert enc.dim == tensors["default"].shape[1], d.name
        runs = [("default", {})] + [(f"prompt.{p}", {"prompt_name": p}) for p in enc.prompts]
        for key, kw in runs:
            e = enc.embed(sentences, **kw)
            assert np.abs(e - tensors[key]).max() <= 1e-5, (d.name, key)
        for p, text in enc.prompts.items():
            assert np.array_equal(enc.embed(sentences, prompt_name=p), enc.embed(sentences, prompt=text))
    e5 = ffn.SentenceEncoder.load(str(POOLING / "mean_prompts"))
    assert (e5.pooling, e5.default_prompt_name) == ("mean, normalized", "passage")
    with pytest.raises(ValueError, match="prompt name 'nope': the model has only passage, query"):
        e5.embed(["x"], prompt_name="nope")
    long_text = "one two three four five six seven eight nine ten one two three"
    with pytest.raises(ValueError, match="more than the model's 12 tokens"):
        e5.embed(["short", long_text], truncate=False)
    assert e5.embed([long_text]).shape == (1, 16)  # cut, as sentence-transformers cuts it


CROSS = pathlib.Path(__file__).resolve().parents[1] / "data" / "cross_encoder"


def test_cross_encoder_scores_and_ranks_as_sentence_transformers():
    """ffn.CrossEncoder on the tiny models of tests/data/cross_encoder
    (scripts/make_cross_encoder_golden.py): CrossEncoder.predict's scores
    and shapes, and rank's order."""
    for name in ("logits", "sigmoid", "three", "xlmr"):
        d = CROSS / name
        tensors = ffn._ffn._read_safetensors(str(d / "golden.safetensors"))
        with open(d / "golden.safetensors", "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            pairs = json.loads(json.loads(f.read(n))["__metadata__"]["pairs"])
        try:
            ce = ffn.CrossEncoder.load(str(d))
        except ValueError as e:  # XLM-R's tokenizer needs libsentencepiece
            assert "built without libsentencepiece" in str(e), e
            print(f"SKIPPED: the {name} cross-encoder: {e}")
            continue
        s = ce.predict(pairs, batch=3)
        want = tensors["scores"]
        assert s.shape == ((len(pairs),) if ce.labels == 1 else want.shape), name
        assert np.abs(s.reshape(want.shape) - want).max() <= 1e-4, name
    ce = ffn.CrossEncoder.load(str(CROSS / "logits"))
    docs = ["The cat sat on the red book.", "a dog runs fast", "the cat"]
    ranked = ce.rank("where is the cat", docs, return_documents=True)
    scores = ce.predict([("where is the cat", d) for d in docs])
    assert [r["corpus_id"] for r in ranked] == sorted(range(3), key=lambda i: -scores[i])
    assert all(r["text"] == docs[r["corpus_id"]] for r in ranked)
    assert len(ce.rank("where is the cat", docs, top_k=1)) == 1
    with pytest.raises(ValueError, match="BertForSequenceClassification"):
        ffn.CrossEncoder.load(str(POOLING / "max"))


DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


def test_mpnet_xlmr_and_modernbert_embed_as_sentence_transformers():
    """The tiny random MPNet, XLM-R and ModernBERT models (scripts/make_mpnet_golden.py,
    scripts/make_xlmr_golden.py, scripts/make_modernbert_golden.py) through the
    binding: the same embeddings."""
    for d in (DATA / "mpnet" / "tiny", DATA / "xlmr" / "tiny", DATA / "xlmr" / "bert_body",
              DATA / "modernbert" / "tiny", DATA / "modernbert" / "biased"):
        tensors = ffn._ffn._read_safetensors(str(d / "golden.safetensors"))
        with open(d / "golden.safetensors", "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            sentences = json.loads(json.loads(f.read(n))["__metadata__"]["sentences"])
        try:
            enc = ffn.SentenceEncoder.load(str(d))
        except ValueError as e:
            assert "built without libsentencepiece" in str(e), e
            print(f"SKIPPED: {d}: {e}")
            continue
        assert np.abs(enc.embed(sentences, batch=3) - tensors["default"]).max() <= 1e-5, d


@needs_model
def test_bf16_compute_is_close_to_sentence_transformers_and_refused_where_it_does_not_apply():
    """compute="bf16" (every projection's operands rounded to bf16, sums in fp32): within
    cosine 0.9999 of the Hugging Face reference on the golden's sentences, each
    text's bits its own (alone or in a batch); an int8 model, a ModernBERT
    model (float32 only) and an unknown mode are refused naming what is wrong."""
    tensors, sentences = golden()
    enc = ffn.SentenceEncoder.load()
    e = enc.embed(sentences, batch=8, threads=2, compute="bf16")
    want = tensors["embeddings"]
    cos = np.sum(e * want, axis=1) / np.linalg.norm(e, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.9999 and not np.array_equal(e, enc.embed(sentences, batch=8))
    assert np.array_equal(enc.embed(sentences[1], compute="bf16"), e[1])
    with pytest.raises(ffn.Error, match="compute"):
        enc.embed(["a"], compute="fp16")
    with pytest.raises(ffn.Error, match="compute bf16"):
        ffn.SentenceEncoder.load(dtype="int8").embed(["a"], compute="bf16")
    modern = DATA / "modernbert" / "tiny"
    with pytest.raises(ffn.Error, match="compute bf16"):
        ffn.SentenceEncoder.load(str(modern)).embed(["a"], compute="bf16")
