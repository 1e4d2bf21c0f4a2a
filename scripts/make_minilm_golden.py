#!/usr/bin/env python3
"""Writes the golden reference for the pretrained all-MiniLM-L6-v2 model
(sentence-transformers; BERT, 6 layers, d 384, 12 heads, d_ff 1536, GELU
(erf), post-LN eps 1e-12, WordPiece uncased vocab 30522, mean pooling, L2
normalization), computed by Hugging Face transformers.

Run with the project's virtual environment, after scripts/setup.sh installed
the reference (transformers, tokenizers, optionally sentence-transformers)
and extracted the model:
    .venv/bin/python scripts/make_minilm_golden.py [tests/data/minilm_golden.safetensors]
The model directory is ${FFN_MODEL_DIR:-~/.cache/ffn/all-MiniLM-L6-v2}; it is
read offline (HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1). One thread, so the
output is the same on every run on a given machine.

The one safetensors file (float32, little endian) holds:
    ids.NNN                 [n] the token ids of sentence NNN (000, 001, ...) from
                            BertTokenizerFast, [CLS] ... [SEP], truncated to
                            max_seq_length as sentence-transformers does:
                            tokenizer(text.strip(), truncation=True, max_length=256)
                            (sentence-transformers' Transformer.tokenize strips
                            each text with Python's str.strip() first)
    embeddings              [N, 384] the sentence embeddings as sentence-transformers
                            computes them (modules.json: Transformer -> Pooling(mean)
                            -> Normalize): BertModel in float32 (eval, no_grad,
                            token_type_ids 0) on batches of 8 sentences padded to the
                            longest, mean of last_hidden_state over the real tokens
                            (attention mask; sum / max(count, 1e-9)), then
                            x / max(||x||_2, 1e-12)
    ffn.L.input.NNN         [n, 384] layer L's (0..5) FFN sublayer input for sentence
                            NNN alone (no padding): the output of BertLayer's attention
                            block, i.e. the input of layer.intermediate
    ffn.L.output.NNN        [n, 384] the FFN sublayer output: layer.output, i.e.
                            LayerNorm(dense_2(gelu(dense_1(input))) + input), eps 1e-12
                            (also the output of layer L)
    pairs                   [P, 2] sentence indices of pairs for a ranking test
    pairs_similar           [P] 1 where the pair is a paraphrase, 0 where unrelated:
                            every paraphrase pair has a higher cosine than every
                            unrelated pair
and in __metadata__ (strings):
    sentences               JSON list of the N input texts (before the strip)
    max_seq_length          "256", from the model's sentence_bert_config.json
    ffn_sentences           JSON list of the sentence indices with ffn.* tensors
    model                   the model and its model.safetensors sha256
    generator               this script and the library versions used

The script checks (and fails otherwise) that the slow, pure-Python
BertTokenizer gives the same ids as the fast one on every sentence, that
each sentence embedded alone gives the batched embedding within 1e-5, that
the FFN tensors match a recomputation from the layer's weights, and, when
sentence-transformers is installed, that its tokenize() and encode() agree.
"""
import hashlib
import json
import os
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from transformers import BertModel, BertTokenizer, BertTokenizerFast  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import write_safetensors  # noqa: E402  (the one safetensors writer of the golden scripts)

try:
    import sentence_transformers
    from sentence_transformers import SentenceTransformer
except ImportError:
    sentence_transformers = None

MODEL_DIR = os.environ.get("FFN_MODEL_DIR") or os.path.expanduser("~/.cache/ffn/all-MiniLM-L6-v2")
BATCH = 8
ALONE_TOL = 1e-5

# ---- the sentences -----------------------------------------------------------

LONG_PLAIN = " ".join(
    f"({i}) The committee met on a rainy Tuesday morning to discuss the budget for the coming year, "
    f"and after a long debate about roads, schools and hospitals it agreed to publish a report "
    f"before the end of the month, so that every citizen could read it and send comments."
    for i in range(1, 21))
LONG_MIXED = " ".join(
    f"Item {i}: Zürich→東京 costs ${i * 17 % 100}.{i * 7 % 100:02d} (naïve estimate!!!), see "
    f"https://example.org/q?id={i} — 🚀✨ 你好 Привет; e-mail: user{i}@example.com..."
    for i in range(1, 31))
LONG_GREEK_WORD = ("Lopadotemachoselachogaleokranioleipsanodrimhypotrimmatosilphiokarabomelitokatakechymeno"
                   "kichlepikossyphophattoperisteralektryonoptekephalliokigklopeleiolagoiosiraiobaphetraganopterygon")

SENTENCES = [
    # 0 and 1 also have the FFN sublayer tensors.
    "The quick brown fox jumps over the lazy dog.",
    "Café au lait, naïve façade — Ångström said: “Hello!!! What?...”",
    # Paraphrases and unrelated sentences (the pairs below).
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market fell sharply today.",
    "The cat sits on the mat.",
    "A cat is sitting on a rug.",
    "How do I reset my password?",
    "I forgot my password, how can I change it?",
    "The weather is lovely today.",
    "It's a beautiful, sunny day outside.",
    "Quantum computers use qubits to perform calculations.",
    "She plays the violin in an orchestra.",
    "A woman is playing a musical instrument.",
    # Case, accents, punctuation, numbers, URLs, apostrophes and hyphens.
    "ThE qUiCk BrOwN fOx JUMPS over THE lazy DOG",
    "NASA and the U.S.A. launched the SpaceX Falcon-9 rocket.",
    "Crème brûlée, jalapeño, São Paulo, Zürich, Kraków, smörgåsbord, résumé.",
    "Hello!!! What?... Wait---what?! (really) [yes] {no} <maybe> ...... ;-)",
    "Pi is 3.14159, e is 2.71828, and 1,000,000 is a million; 42% of $5.99 is $2.52.",
    "Call +1 (555) 123-4567 on 2024-01-15 at 12:30pm, order #A-77/B.",
    "Visit https://www.example.com/path/to/page?query=1&lang=en#section or email john.doe+test@example.co.uk.",
    "Don't stop; it's rock'n'roll, y'all — the state-of-the-art, well-known e-mail co-op.",
    # CJK (each ideograph its own word), kana, Hangul (decomposed into jamo by NFD).
    "我爱自然语言处理。今天天气很好！",
    "東京は日本の首都です。漢字とひらがなとカタカナ。",
    "안녕하세요, 세계! 한국어 문장입니다.",
    # Emoji: plain, ZWJ sequences, skin tones, variation selector, flags.
    "I love pizza 🍕😀🎉 and coffee ☕!",
    "Family: 👨\u200d👩\u200d👧\u200d👦, thumbs up 👍🏽👍🏿, heart ❤\ufe0f, flag 🇫🇷, woman technologist 👩🏻\u200d💻.",
    # Control characters and odd whitespace.
    "tab\tseparated\tvalues\r\nnew line\nand\u00a0no-break\u00a0spaces",
    "zero\u200bwidth\u200bspace and soft\u00adhyphen and word\u2060joiner",
    "control\x00chars\x07bell\x1b[31mred\x1b[0m\x7f and \ufffd replacement",
    "line\u2028separator and paragraph\u2029separator, em\u2003space, ideographic\u3000space",
    "\u2028leading and trailing line separators\u2028",
    # Rare words: many ## pieces; words over 100 characters become [UNK].
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism floccinaucinihilipilification",
    "xqzvbnmk jjjjjjjjjjjj zzyzx qwertyuiop asdfghjkl",
    "Words of exactly 100 and 101 characters: " + "ab" * 50 + " " + "ab" * 50 + "c",
    "The dish " + LONG_GREEK_WORD + " is in a comedy by Aristophanes.",
    # Other scripts.
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "שלום עולם and สวัสดีครับ",
    # Combining characters.
    "e\u0301te\u0301 nai\u0308ve n\u0303 a\u030a — Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d\u0308\u0307"
    "l\u036e\u0312\u036bg\u030c\u0317\u035a\u031ao\u0319\u0314\u036e\u0307\u0350\u0307",
    # Empty and whitespace only.
    "",
    "   \t\n  ",
    # Symbols, compatibility characters, special-token text.
    "x² + y² = z², ½ + ¼ = ¾, ﬁne ligature, ＦＵＬＬＷＩＤＴＨ text, ™ © ®",
    "C++ and C# and F# are #programming languages; @user said ~/path\\to\\file is $HOME.",
    "[CLS] special [SEP] tokens [MASK] in [UNK] text [PAD]",
    "a",
    ".",
    "🍕",
    "Ångström ÅNGSTRÖM ångström",
    "The year 1999 vs. 2000s; 3rd, 21st, 100th; 0.001 and 1e-9 and -42.",
    "mixed中文English混合text日本語テキスト",
    "UPPERCASE SENTENCE WITH SHOUTING!!!",
    "Dr. Smith's co-worker isn't here—she's at St. Mary's.",
    "Ελληνικά και English και Русский",
    "'quoted' \"double\" «guillemets» „German“ ‚single‘ 「Japanese」",
    "Non-BMP: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 𝟙𝟚𝟛 𠀋 (CJK extension B)",
    "precomposed \u00e9 vs decomposed e\u0301: café cafe\u0301",
    # More paraphrases and unrelated sentences.
    "A dog runs through the park.",
    "A puppy is running across the grass.",
    "The recipe needs two cups of flour and one egg.",
    "Machine learning models require large amounts of data.",
    "Deep neural networks need lots of training examples.",
    "Paris is the capital of France.",
    "France's capital city is Paris.",
    "I need to book a flight to Tokyo.",
    "Bananas are rich in potassium.",
    # Truncation: 256 tokens exactly, 257 (one cut), and two texts over 512 tokens.
    " ".join(["hello"] * 254),
    " ".join(["hello"] * 255),
    LONG_PLAIN,
    LONG_MIXED,
]

PAIRS = [  # (a, b, similar)
    ("A man is eating food.", "A man is eating a piece of bread.", 1),
    ("The cat sits on the mat.", "A cat is sitting on a rug.", 1),
    ("How do I reset my password?", "I forgot my password, how can I change it?", 1),
    ("The weather is lovely today.", "It's a beautiful, sunny day outside.", 1),
    ("She plays the violin in an orchestra.", "A woman is playing a musical instrument.", 1),
    ("A dog runs through the park.", "A puppy is running across the grass.", 1),
    ("Machine learning models require large amounts of data.",
     "Deep neural networks need lots of training examples.", 1),
    ("Paris is the capital of France.", "France's capital city is Paris.", 1),
    ("A man is eating food.", "The stock market fell sharply today.", 0),
    ("The cat sits on the mat.", "Quantum computers use qubits to perform calculations.", 0),
    ("How do I reset my password?", "Bananas are rich in potassium.", 0),
    ("Paris is the capital of France.", "The recipe needs two cups of flour and one egg.", 0),
    ("The weather is lovely today.", "Machine learning models require large amounts of data.", 0),
]

FFN_SENTENCES = [0, 1]


def mean_pool_normalize(hidden, mask):
    """sentence-transformers' Pooling (mean over the attention mask), then Normalize."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return F.normalize(pooled, p=2, dim=1)


def embed(model, tok, texts, max_len):
    enc = tok(texts, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
    out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                token_type_ids=enc["token_type_ids"])
    return mean_pool_normalize(out.last_hidden_state, enc["attention_mask"])


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/minilm_golden.safetensors"
    torch.set_num_threads(1)
    with open(os.path.join(MODEL_DIR, "sentence_bert_config.json")) as f:
        max_len = int(json.load(f)["max_seq_length"])
    with open(os.path.join(MODEL_DIR, "model.safetensors"), "rb") as f:
        model_sha = hashlib.sha256(f.read()).hexdigest()

    fast = BertTokenizerFast.from_pretrained(MODEL_DIR, local_files_only=True)
    slow = BertTokenizer.from_pretrained(MODEL_DIR, local_files_only=True)
    model = BertModel.from_pretrained(MODEL_DIR, local_files_only=True, torch_dtype=torch.float32)
    model.eval()
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size,
            cfg.hidden_act, cfg.layer_norm_eps, cfg.vocab_size) == (6, 384, 12, 1536, "gelu", 1e-12, 30522), cfg
    assert len(SENTENCES) >= 64 and len(set(SENTENCES)) == len(SENTENCES)

    # Tokens: the fast tokenizer on the stripped text, as sentence-transformers.
    texts = [s.strip() for s in SENTENCES]
    out, ids = {}, []
    disagreements = []
    for i, t in enumerate(texts):
        a = fast(t, truncation=True, max_length=max_len)["input_ids"]
        b = slow(t, truncation=True, max_length=max_len)["input_ids"]
        if a != b:
            disagreements.append((i, t, a, b))
        ids.append(a)
        out[f"ids.{i:03d}"] = torch.tensor(a, dtype=torch.float32)
    for i, t, a, b in disagreements:
        print(f"DISAGREEMENT sentence {i} {t!r}:\n  fast {fast.convert_ids_to_tokens(a)}\n"
              f"  slow {slow.convert_ids_to_tokens(b)}")
    print(f"fast vs slow tokenizer: {len(disagreements)} of {len(texts)} sentences differ")
    full_lengths = [len(fast(t, verbose=False)["input_ids"]) for t in texts]
    assert sum(n > 512 for n in full_lengths) >= 2, full_lengths
    assert full_lengths[SENTENCES.index(" ".join(["hello"] * 254))] == max_len
    assert full_lengths[SENTENCES.index(" ".join(["hello"] * 255))] == max_len + 1
    print(f"untruncated lengths over 512 tokens: {[n for n in full_lengths if n > 512]}; "
          f"truncated to {max_len}: {sum(n > max_len for n in full_lengths)} sentences")

    with torch.no_grad():
        # Embeddings: batches of 8, padded.
        emb = torch.cat([embed(model, fast, texts[k:k + BATCH], max_len) for k in range(0, len(texts), BATCH)])
        alone = torch.cat([embed(model, fast, [t], max_len) for t in texts])
        d_alone = (emb - alone).abs().max().item()
        print(f"embeddings batched (8, padded) vs each sentence alone: max |diff| {d_alone:.3g}")
        assert d_alone < ALONE_TOL
        norms = emb.norm(dim=1)
        assert (norms - 1).abs().max() < 1e-5, norms
        out["embeddings"] = emb

        # The FFN sublayers of sentences 0 and 1, alone (no padding).
        for s in FFN_SENTENCES:
            got = {}
            hooks = []
            for li, layer in enumerate(model.encoder.layer):
                hooks.append(layer.intermediate.register_forward_pre_hook(
                    lambda mod, args, li=li: got.__setitem__(("in", li), args[0][0].clone())))
                hooks.append(layer.output.register_forward_hook(
                    lambda mod, args, res, li=li: got.update({("out", li): res[0].clone(),
                                                              ("res", li): args[1][0].clone()})))
            enc = fast([texts[s]], truncation=True, max_length=max_len, return_tensors="pt")
            model(**enc)
            for h in hooks:
                h.remove()
            for li, layer in enumerate(model.encoder.layer):
                x, y = got[("in", li)], got[("out", li)]
                assert x.shape == (len(ids[s]), cfg.hidden_size) and torch.equal(x, got[("res", li)])
                ref = layer.output.LayerNorm(
                    layer.output.dense(F.gelu(layer.intermediate.dense(x))) + x)
                assert (ref - y).abs().max() < 1e-5
                out[f"ffn.{li}.input.{s:03d}"] = x
                out[f"ffn.{li}.output.{s:03d}"] = y

    # Pairs: every paraphrase pair ranks above every unrelated pair.
    pairs = [(SENTENCES.index(a), SENTENCES.index(b), sim) for a, b, sim in PAIRS]
    cos = {(a, b): float(emb[a] @ emb[b]) for a, b, _ in pairs}
    lo_sim = min(cos[(a, b)] for a, b, sim in pairs if sim)
    hi_unrel = max(cos[(a, b)] for a, b, sim in pairs if not sim)
    print(f"pairs: paraphrase cosine >= {lo_sim:.3f}, unrelated cosine <= {hi_unrel:.3f}")
    assert lo_sim > hi_unrel
    out["pairs"] = torch.tensor([[a, b] for a, b, _ in pairs], dtype=torch.float32)
    out["pairs_similar"] = torch.tensor([sim for _, _, sim in pairs], dtype=torch.float32)

    st_version = "not installed"
    if sentence_transformers is not None:
        st_version = sentence_transformers.__version__
        st = SentenceTransformer(MODEL_DIR, device="cpu")
        assert st.max_seq_length == max_len
        st_ids = [st.tokenize([t])["input_ids"][0].tolist() for t in SENTENCES]
        bad = [i for i in range(len(SENTENCES)) if st_ids[i] != ids[i]]
        print(f"sentence-transformers tokenize() vs ids: {len(bad)} sentences differ {bad}")
        assert not bad
        st_emb = torch.from_numpy(st.encode(SENTENCES, batch_size=BATCH, convert_to_numpy=True))
        d_st = (st_emb - emb).abs().max().item()
        print(f"sentence-transformers {st_version} encode() vs embeddings: max |diff| {d_st:.3g}")
        assert d_st < ALONE_TOL

    assert not disagreements, "the slow and fast tokenizers disagree (above)"

    meta = {
        "sentences": json.dumps(SENTENCES),
        "max_seq_length": str(max_len),
        "ffn_sentences": json.dumps(FFN_SENTENCES),
        "model": f"sentence-transformers/all-MiniLM-L6-v2, model.safetensors sha256 {model_sha}",
        "generator": (f"scripts/make_minilm_golden.py, torch {torch.__version__}, transformers "
                      f"{transformers.__version__}, tokenizers {tokenizers.__version__}, sentence-transformers "
                      f"{st_version}, numpy {np.__version__}"),
    }
    write_safetensors(path, out, meta)
    print(f"wrote {len(SENTENCES)} sentences, {len(out)} tensors, {os.path.getsize(path)} bytes to {path}")


if __name__ == "__main__":
    main()
