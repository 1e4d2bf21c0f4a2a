#!/usr/bin/env python3
"""The family models of tests/data/families converted by llama.cpp's own
converter (issue 48): convert_hf_to_gguf.py from the vendored llama.cpp of
the llama-cpp-python sdist, in the developer-only torch 2 environment (its
import needs torch >= 2; see scripts/make_qwen3_golden.py), never in setup or
CI. The files are committed as tests/data/families/NAME.converted.gguf and
tests/models/test_families.cpp checks them against transformers' logits.

The converter needs a tokenizer: each model gets a small SentencePiece
tokenizer.model of its vocabulary size (<unk>, <s>, </s>, "▁", then words),
which the converter writes as a llama-type vocabulary. Qwen2's and Qwen3's
converters identify a byte-level tokenizer by the hash of its output on a
fixed text, which only their real 151k-token vocabularies give, so they are
not converted here (their GGUF files come from make_family_golden.py's writer,
which follows the converter's code).

    ~/.cache/ffn/devvenv/venv/bin/pip install protobuf==4.25.5
    ~/.cache/ffn/devvenv/venv/bin/python scripts/convert_family_golden.py \\
        --llama-cpp ~/.cache/ffn/bench/llama_cpp_python-0.3.36/vendor/llama.cpp tests/data/families
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

NAMES = ["llama_bias", "llama3_rope", "gemma2_gguf", "phi3", "phi3_longrope"]


def tokenizer_model(n, path):
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    for p, t in [("<unk>", 2), ("<s>", 3), ("</s>", 3), ("\u2581", 1)]:
        x = m.pieces.add()
        x.piece, x.score, x.type = p, 0.0, t
    i = 0
    while len(m.pieces) < n:
        x = m.pieces.add()
        x.piece, x.score, x.type = ("x" if i % 2 else "\u2581w") + str(i), -float(i), 1
        i += 1
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = n
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id, m.trainer_spec.pad_id = 0, 1, 2, -1
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    with open(path, "wb") as f:
        f.write(m.SerializeToString())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("out", nargs="?", default="tests/data/families")
    a = ap.parse_args()
    for name in NAMES:
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, name)
            shutil.copytree(os.path.join(a.out, name), d)
            with open(os.path.join(d, "config.json")) as f:
                vocab = json.load(f)["vocab_size"]
            tokenizer_model(vocab, os.path.join(d, "tokenizer.model"))
            dest = os.path.join(a.out, name + ".converted.gguf")
            subprocess.run([sys.executable, os.path.join(a.llama_cpp, "convert_hf_to_gguf.py"), d, "--outfile", dest,
                            "--outtype", "f32"], check=True, capture_output=True)
            print(dest, os.path.getsize(dest))


if __name__ == "__main__":
    main()
