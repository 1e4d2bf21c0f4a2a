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


def test_chat_conversations_in_the_models_template():
    lm = ffn.CausalLM.load(GGUF)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "café?"}]
    prompt = lm.chat_prompt(msgs)
    assert lm.chat_prompt("hi") == lm.chat_prompt([{"role": "user", "content": "hi"}])
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        print("SKIPPED: transformers' template compiler is not importable; chat_prompt checked against itself only")
    else:
        want = _compile_jinja_template(lm.chat_template).render(
            messages=msgs, tools=None, documents=None, add_generation_prompt=True,
            bos_token=lm.decode([lm.config["bos"]], skip_special=False),
            eos_token=lm.decode([lm.config["eos"]], skip_special=False))
        assert prompt == want
    # generate(messages, chat=True) is the template's prompt, generated.
    ids = lm.tokenize(prompt)
    want_ids = lm.generate(ids, max_new_tokens=8)
    text = lm.generate(msgs, chat=True, max_new_tokens=8)
    assert text == lm.decode([i for i in want_ids if i < lm.config["vocab"]])
    # A stop string ends the text before it (an ASCII one: a random model's text is mostly stray bytes).
    stops = [c for c in text[1:] if c.isascii() and c.isalnum()]
    assert stops, text
    assert lm.generate(msgs, chat=True, max_new_tokens=8, stop=[stops[0]]) == text[:text.index(stops[0])]
    with pytest.raises(ffn.Error, match="stop strings end text"):
        lm.generate([1, 2], stop=["x"])
    with pytest.raises(ffn.Error, match="messages"):
        lm.chat_prompt(42)
    assert lm.chat_prompt(msgs, template_vars={"unused": True}) == prompt
    with pytest.raises(ffn.Error, match="template_vars"):
        lm.chat_prompt(msgs, template_vars=[1])
    with pytest.raises(ffn.Error, match="template_vars: only with chat=True"):
        lm.generate("hi", template_vars={"a": 1})


def test_chat_session_keeps_its_cache_between_turns():
    lm = ffn.CausalLM.load(GGUF)
    chat = lm.chat(system="Be brief.")
    history = [{"role": "system", "content": "Be brief."}]
    last_prompt = 0
    for turn in ["hello there", "two plus two?"]:
        pieces = []
        r = chat.say(turn, max_new_tokens=6, on_text=pieces.append)
        history.append({"role": "user", "content": turn})
        assert r["ids"] == lm.generate(lm.tokenize(lm.chat_prompt(history)), max_new_tokens=6)
        assert "".join(pieces) == r["text"]
        assert r["reused_tokens"] >= last_prompt and r["reused_tokens"] < r["prompt_tokens"]
        last_prompt = r["prompt_tokens"]
        history.append(chat.messages[-1])
    assert chat.messages == history
    with pytest.raises(ffn.Error, match="past the context"):
        chat.say("x " * 400)
    assert chat.messages == history
