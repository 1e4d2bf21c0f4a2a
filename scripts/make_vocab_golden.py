"""Hostile texts' ids on llama.cpp's real vocabularies, as each model's own
tokenizer.json runs them in Hugging Face tokenizers (issue 48):
tests/data/vocab/hostile.json, read by tests/text/test_bpe.cpp.

The GGUF vocabularies (scripts/setup.sh extracts them from the llama-cpp-python
sdist) carry tokens, merges and token types, not the tokenizer.json they came
from, so each is rebuilt as its model's tokenizer.json writes it:
  llama-bpe (Llama 3): BPE with ignore_merges, Split(Llama 3's expression,
      Isolated), ByteLevel without its expression;
  qwen2: NFC, then the same with Qwen2's expression, without ignore_merges;
  gpt-2: ByteLevel with GPT-2's expression;
and llama-spm (SentencePiece) as transformers' GGUF loader builds it, which
is Llama 2's tokenizer.json;
control and user-defined tokens (types 3 and 4) added as special tokens, as
those files list them. transformers' own GGUF loader (GGUFQwen2Converter,
GGUFGPTConverter) is checked to give the same ids where it builds the same
tokenizer (qwen2 and gpt-2, texts without special tokens). It builds GPT-2's
expression for Llama 3 files, so llama-bpe has no such check.

    .venv/bin/python scripts/make_vocab_golden.py [--models DIR]
"""
import argparse
import json
import os

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

TEXTS = [
    "",
    "Hello world",
    "DON'T YOU'LL we'Ve THEY'RE it'S",
    "1234567890 3.14159 1,000,000 12345678901234567890",
    "٣٤٥ ١٢٣ １２３ ½ ² Ⅻ",
    "   leading and trailing spaces   ",
    "tabs\t\tand\nnewlines\n\n\nand\r\ncarriage\rreturns",
    "\u00a0non-breaking\u00a0spaces\u3000and ideographic",
    "émigré naïve café Ångström ﬁ ſ ß ẞ",
    "e\u0301 a\u0300\u0323 combining marks",
    "Здравствуй, мир! Γειά σου κόσμε",
    "مرحبا بالعالم שלום עולם",
    "我想在apple工作1314151天～ 日本語のテキスト 한국어",
    "កាន់តែពិសេសអាចខលចេញ ภาษาไทย",
    "👋🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🦙.cpp 😁?",
    "def f(x):\n    return x**2  # square\n\n\tif x >= 0: pass",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "<html><body class=\"x\">&amp;&lt;</body></html>",
    "!!!???...,,,;;;::: ---___***",
    "a" * 300,
    " " * 40 + "x" + "\n" * 20,
    "mixed123words456and7890digits",
    "<|begin_of_text|>special<|eot_id|> tokens <|im_start|>user\nhi<|im_end|><|endoftext|>",
    "<|im_start|system not closed <|eot_id",
    "\u200b\u200c\u200d zero widths \ufeff BOM",
    "\U0001d400\U0001d401 math bold 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
]


def reader_fields(path):
    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]

    def ints(key):
        f = r.fields[key]
        return [int(f.parts[i][0]) for i in f.data]

    return strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges"), ints("tokenizer.ggml.token_type")


def own_tokenizer(path, kind):
    tokens, merges, types = reader_fields(path)
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab, [tuple(m.split(" ", 1)) for m in merges], ignore_merges=(kind == "llama-bpe"))
    tok = Tokenizer(bpe)
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    if kind == "gpt-2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3 if kind == "llama-bpe" else QWEN2), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=(types[i] == 3), normalized=False)
                            for i in range(len(tokens)) if types[i] in (3, 4)])
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/ffn/llama.cpp-models"))
    a = ap.parse_args()
    out = {}
    # SentencePiece (llama-spm, Llama 2's): transformers' own GGUF loader (GGUFLlamaConverter: BPE from
    # the scores with byte fallback, Prepend("▁") and Replace(" ", "▁")), which is Llama 2's tokenizer.json.
    from transformers import AutoTokenizer
    spm = AutoTokenizer.from_pretrained(a.models, gguf_file="ggml-vocab-llama-spm.gguf")
    ids = [spm.encode(t, add_special_tokens=False) for t in TEXTS]
    out["llama-spm"] = {"texts": TEXTS, "ids": ids, "decoded": [spm.decode(i) for i in ids]}
    for kind in ("llama-bpe", "qwen2", "gpt-2"):
        path = os.path.join(a.models, f"ggml-vocab-{kind}.gguf")
        tok = own_tokenizer(path, kind)
        ids = [tok.encode(t, add_special_tokens=False).ids for t in TEXTS]
        if kind != "llama-bpe":  # transformers' GGUF loader builds the same tokenizer
            from transformers import AutoTokenizer
            hf = AutoTokenizer.from_pretrained(a.models, gguf_file=os.path.basename(path))
            for t, i in zip(TEXTS, ids):
                if "<|" not in t:
                    assert hf.encode(t, add_special_tokens=False) == i, (kind, t)
        out[kind] = {"texts": TEXTS, "ids": ids, "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids]}
    dest = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "vocab", "hostile.json")
    with open(dest, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
    print(dest, {k: sum(map(len, v["ids"])) for k, v in out.items()})


if __name__ == "__main__":
    main()
