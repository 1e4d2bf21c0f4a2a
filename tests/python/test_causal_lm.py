"""ffn.CausalLM on the quantized GGUF of scripts/make_llama_gguf_golden.py
(tests/data/gguf/llama_q.*) against what transformers made of it, and its
errors (a random Hugging Face directory of scripts/make_llama_golden.py for
the missing chat template); the same code as ffn generate, whose Hugging Face
paths tests/models/test_causal_lm.cpp covers."""
import json
import os

import numpy as np
import pytest

import ffn

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
GGUF = os.path.join(DATA, "gguf", "llama_q.gguf")
CASES = json.load(open(os.path.join(DATA, "gguf", "llama_q.json"), encoding="utf-8"))


def test_fp32_logits_and_greedy_match_transformers():
    lm = ffn.CausalLM.load(GGUF, compute="fp32")
    assert not lm.quantized and lm.config["kv_heads"] == 2
    for k, ids in enumerate(CASES["prompts"]):
        got, want = lm.logits(ids), np.array(CASES["logits"][k], dtype=np.float32)
        assert got.shape == want.shape
        assert (np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)).max() <= 2e-3
        assert lm.generate(ids, max_new_tokens=12) == CASES["greedy"][k]


def test_native_generate_text_tokens_and_streaming():
    lm = ffn.CausalLM.load(GGUF)
    assert lm.quantized
    for t, ids in zip(CASES["texts"], CASES["text_ids"]):
        assert lm.tokenize(t) == ids
        assert lm.decode(ids) == t.replace("<|im_start|>", "").replace("<|im_end|>", "")
    assert lm.tokenize(lm.chat_prompt("hi there")) == CASES["chat_ids"]
    seen = []
    out = lm.generate(CASES["prompts"][2], max_new_tokens=12, on_token=seen.append)
    assert out == CASES["greedy"][2] and seen == out
    first3 = []
    out = lm.generate(CASES["prompts"][2], max_new_tokens=12, on_token=lambda i: first3.append(i) or len(first3) < 3)
    assert out == CASES["greedy"][2][:3] == first3
    text = lm.generate("The feed-forward network", max_new_tokens=5)
    assert isinstance(text, str)
    a = lm.generate(CASES["prompts"][1], temperature=1.0, seed=3, max_new_tokens=20)
    assert a == lm.generate(CASES["prompts"][1], temperature=1.0, seed=3, max_new_tokens=20)


def test_bad_input_raises_ffn_error():
    lm = ffn.CausalLM.load(GGUF)
    with pytest.raises(ffn.Error, match="outside the vocabulary"):
        lm.logits([0, 10**6])
    with pytest.raises(ffn.Error, match="--top-p"):
        lm.generate([1, 2], top_p=0.0)
    with pytest.raises(ffn.Error, match="compute"):
        ffn.CausalLM.load(GGUF, compute="int3")
    with pytest.raises(ffn.Error, match="no chat template"):
        ffn.CausalLM.load(os.path.join(DATA, "llama", "mha_odd")).chat_prompt("hi")
    with pytest.raises(ffn.Error, match="nothing-here"):
        ffn.CausalLM.load(os.path.join(DATA, "nothing-here"))
